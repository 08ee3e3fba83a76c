"""Rebuild a target into a shadow table from the log start, verify it, and swap it in atomically.

A backfill with ``mode=rebuild`` is how a change that cannot be applied in place (a type
change, a new key, a dropped column) reaches the target. The live pipeline's state stays
untouched and served throughout. Its stages (:mod:`reprocess.core.stages`):

1. planning registers the spec's version without migrating the live table; the
   ``PrepareShadow`` stage (:func:`prepare_shadow`) creates the empty shadow state:
   ``<table>__rebuild`` with the new schema, its own deletion markers
   ``reprocess_deleted.<pipeline>__rebuild`` (the new key's columns), its own dead letters
   (``pipeline = '<pipeline>/rebuild'``) and the keys its batches stage (:mod:`reprocess.postgres.rebuild_keys`);
2. its ``Read`` stages always run in batches (child runs): each batch merges into the shadow
   state and commits on its own, advancing neither the ledger nor the committed ranges, nor
   resolving any live dead letter, so a killed rebuild resumes after its last committed batch
   and an abandoned one leaves the live pipeline as it was;
3. its ``Swap`` stage (:func:`swap_in`) verifies the shadow (every batch committed; reconciliation's key check of
   the newest record per key the batches' Spark job staged: :mod:`reprocess.operations.rebuild_verify`) and then, in
   ONE transaction under the pipeline's lock: refuses if the live table has rows the log no
   longer holds (their keys' records are older than the log start; ``allow_data_loss`` drops
   them, recorded as lost ranges of the run) or objects the swap cannot carry over (views,
   foreign keys, triggers, policies: :mod:`reprocess.postgres.attached`); carries over grants,
   indexes and publication membership; renames the live table and markers to
   ``…__old_<UTC time>`` (kept until the user drops them) and the shadow's to the live names;
   resolves the live dead letters whose records now parse and moves the rebuild's in; points
   the ledger and the committed ranges at what the rebuild read, makes the spec version
   current, and marks the run committed. A rebuild with nothing to read goes through the same
   swap; no rebuild is ever marked committed without it.

Runs planned against the old table are fenced at their commit: the spec version they were
planned under is no longer the live table's (``commit.check_spec_version``), or the ledger
moved under their compare-and-set.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Final

from psycopg2 import sql
from sqlalchemy import Connection, Engine, text

from reprocess.core.errors import ReprocessError, RunStateError
from reprocess.core.names import kept_table
from reprocess.core.runs import LostRange, RunMode, RunPlan, RunState
from reprocess.core.spec import PipelineSpec, TombstoneMode
from reprocess.operations.rebuild_verify import verify_shadow
from reprocess.postgres import attached, queries, store
from reprocess.postgres.batch_commit import sum_committed_batches
from reprocess.postgres.commit import CommitResult, commit_run, outcome_unknown_on_disconnect
from reprocess.postgres.db import pg_cursor
from reprocess.postgres.dead_letters import dead_letters_owner
from reprocess.postgres.rebuild_keys import create_rebuild_keys_sql, drop_rebuild_keys_sql
from reprocess.postgres.target import (
    MARKERS_SCHEMA,
    create_markers_sql,
    create_target_sql,
    markers_identifier,
    shadow_spec,
    target_identifier,
)

log = logging.getLogger(__name__)

_FORGET_COMMITTED: Final = text("DELETE FROM reprocess.committed_ranges WHERE pipeline = :pipeline")
_PRIMARY_KEY_NAME: Final = text(
    "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(:table) AND contype = 'p'"
)
_SET_LIVE_VERSION: Final = text(
    "UPDATE reprocess.pipelines SET spec_version = (SELECT coalesce(spec_version, 0) FROM reprocess.runs "
    "WHERE run_id = :run_id), spec = CAST(:spec AS jsonb), updated_at = now() WHERE name = :pipeline"
)
_ALLOWS_DATA_LOSS: Final = text(
    "SELECT coalesce((request->'parsed'->>'allow_data_loss')::boolean, false) FROM reprocess.runs "
    "WHERE run_id = :run_id"
)
_ADD_LOST_RANGES: Final = text(
    "UPDATE reprocess.runs SET lost_ranges = lost_ranges || CAST(:lost AS jsonb) WHERE run_id = :run_id"
)
# The rebuild's dead letters at its swap: the live ones inside the rebuilt ranges that the
# rebuild did not find dead are resolved by it; the rebuild's own become the pipeline's (a
# resolved one that fails again is reopened, as dead_letters_sql does); then they are forgotten.
_RESOLVE_LIVE_DEAD_LETTERS: Final = text(
    "UPDATE reprocess.dead_letters d SET resolved_run_id = :run_id, resolved_at = now() FROM reprocess.run_ranges r "
    "WHERE r.run_id = :run_id AND d.pipeline = :pipeline AND d.resolved_run_id IS NULL AND d.topic = r.topic "
    'AND d.partition = r.partition AND d."offset" >= r.start_offset AND d."offset" < r.end_offset '
    "AND NOT EXISTS (SELECT 1 FROM reprocess.dead_letters s WHERE s.pipeline = :owner AND s.topic = d.topic "
    'AND s.partition = d.partition AND s."offset" = d."offset")'
)
_MOVE_SHADOW_DEAD_LETTERS: Final = text(
    'INSERT INTO reprocess.dead_letters (pipeline, topic, partition, "offset", run_id, key, value, error, '
    'kafka_timestamp) SELECT :pipeline, topic, partition, "offset", run_id, key, value, error, kafka_timestamp '
    'FROM reprocess.dead_letters WHERE pipeline = :owner ON CONFLICT (pipeline, topic, partition, "offset") '
    "DO UPDATE SET run_id = EXCLUDED.run_id, error = EXCLUDED.error, resolved_run_id = NULL, resolved_at = NULL "
    "WHERE reprocess.dead_letters.resolved_run_id IS NOT NULL"
)
_FORGET_SHADOW_DEAD_LETTERS: Final = text("DELETE FROM reprocess.dead_letters WHERE pipeline = :owner")
# Its incomplete and moved values (Debezium, postgres.left_out) replace the live ones, as its table does.
_FORGET_SHADOW_INCOMPLETE: Final = text(
    "DELETE FROM reprocess.incomplete_values WHERE pipeline = :owner; "
    "DELETE FROM reprocess.moved_values WHERE pipeline = :owner"
)
_SWAP_INCOMPLETE: Final = text(
    "DELETE FROM reprocess.incomplete_values WHERE pipeline = :pipeline; "
    "UPDATE reprocess.incomplete_values SET pipeline = :pipeline WHERE pipeline = :owner; "
    "DELETE FROM reprocess.moved_values WHERE pipeline = :pipeline; "
    "UPDATE reprocess.moved_values SET pipeline = :pipeline WHERE pipeline = :owner"
)


def prepare_shadow(conn: Connection, spec: PipelineSpec, run_id: str) -> None:
    """Mark the run a rebuild and start its shadow state empty: table, deletion markers (with the
    new key's columns), dead letters and the keys its batches stage; whatever an abandoned rebuild
    left goes. Once per run: a retried planning task leaves the shadow of a run it already prepared
    (its batches stand)."""
    if store.run_mode(conn, run_id) is RunMode.REBUILD:
        log.info("rebuild run_id=%s pipeline=%s shadow already prepared", run_id, spec.name)
        return
    shadow = shadow_spec(spec)
    store.mark_rebuild(conn, run_id)
    conn.execute(_FORGET_SHADOW_DEAD_LETTERS, {"owner": dead_letters_owner(spec, RunMode.REBUILD)})
    conn.execute(_FORGET_SHADOW_INCOMPLETE, {"owner": dead_letters_owner(spec, RunMode.REBUILD)})
    with pg_cursor(conn) as cur:
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(target_identifier(shadow)))
        cur.execute(create_target_sql(shadow))
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(markers_identifier(shadow)))
        if spec.tombstones is TombstoneMode.DELETE:
            cur.execute(create_markers_sql(shadow))
        cur.execute(create_rebuild_keys_sql(shadow))
    log.info("rebuild run_id=%s pipeline=%s shadow=%s created", run_id, spec.name, shadow.qualified_target)


def swap_in(engine: Engine, spec: PipelineSpec, run_id: str) -> CommitResult:
    """Verify the rebuilt shadow, then swap it in with the ledger in one transaction; idempotent.

    A retry after a swap whose connection dropped learns what happened from the database: the
    state is read under the pipeline lock, so a first attempt's swap the server still holds is
    waited for, and a swap that committed is not done again.

    Raises
    ------
    ReprocessError
        The shadow is incomplete, the live table has rows the log no longer holds, or objects
        hang off it that the swap cannot carry over; the message names them and the remedy.
        Nothing was swapped.
    CommitInterrupted
        The connection dropped during the swap's commit; retrying is safe.
    """
    with engine.begin() as conn:
        conn.execute(queries.PIPELINE_LOCK, {"pipeline": spec.name})
        state = store.run_state(conn, run_id)
    if state == RunState.COMMITTED:
        return commit_run(engine, spec, run_id)  # answers "already committed"
    checked = verify_shadow(engine, spec, run_id)
    shadow = shadow_spec(spec)
    stamp = f"{datetime.now(UTC):%Y%m%d%H%M%S}"
    with outcome_unknown_on_disconnect(spec, run_id), engine.begin() as conn:
        conn.execute(queries.PIPELINE_LOCK, {"pipeline": spec.name})
        run = conn.execute(queries.LOCK_RUN, {"run_id": run_id}).one()
        if run.state != RunState.STAGED:
            raise RunStateError(
                f"{spec.name}: rebuild {run_id} is {run.state}, not staged; run the Spark stage",
                pipeline=spec.name,
                run_id=run_id,
            )
        plan = store.load_plan(conn, run_id)
        totals = sum_committed_batches(conn, run_id)
        if totals is None:
            if not plan.is_empty:
                raise RunStateError(
                    f"{spec.name}: rebuild {run_id} has no committed batches; run the Spark stage",
                    pipeline=spec.name,
                    run_id=run_id,
                )
            totals = {name: 0 for name in store.RUN_COUNTS}
            store.mark_committed(conn, run_id, totals)
        if _exists(conn, target_identifier(spec)):  # a pipeline's first run may be its rebuild
            _check_rows_beyond_the_log(conn, spec, plan)
            _carry_over(conn, spec, stamp)
            _rename(conn, spec.target_schema, spec.target_table, kept_table(spec.target_table, stamp))
        _rename(conn, shadow.target_schema, shadow.target_table, spec.target_table)
        if _exists(conn, markers_identifier(spec)):
            _rename(conn, MARKERS_SCHEMA, spec.markers_table or spec.name, kept_table(spec.name, stamp))
        if _exists(conn, markers_identifier(shadow)):
            _rename(conn, MARKERS_SCHEMA, shadow.markers_table, spec.markers_table or spec.name)
        dead = {"pipeline": spec.name, "owner": dead_letters_owner(spec, RunMode.REBUILD), "run_id": run_id}
        conn.execute(_RESOLVE_LIVE_DEAD_LETTERS, dead)
        conn.execute(_MOVE_SHADOW_DEAD_LETTERS, dead)
        conn.execute(_FORGET_SHADOW_DEAD_LETTERS, dead)
        conn.execute(_SWAP_INCOMPLETE, dead)
        conn.execute(_FORGET_COMMITTED, {"pipeline": spec.name})
        with pg_cursor(conn) as cur:
            cur.execute(drop_rebuild_keys_sql(spec))
        for r in plan.ranges:
            params = {"pipeline": spec.name, "run_id": run_id, "topic": r.topic, "partition": r.partition,
                      "start": r.start, "end": r.end, "new": r.end}  # fmt: skip
            conn.execute(queries.RESET_LEDGER, params)
            conn.execute(queries.INSERT_COMMITTED_RANGE, params)
        conn.execute(_SET_LIVE_VERSION, {"pipeline": spec.name, "run_id": run_id, "spec": json.dumps(spec.as_dict())})
        store.touch_target(conn, run_id)  # plans made before the swap describe another table
    log.info("rebuild run_id=%s pipeline=%s swapped in: %s, previous table kept as %s.%s %s", run_id,
             spec.name, checked, spec.target_schema, kept_table(spec.target_table, stamp), totals)  # fmt: skip
    return CommitResult(run_id, False, **totals)


def _carry_over(conn: Connection, spec: PipelineSpec, stamp: str) -> None:
    """Grants, indexes and publications move to the shadow; anything else hanging off the live
    table refuses the swap, by name (see :mod:`reprocess.postgres.attached`)."""
    with pg_cursor(conn) as cur:
        live = target_identifier(spec).as_string(cur)
    blocked = attached.blockers(conn, live)
    blocked += attached.carry_over(conn, spec, shadow_spec(spec), stamp)
    if blocked:
        raise ReprocessError(
            f"{spec.name}: the swap would leave these on the old table, bound to it, not to its name: "
            f"{'; '.join(blocked)}. Nothing was swapped. Drop them (or make them fit the new columns), run the "
            f"commit task again, then re-create them on the new {spec.qualified_target}.",
            pipeline=spec.name,
        )


def _check_rows_beyond_the_log(conn: Connection, spec: PipelineSpec, plan: RunPlan) -> None:
    """Refuse to drop live rows whose key the rebuild could not see: their newest record is older
    than the rebuilt range's start (retention deleted it) or on a partition it did not read.

    With ``allow_data_loss`` they are dropped and recorded as lost ranges of the run (per
    partition: from the oldest such row's offset to the rebuilt start).
    """
    beyond = _rows_beyond_the_log(conn, spec, plan)
    if not beyond:
        return
    total = sum(n for _, _, n, _, _ in beyond)
    detail = "; ".join(
        f"{t}[{p}]: {n} rows from offset {low}"
        + (f" below the log start {start}" if start is not None else " (not read)")
        for t, p, n, low, start in beyond
    )
    if not conn.execute(_ALLOWS_DATA_LOSS, {"run_id": plan.run_id}).scalar():
        raise ReprocessError(
            f"{spec.name}: the swap would drop {total} rows of {spec.qualified_target} whose records the log no "
            f"longer holds ({detail}): the rebuild read from the log start and could not re-derive them. Nothing "
            "was swapped. Keep the live table (revert the spec), or rebuild again with allow_data_loss=true to "
            "drop them (they are recorded as lost ranges of the run).",
            pipeline=spec.name,
            run_id=plan.run_id,
        )
    lost = [LostRange(t, p, low, start) for t, p, _, low, start in beyond if start is not None]
    conn.execute(_ADD_LOST_RANGES, {"run_id": plan.run_id, "lost": json.dumps([store.lost_dict(x) for x in lost])})
    log.warning("rebuild run_id=%s pipeline=%s drops %d rows the log no longer holds (allow_data_loss): %s",
                plan.run_id, spec.name, total, detail)  # fmt: skip


def _rows_beyond_the_log(
    conn: Connection, spec: PipelineSpec, plan: RunPlan
) -> list[tuple[str, int, int, int, int | None]]:
    """Per (topic, partition): live rows (and their lowest offset) with no state in the shadow
    whose record lies below the rebuilt start (or whose partition it did not read).

    Keys match on the key columns both tables have, the live value cast to the new type (a
    value that does not cast matches nothing); with no shared key column every such row counts.
    """
    shadow = shadow_spec(spec)
    live_columns = set(
        conn.execute(
            text("SELECT column_name FROM information_schema.columns WHERE table_schema = :s AND table_name = :t"),
            {"s": spec.target_schema, "t": spec.target_table},
        ).scalars()
    )
    shared = [c for c in spec.key_columns if c.name in live_columns]

    def match(alias: str) -> sql.Composable:
        if not shared:
            return sql.SQL("FALSE")
        return sql.SQL(" AND ").join(
            sql.SQL("{a}.{c} = CASE WHEN pg_input_is_valid(l.{c}::text, {t}) THEN CAST(l.{c}::text AS {type}) END")
            .format(a=sql.Identifier(alias), c=sql.Identifier(c.name), t=sql.Literal(c.sql_type),
                    type=sql.SQL(c.sql_type))
            for c in shared
        )  # fmt: skip

    markers = (
        sql.SQL(" AND NOT EXISTS (SELECT 1 FROM {} m WHERE {})").format(markers_identifier(shadow), match("m"))
        if _exists(conn, markers_identifier(shadow))
        else sql.SQL("")
    )
    query = sql.SQL(
        "SELECT l._kafka_topic, l._kafka_partition, count(*), min(l._kafka_offset), min(r.start) FROM {live} l "
        "LEFT JOIN (SELECT unnest(%(topics)s::text[]) AS topic, unnest(%(partitions)s::int[]) AS partition, "
        "unnest(%(starts)s::bigint[]) AS start) r ON r.topic = l._kafka_topic AND r.partition = l._kafka_partition "
        "WHERE (r.start IS NULL OR l._kafka_offset < r.start) "
        "AND NOT EXISTS (SELECT 1 FROM {shadow} s WHERE {match_s}){markers} GROUP BY 1, 2 ORDER BY 1, 2"
    ).format(live=target_identifier(spec), shadow=target_identifier(shadow), match_s=match("s"), markers=markers)
    params = {"topics": [r.topic for r in plan.ranges], "partitions": [r.partition for r in plan.ranges],
              "starts": [r.start for r in plan.ranges]}  # fmt: skip
    with pg_cursor(conn) as cur:
        cur.execute(query, params)
        return [(t, int(p), int(n), int(low), None if start is None else int(start)) for t, p, n, low, start in cur]


def _exists(conn: Connection, table: sql.Composed) -> bool:
    with pg_cursor(conn) as cur:
        cur.execute("SELECT to_regclass(%s)", (table.as_string(cur),))
        row = cur.fetchone()
    return row is not None and row[0] is not None


def _rename(conn: Connection, schema: str, table: str, new: str) -> None:
    """Rename a table and its primary key, so the next shadow can take the freed constraint name."""
    current = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))
    with pg_cursor(conn) as cur:
        name = current.as_string(cur)
    pkey = conn.execute(_PRIMARY_KEY_NAME, {"table": name}).scalar()
    with pg_cursor(conn) as cur:
        if pkey is not None:
            cur.execute(
                sql.SQL("ALTER TABLE {} RENAME CONSTRAINT {} TO {}").format(
                    current, sql.Identifier(pkey), sql.Identifier(f"{new[:58]}_pkey")
                )
            )
        cur.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(current, sql.Identifier(new)))
