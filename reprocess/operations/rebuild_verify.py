"""Verify a rebuild's shadow against Kafka before it may replace the live table.

The check is reconciliation's own (:func:`reprocess.postgres.key_checks.key_checks_sql`): for
every key whose newest valid record lies in the rebuilt ranges, the shadow's state (its row or,
with ``tombstones: delete``, its deletion marker) must carry that record or a newer one. Keys
are compared in Postgres with the target's column types, so a numeric ``1.5`` matches the stored
``1.500000000``, ``"2026-11-01T00:00:00Z"`` matches a timestamptz and ``5`` a double ``5.0``;
a tombstone is a record like any other, so a deleted key is right when its marker is.

The records are read here with confluent-kafka (the swap runs in the commit task, without
Spark), each key field taken, per the spec's format, as the text the Spark decoder reads
(:mod:`reprocess.operations.record_fields`), and cast by Postgres; a key that Postgres cannot
cast is counted missing (never swapped silently).
Records the rebuild stored as dead letters are skipped: they are accounted for as dead letters.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any, Final

from psycopg2 import sql
from sqlalchemy import Connection, Engine, text

from reprocess.core.errors import ReprocessError
from reprocess.core.ranges import OffsetRange
from reprocess.core.runs import RunMode
from reprocess.core.spec import ColumnSpec, PipelineSpec
from reprocess.core.stage_rows import ROW, TOMBSTONE
from reprocess.operations.record_fields import avro_decoder, json_doc, record_fields
from reprocess.postgres import store
from reprocess.postgres.db import pg_cursor
from reprocess.postgres.dead_letters import dead_letters_owner
from reprocess.postgres.key_checks import key_checks_sql
from reprocess.postgres.target import shadow_spec, target_identifier

_DEAD_OFFSETS: Final = text(
    'SELECT "offset" FROM reprocess.dead_letters WHERE pipeline = :pipeline AND topic = :topic '
    'AND partition = :partition AND "offset" >= :start AND "offset" < :end'
)
_RAW: Final = sql.Identifier("_rebuild_records")
_NEWEST: Final = sql.Identifier("_rebuild_newest")


def verify_shadow(
    engine: Engine,
    kafka: Mapping[str, Any],
    spec: PipelineSpec,
    run_id: str,
    registry: Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """Reconcile the shadow of rebuild ``run_id`` against Kafka; returns what was checked.
    ``registry`` is the Schema Registry client config an Avro pipeline's records need.

    Raises
    ------
    ReprocessError
        Naming the partitions whose keys are missing or stale, with example keys; nothing was swapped.
    """
    shadow = shadow_spec(spec)
    owner = dead_letters_owner(spec, RunMode.REBUILD)
    with engine.begin() as conn:
        plan = store.load_plan(conn, run_id)
        conn.execute(text("SET LOCAL TimeZone = 'UTC'"))  # Spark's session zone for times without one
        _create_raw(conn, shadow)
        records = 0
        for r in plan.ranges:
            dead = {o for (o,) in conn.execute(_DEAD_OFFSETS, _range_params(owner, r))}
            records += _load_range(conn, shadow, kafka, r, dead, registry)
        with pg_cursor(conn) as cur:
            cur.execute(_newest_sql(shadow))
            cur.execute(key_checks_sql(shadow, _NEWEST))
            found = cur.fetchall()
            cur.execute(sql.SQL("SELECT count(*) FROM {}").format(target_identifier(shadow)))
            (rows,) = cur.fetchone() or (0,)
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
    return {"records_checked": records, "keys_checked": sum(int(row[2]) for row in found), "shadow_rows": int(rows)}


def _range_params(owner: str, r: OffsetRange) -> dict[str, Any]:
    return {"pipeline": owner, "topic": r.topic, "partition": r.partition, "start": r.start, "end": r.end}


def _fields(spec: PipelineSpec) -> list[ColumnSpec]:
    """The columns the check needs from a record: the key, then the ordering column."""
    names = dict.fromkeys([*spec.key, *([spec.ordering.column] if spec.ordering.column else [])])
    by_name = {c.name: c for c in spec.columns}
    return [by_name[n] for n in names]


def _create_raw(conn: Connection, spec: PipelineSpec) -> None:
    columns = sql.SQL(", ").join(sql.SQL("{} text").format(sql.Identifier(c.name)) for c in _fields(spec))
    with pg_cursor(conn) as cur:
        cur.execute(
            sql.SQL(
                "CREATE TEMP TABLE {raw} ({columns}, _kind text NOT NULL, _kafka_topic text NOT NULL, "
                "_kafka_partition int NOT NULL, _kafka_offset bigint NOT NULL) ON COMMIT DROP"
            ).format(raw=_RAW, columns=columns)
        )


def _load_range(
    conn: Connection,
    spec: PipelineSpec,
    kafka: Mapping[str, Any],
    r: OffsetRange,
    dead: set[int],
    registry: Mapping[str, Any] | None,
) -> int:
    """COPY one range's valid records (key and ordering fields as text) into the raw table, one
    COPY per fetched batch (memory stays one batch, whatever the range's size)."""
    from reprocess.kafka.reader import read_range

    fields = _fields(spec)
    decode = avro_decoder(registry or {}, r.topic) if spec.needs_registry else json_doc
    copy = sql.SQL("COPY {} FROM STDIN (FORMAT csv, NULL '\\N')").format(_RAW)
    records = 0
    with pg_cursor(conn) as cur:
        for batch in read_range(kafka, r):
            out = io.StringIO()
            writer = csv.writer(out)
            for msg in batch:
                records += 1
                offset = int(msg.offset() or 0)
                found = None if offset in dead else record_fields(spec, fields, msg, decode)
                if found is not None:
                    deletes, values = found
                    kind = TOMBSTONE if deletes else ROW
                    texts = ["\\N" if v is None else v for v in values]
                    writer.writerow([*texts, kind, r.topic, r.partition, offset])
            out.seek(0)
            cur.copy_expert(copy, out)
    return records


def _newest_sql(spec: PipelineSpec) -> sql.Composed:
    """The newest record per key (rows and tombstones), typed as the target's columns.

    A text that Postgres cannot cast becomes NULL (``pg_input_is_valid``), so its key is
    reported missing instead of failing the check with a cast error.
    """
    typed = sql.SQL(", ").join(
        sql.SQL("CASE WHEN pg_input_is_valid({c}, {t}) THEN CAST({c} AS {type}) END AS {c}").format(
            c=sql.Identifier(c.name), t=sql.Literal(c.sql_type), type=sql.SQL(c.sql_type)
        )
        for c in _fields(spec)
    )
    return sql.SQL(
        "CREATE TEMP TABLE {newest} ON COMMIT DROP AS SELECT DISTINCT ON ({key}) * FROM "
        "(SELECT {typed}, _kind, _kafka_topic, _kafka_partition, _kafka_offset FROM {raw}) AS _t "
        "ORDER BY {key}, {order}"
    ).format(
        newest=_NEWEST,
        key=sql.SQL(", ").join(map(sql.Identifier, spec.key)),
        typed=typed,
        raw=_RAW,
        order=spec.ordering.newest_first_sql(),
    )
