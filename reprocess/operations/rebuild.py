"""Rebuild a target into a shadow table from the log start, verify it, and swap it in atomically.

A backfill with ``mode=rebuild`` is how a change that cannot be applied in place (a type
change, a new key, a dropped column) reaches the target. The live table stays untouched and
served throughout:

1. planning registers the spec's version without migrating the live table and creates an
   empty shadow ``<table>__rebuild`` with the new schema;
2. the Spark job always runs it in batches (child runs): each batch merges into the shadow
   and commits on its own, advancing neither the ledger nor the committed ranges, so a killed
   rebuild resumes after its last committed batch;
3. the commit task verifies the shadow (every batch committed; every key's newest valid
   record of every partition is in it, read back from Kafka) and then, in ONE transaction under
   the pipeline's lock: renames the live table to ``<table>__old_<UTC time>`` (kept until the
   user drops it), the shadow to the live name, points the ledger and the committed ranges at
   what the rebuild read, makes the spec version current, and marks the run committed.

Runs planned against the old table are fenced at their commit: the spec version they were
planned under is no longer the live table's (``commit._check_spec_version``), or the ledger
moved under their compare-and-set.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from psycopg2 import sql
from sqlalchemy import Connection, Engine, text

from reprocess.core.errors import ReprocessError
from reprocess.core.ordering import OrderingMode
from reprocess.core.ranges import OffsetRange
from reprocess.core.runs import RunState
from reprocess.core.spec import PipelineSpec
from reprocess.postgres import queries, store
from reprocess.postgres.commit import CommitResult, sum_committed_batches
from reprocess.postgres.db import pg_cursor
from reprocess.postgres.target import create_target_sql, shadow_spec, target_identifier

log = logging.getLogger(__name__)

_DEAD_OFFSETS: Final = text(
    'SELECT "offset" FROM reprocess.dead_letters WHERE pipeline = :pipeline AND topic = :topic '
    'AND partition = :partition AND "offset" >= :start AND "offset" < :end'
)
_FORGET_COMMITTED: Final = text("DELETE FROM reprocess.committed_ranges WHERE pipeline = :pipeline")
_PRIMARY_KEY_NAME: Final = text(
    "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(:table) AND contype = 'p'"
)
_SET_LIVE_VERSION: Final = text(
    "UPDATE reprocess.pipelines SET spec_version = (SELECT coalesce(spec_version, 0) FROM reprocess.runs "
    "WHERE run_id = :run_id), spec = CAST(:spec AS jsonb), updated_at = now() WHERE name = :pipeline"
)


def prepare_shadow(conn: Connection, spec: PipelineSpec, run_id: str) -> None:
    """Mark the run a rebuild and start its shadow empty (whatever an abandoned rebuild left goes)."""
    shadow = shadow_spec(spec)
    store.mark_rebuild(conn, run_id)
    with pg_cursor(conn) as cur:
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(target_identifier(shadow)))
        cur.execute(create_target_sql(shadow))
    log.info("rebuild run_id=%s pipeline=%s shadow=%s created", run_id, spec.name, shadow.qualified_target)


def _key_of(spec: PipelineSpec, value: bytes | None) -> tuple[Any, ...] | None:
    try:
        doc = json.loads(value or b"")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    key = []
    for c in spec.key_columns:
        node: Any = doc
        for part in c.path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return None
        key.append(str(node))
    return tuple(key)


def _missing_keys(
    engine: Engine, spec: PipelineSpec, kafka: Mapping[str, Any], r: OffsetRange, dead: set[int]
) -> tuple[int, int]:
    """(keys missing from the target, records read) for one partition's window range."""
    newest: dict[tuple[Any, ...], int] = {}
    records = 0
    from reprocess.kafka.reader import read_range

    for batch in read_range(kafka, r):
        for record in batch.select(["offset", "value"]).to_pylist():
            records += 1
            if record["offset"] in dead:
                continue
            key = _key_of(spec, record["value"])
            if key is not None:
                newest[key] = record["offset"]
    if not newest:
        return 0, records
    key_cols = sql.SQL(", ").join(sql.Identifier(k) for k in spec.key)
    query = sql.SQL(
        "SELECT {cols}, _kafka_topic, _kafka_partition, _kafka_offset FROM {target} WHERE ({cols}) IN ({values})"
    )
    found: dict[tuple[Any, ...], tuple[str, int, int]] = {}
    keys = list(newest)
    with engine.connect() as conn:
        raw = pg_cursor(conn)
        for i in range(0, len(keys), 5000):
            chunk = keys[i : i + 5000]
            values = sql.SQL(", ").join(sql.SQL("({})").format(sql.SQL(", ").join(map(sql.Literal, k))) for k in chunk)
            raw.execute(query.format(cols=key_cols, target=target_identifier(spec), values=values))
            for row in raw.fetchall():
                found[tuple(str(x) for x in row[: len(spec.key)])] = row[len(spec.key) :]
    missing = 0
    for key, offset in newest.items():
        found_row = found.get(key)
        # Present and at least as new (same partition, same or later offset), or moved on by
        # another partition's/ordering column's newer record: the target holds a newer version.
        if found_row is None or (
            spec.ordering.mode is OrderingMode.OFFSET
            and found_row[0] == r.topic
            and found_row[1] == r.partition
            and found_row[2] < offset
        ):
            missing += 1
    return missing, records


