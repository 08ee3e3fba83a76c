"""Verify a rebuild's shadow against the rebuild's own Spark output before it may replace the live table.

The check is reconciliation's own (:func:`reprocess.postgres.key_checks.key_checks_sql`), and like
reconciliation's it reads what the Spark job staged: each batch's commit kept its stage's newest
record per key (:mod:`reprocess.postgres.rebuild_keys`), so the records checked were decoded,
filtered (``where``, a ``transform`` that drops rows) and derived (``expr`` key and ordering
columns) exactly as the records merged. For every key whose newest kept record the batches
staged, the shadow's state (its row or, with ``tombstones: delete``, its deletion marker) must
carry that record or a newer one; keys compare with the target's column types, and a tombstone is
a record like any other. What it finds is a key a batch's merge lost, or a row an older record
replaced (a batch merged out of order, a row changed under the rebuild). Records the rebuild made
dead letters are not kept: they are accounted for as dead letters.
"""

from __future__ import annotations

from typing import Final

from psycopg2 import sql
from sqlalchemy import Engine

from reprocess.core.errors import ReprocessError
from reprocess.core.spec import PipelineSpec
from reprocess.postgres.db import one_row, pg_cursor
from reprocess.postgres.key_checks import key_checks_sql
from reprocess.postgres.merge import newest_per_key
from reprocess.postgres.rebuild_keys import rebuild_keys_identifier
from reprocess.postgres.target import shadow_spec, target_identifier

_NEWEST: Final = sql.Identifier("_rebuild_newest")


def verify_shadow(engine: Engine, spec: PipelineSpec, run_id: str) -> dict[str, int]:
    """Check the shadow of rebuild ``run_id`` against the newest record per key its batches staged;
    returns what was checked.

    Raises
    ------
    ReprocessError
        Naming the partitions whose keys are missing or stale, with example keys (or saying the
        batches' keys are gone); nothing was swapped.
    """
    shadow = shadow_spec(spec)
    kept = rebuild_keys_identifier(spec)
    with engine.begin() as conn, pg_cursor(conn) as cur:
        cur.execute("SELECT to_regclass(%s)", (kept.as_string(cur),))
        if one_row(cur)[0] is None:
            raise ReprocessError(
                f"{spec.name}: rebuild {run_id} cannot be verified: {kept.as_string(cur)}, the keys its batches "
                f"staged, is gone (another rebuild of the pipeline started since). Nothing was swapped; "
                f"{spec.qualified_target} is unchanged. Run the rebuild again (a backfill with mode=rebuild).",
                pipeline=spec.name,
                run_id=run_id,
            )
        # Across batches, the newest per key (the commit kept each batch's own newest).
        cur.execute(sql.SQL("CREATE TEMP TABLE {} ON COMMIT DROP AS {}").format(_NEWEST, newest_per_key(shadow, kept)))
        cur.execute(key_checks_sql(shadow, _NEWEST))
        found = cur.fetchall()
        cur.execute(sql.SQL("SELECT count(*) FROM {}").format(target_identifier(shadow)))
        (rows,) = one_row(cur)
    bad = {f"{topic}[{partition}]": (missing, stale, [*(m or []), *(s or [])])
           for topic, partition, _, missing, stale, m, s in found if missing or stale}  # fmt: skip
    if bad:
        detail = "; ".join(f"{tp}: {m} missing, {s} stale (e.g. {', '.join(ex)})" for tp, (m, s, ex) in bad.items())
        raise ReprocessError(
            f"{spec.name}: rebuild {run_id} is incomplete: {shadow.qualified_target} does not hold the newest record "
            f"of every key: {detail}. Nothing was swapped; {spec.qualified_target} is unchanged. Re-run the rebuild.",
            pipeline=spec.name,
            run_id=run_id,
        )
    return {"keys_checked": sum(int(row[2]) for row in found), "shadow_rows": int(rows)}
