"""Stage rows without Spark: the commit protocol's input written by the product's own stage writer.

A test states the records a run read, already parsed (the Spark job's output shape), and
:func:`stage_and_commit` plans the run, COPYs the rows with :class:`reprocess.spark.stage_task.StageTask`
(exactly as the Spark tasks do) and commits it through :func:`reprocess.runner.start.commit_stored`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg2
import pyarrow as pa
from sqlalchemy import Engine

from reprocess.core.ranges import OffsetRange
from reprocess.core.runs import RunKind, RunState
from reprocess.core.spec import ColumnType, PipelineSpec
from reprocess.core.stage_rows import DEAD, ROW, TOMBSTONE, stage_columns
from reprocess.formats.specs import parse_spec
from reprocess.postgres import store
from reprocess.postgres.commit import CommitResult
from reprocess.postgres.db import libpq_url
from reprocess.postgres.stage import STAGE_SCHEMA, create_stage, stage_types
from reprocess.runner.start import commit_stored
from reprocess.spark.stage_task import StageTask

T0 = datetime(2026, 11, 1, tzinfo=UTC)

_ARROW: dict[ColumnType, pa.DataType] = {
    ColumnType.TEXT: pa.string(),
    ColumnType.BIGINT: pa.int64(),
    ColumnType.INTEGER: pa.int32(),
    ColumnType.DOUBLE: pa.float64(),
    ColumnType.NUMERIC: pa.decimal128(38, 9),
    ColumnType.BOOLEAN: pa.bool_(),
    ColumnType.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
}


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record as the Spark job stages it: parsed ``values`` (None = a dead letter);
    a tombstone (``tombstones: delete``) has only its key columns in ``values``; one the spec keeps
    as a dead letter (``tombstones: dead_letter``) has None, and no raw value."""

    partition: int
    offset: int
    values: Mapping[str, Any] | None
    error: str = "malformed JSON or not a JSON object: x"
    topic: str | None = None  # the spec's first topic when None
    tombstone: bool = False


def ordering_spec(name: str, ordering: Any) -> PipelineSpec:
    """A spec of key ``id`` and columns ``v`` (bigint, required) and ``s`` on topic ``name``, in
    the given ``ordering``: enough for a test that stages rows by hand."""
    return parse_spec(
        {
            "name": name,
            "topics": [name],
            "key": ["id"],
            "columns": {"id": "text", "v": {"type": "bigint", "required": True}, "s": "text"},
            "ordering": ordering,
            "target_table": f"{name}.items",
        },
        source=f"{name}.yaml",
    )


def text_spec(name: str) -> PipelineSpec:
    """A spec of key ``id`` and one text column ``s`` on topic ``name``, offset-ordered: the smallest
    a test that stages rows by hand needs."""
    return parse_spec(
        {"name": name, "topics": [name], "key": ["id"], "columns": {"id": "text", "s": "text"},
         "target_table": f"{name}.items"},
        source=f"{name}.yaml",
    )  # fmt: skip


def _schema(spec: PipelineSpec, as_text: bool = False) -> pa.Schema:
    """The Arrow schema of the stage's columns: a spec column's by its type (with ``as_text``, text
    in PostgreSQL's input syntax, which the COPY casts), the others' by the PostgreSQL type the
    product's stage gives them (:func:`reprocess.postgres.stage.stage_types`)."""
    declared = {c.name: c.type for c in spec.columns}
    return pa.schema([
        (c, pa.string() if as_text and c in declared else _ARROW[declared.get(c) or ColumnType(t)])
        for c, t in stage_types(spec).items()
    ])  # fmt: skip


def _stage_row(spec: PipelineSpec, r: Record, as_text: bool = False) -> dict[str, Any]:
    """The record's stage row: every stage column, NULL where the record sets nothing."""
    good = r.values is not None
    row: dict[str, Any] = dict.fromkeys(stage_columns(spec))
    if good:
        row.update({k: Decimal(v) if isinstance(v, str) and _is_numeric(spec, k) and not as_text else v
                    for k, v in r.values.items()})  # fmt: skip
    row.update(
        {
            "_kind": (TOMBSTONE if r.tombstone else ROW) if good else DEAD,
            "_kafka_topic": r.topic or spec.topics[0],
            "_kafka_partition": r.partition,
            "_kafka_offset": r.offset,
            "_kafka_timestamp": T0 + timedelta(seconds=r.offset),
            "_records": 1,
            "_error": None if good else r.error,
            "_raw_key": None if good else b"k".hex().upper(),
            "_raw_value": None if good or r.tombstone else f"bad-{r.partition}-{r.offset}".encode().hex().upper(),
        }
    )
    return row


def _is_numeric(spec: PipelineSpec, name: str) -> bool:
    return any(c.name == name and c.type is ColumnType.NUMERIC for c in spec.columns)


def write_stage(db_url: str, spec: PipelineSpec, run_id: str, records: Sequence[Record], as_text: bool = False) -> int:
    """(Re)create the run's stage and COPY the records into it with the product's stage writer;
    ``as_text``: the records' values are PostgreSQL's input text of the columns' types."""
    with psycopg2.connect(libpq_url(db_url)) as pg:
        oid = create_stage(pg, spec, run_id)
    pg.close()
    table = f"{STAGE_SCHEMA}.{spec.stage_table(run_id)}"
    copier = StageTask(table, oid, tuple(stage_columns(spec)), libpq_url(db_url))
    schema = _schema(spec, as_text)
    batch = pa.RecordBatch.from_pylist([_stage_row(spec, r, as_text) for r in records], schema=schema)
    return sum(b.column("rows")[0].as_py() for b in copier(iter([batch])))


def plan_ranges(engine: Engine, spec: PipelineSpec, run_id: str, kind: str, ranges: Iterable[OffsetRange]) -> None:
    """Store a planned run with these ranges (what snapshot_run stores after a Kafka snapshot)."""
    version, _warnings = store.ensure_pipeline(engine, spec)
    with engine.begin() as conn:
        store.save_ranges(
            conn, spec, RunKind(kind), {}, run_id, state=RunState.PLANNED, ranges=list(ranges), spec_version=version
        )


def mark_staged(engine: Engine, run_id: str, rows: int) -> None:
    with engine.begin() as conn:
        store.mark_staged(conn, run_id, rows)


def stage_and_commit(
    engine: Engine,
    db_url: str,
    spec: PipelineSpec,
    run_id: str,
    records: Sequence[Record],
    *,
    kind: str = "backfill",
    as_text: bool = False,
) -> CommitResult:
    """Plan the records' offset span per partition, stage the records, commit the run (``as_text``:
    :func:`write_stage`'s)."""
    spans: dict[tuple[str, int], list[int]] = {}
    for r in records:
        spans.setdefault((r.topic or spec.topics[0], r.partition), []).append(r.offset)
    ranges = [OffsetRange(t, p, min(o), max(o) + 1) for (t, p), o in sorted(spans.items())]
    plan_ranges(engine, spec, run_id, kind, ranges)
    mark_staged(engine, run_id, write_stage(db_url, spec, run_id, records, as_text))
    return commit_stored(engine, spec, run_id)