def verify_shadow(engine: Engine, kafka: Mapping[str, Any], spec: PipelineSpec, run_id: str) -> dict[str, int]:
    """Reconcile the shadow against Kafka before it may replace the live table.

    Every key's newest valid record in the rebuilt ranges must be in the shadow (the check
    reconciliation makes of the live table, read from Kafka with confluent-kafka, not Spark).

    Raises
    ------
    ReprocessError
        Naming the partitions whose keys are missing; nothing was swapped.
    """
    shadow = shadow_spec(spec)
    with engine.connect() as conn:
        plan = store.load_plan(conn, run_id)
        dead = {
            r.tp: {o for (o,) in conn.execute(_DEAD_OFFSETS, {"pipeline": spec.name, "topic": r.topic,
                                                              "partition": r.partition, "start": r.start,
                                                              "end": r.end})}
            for r in plan.ranges
        }  # fmt: skip
    missing, records = {}, 0
    for r in plan.ranges:
        if r.width:
            gone, read = _missing_keys(engine, shadow, kafka, r, dead[r.tp])
            records += read
            if gone:
                missing[str(r.tp)] = gone
    if missing:
        raise ReprocessError(
            f"{spec.name}: rebuild {run_id} is incomplete: keys missing from {shadow.qualified_target}: {missing}. "
            f"Nothing was swapped; {spec.qualified_target} is unchanged. Re-run the rebuild."
        )
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT count(*) FROM {shadow.qualified_target}")).scalar_one()
    return {"records_checked": records, "shadow_rows": int(rows)}


def swap_in(engine: Engine, kafka: Mapping[str, Any], spec: PipelineSpec, run_id: str) -> CommitResult:
    """Verify the rebuilt shadow, then swap it in with the ledger in one transaction; idempotent."""
    with engine.connect() as conn:
        state = conn.execute(queries.RUN_STATE, {"run_id": run_id}).scalar()
    if state == RunState.COMMITTED:
        from reprocess.postgres.commit import commit_run

        return commit_run(engine, spec, run_id)  # answers "already committed"
    checked = verify_shadow(engine, kafka, spec, run_id)
    shadow = shadow_spec(spec)
    dated = f"{spec.target_table[:43]}__old_{datetime.now(UTC):%Y%m%d%H%M%S}"
    with engine.begin() as conn:
        conn.execute(queries.PIPELINE_LOCK, {"pipeline": spec.name})
        run = conn.execute(queries.LOCK_RUN, {"run_id": run_id}).one()
        if run.state != RunState.STAGED:
            raise ReprocessError(f"{spec.name}: rebuild {run_id} is {run.state}, not staged; run the Spark stage")
        totals = sum_committed_batches(conn, run_id)
        if totals is None:
            raise ReprocessError(f"{spec.name}: rebuild {run_id} has no committed batches; run the Spark stage")
        plan = store.load_plan(conn, run_id)
        _rename(conn, spec, spec.target_table, dated)
        _rename(conn, shadow, shadow.target_table, spec.target_table)
        conn.execute(_FORGET_COMMITTED, {"pipeline": spec.name})
        for r in plan.ranges:
            params = {"pipeline": spec.name, "run_id": run_id, "topic": r.topic, "partition": r.partition,
                      "start": r.start, "end": r.end, "new": r.end}  # fmt: skip
            conn.execute(queries.RESET_LEDGER, params)
            conn.execute(queries.INSERT_COMMITTED_RANGE, params)
        conn.execute(_SET_LIVE_VERSION, {"pipeline": spec.name, "run_id": run_id, "spec": json.dumps(spec.as_dict())})
    log.info("rebuild run_id=%s pipeline=%s swapped in: %s rows, previous table kept as %s.%s %s", run_id,
             spec.name, checked["shadow_rows"], spec.target_schema, dated, totals)  # fmt: skip
    return CommitResult(run_id, False, **totals)


def _rename(conn: Connection, spec: PipelineSpec, table: str, new: str) -> None:
    """Rename a table and its primary key, so the next shadow can take the freed constraint name."""
    current = dataclasses.replace(spec, target_table=table)
    with pg_cursor(conn) as cur:
        name = target_identifier(current).as_string(cur)
    pkey = conn.execute(_PRIMARY_KEY_NAME, {"table": name}).scalar()
    with pg_cursor(conn) as cur:
        if pkey is not None:
            cur.execute(
                sql.SQL("ALTER TABLE {} RENAME CONSTRAINT {} TO {}").format(
                    target_identifier(current), sql.Identifier(pkey), sql.Identifier(f"{new[:58]}_pkey")
                )
            )
        cur.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(target_identifier(current), sql.Identifier(new)))
