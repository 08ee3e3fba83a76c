"""Spec changes the ledger cannot follow are refused before anything is read, and the refusal is
recorded on the run (so its note says why): an ordering switch to a column the stored rows lack,
a changed topic set under offset ordering, a changed target table, and a target that another
pipeline owns. Expected rows are the records each test writes; nothing is derived from the product.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from sqlalchemy import text

from reprocess.core.errors import OrderingError, SchemaChangeError, SpecError
from reprocess.core.ranges import OffsetRange
from reprocess.core.runs import RunKind, RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import load_specs, parse_spec
from reprocess.kafka import demo_data
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.staging import Record, mark_staged, plan_ranges, stage_and_commit, write_stage

pytestmark = [pytest.mark.integration("postgres"), pytest.mark.integration("kafka")]

ACKNOWLEDGED = {"start_mode": "ledger", "acknowledge_partition_change": True}
ROWS = [Record(0, 0, {"id": "a", "s": "a0"}), Record(0, 1, {"id": "b", "s": "b1"})]


def _raw(name: str, **extra: object) -> dict[str, object]:
    return {"name": name, "topics": [name], "key": ["id"], "columns": {"id": "text", "s": "text"},
            "target_table": f"{name}.items", **extra}  # fmt: skip


def _spec(name: str, **extra: object) -> PipelineSpec:
    return parse_spec(_raw(name, **extra), source=f"{name}.yaml")


def _topic(kafka_config, topic: str, records: int) -> None:
    """A topic holding ``records`` records on its one partition (the plans snapshot it); one batch
    each, so a broker that reports the last batch's base offset + 1 as the log end is exact."""
    from confluent_kafka import Producer

    demo_data.create_topic(kafka_config, topic, 1)
    producer = Producer(kafka_config)
    for _ in range(records):
        producer.produce(topic, key=b"k", value=b'{"id": "x", "s": "x"}', partition=0)
        assert producer.flush(30) == 0


def _run(engine, run_id: str):
    with engine.connect() as conn:
        return conn.execute(text("SELECT state, error FROM reprocess.runs WHERE run_id = :r"), {"r": run_id}).one()


def _target(engine, table: str) -> dict[str, str] | None:
    with engine.connect() as conn:
        if conn.execute(text("SELECT to_regclass(:t)"), {"t": table}).scalar() is None:
            return None
        return dict(conn.execute(text(f"SELECT id, s FROM {table}")).all())


def _nullable(engine, schema: str, table: str) -> dict[str, bool]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT column_name, is_nullable = 'YES' FROM information_schema.columns WHERE table_schema = :s "
                 "AND table_name = :t"), {"s": schema, "t": table}
        )  # fmt: skip
        return dict(rows.all())


def test_ordering_by_a_column_the_stored_rows_lack_is_refused_and_recorded(engine, db_url, kafka_config, unique_name):
    """Issue 25 item 1: switching to column ordering on a newly added column left every stored row
    with NULL there, so no newer record could ever replace it (and reconciliation said ok)."""
    _topic(kafka_config, unique_name, 3)
    v1 = _spec(unique_name)
    stage_and_commit(engine, db_url, v1, f"{unique_name}-1", ROWS)

    # v2 orders by a version column the table does not have yet (what the partition-change error advises).
    columns = {"id": "text", "s": "text", "v": {"type": "bigint", "required": True}}
    v2 = _spec(unique_name, columns=columns, ordering={"mode": "column", "column": "v"})
    with pytest.raises(OrderingError, match=r"changes ordering offset → v, with committed positions.*mode=rebuild"):
        snapshot_and_migrate(engine, kafka_config, v2, RunRequest.incremental(), f"{unique_name}-2")
    acknowledged = RunRequest.from_params(ACKNOWLEDGED, RunKind.BACKFILL)
    with pytest.raises(SchemaChangeError, match=r"orders by v, but 2 rows of .* have no v \(NULL\).*mode=rebuild"):
        snapshot_and_migrate(engine, kafka_config, v2, acknowledged, f"{unique_name}-3")
    assert "v" not in _nullable(engine, unique_name, "items")  # nothing was changed
    assert _target(engine, v1.qualified_target) == {"a": "a0", "b": "b1"}
    for run_id, why in ((f"{unique_name}-2", "changes ordering offset → v"), (f"{unique_name}-3", "have no v (NULL)")):
        state, error = _run(engine, run_id)
        assert state == "failed" and why in error, (run_id, state, error)

    # Ordering by a column every stored row holds is applied once acknowledged, and the column is
    # NOT NULL from then on, so no row can ever lose its ordering value.
    v3 = _spec(unique_name, columns={"id": "text", "s": {"type": "text", "required": True}},
               ordering={"mode": "column", "column": "s"})  # fmt: skip
    plan = snapshot_and_migrate(engine, kafka_config, v3, acknowledged, f"{unique_name}-4")
    assert any("changes ordering offset → s (acknowledged)" in w for w in plan.warnings), plan.warnings
    assert _nullable(engine, unique_name, "items")["s"] is False


def test_a_topic_set_change_under_offset_ordering_needs_a_rebuild(engine, db_url, kafka_config, unique_name):
    """Issue 25 item 2: a renamed topic compared its offsets with the old topic's (by topic name),
    so every update of an existing key was dropped."""
    v1 = _spec(unique_name)
    stage_and_commit(engine, db_url, v1, f"{unique_name}-1", ROWS)
    renamed = f"{unique_name}_v10"
    _topic(kafka_config, renamed, 2)
    v2 = _spec(unique_name, topics=[renamed])
    with pytest.raises(OrderingError, match=rf"changes topics \['{unique_name}'\] → \['{renamed}'\].*mode=rebuild"):
        snapshot_and_migrate(engine, kafka_config, v2, RunRequest.incremental(), f"{unique_name}-2")
    assert _run(engine, f"{unique_name}-2").state == "failed"

    # A rebuild is allowed (it re-derives the table from the new topic's log start) ...
    rebuild = RunRequest.from_params({"mode": "rebuild", "dry_run": True}, RunKind.BACKFILL)
    plan = snapshot_and_migrate(engine, kafka_config, v2, rebuild, f"{unique_name}-3")
    assert [(r.topic, r.start) for r in plan.ranges] == [(renamed, 0)]
    # ... while the live table keeps its spec until the swap: an incremental is still refused.
    with pytest.raises(OrderingError, match="changes topics"):
        snapshot_and_migrate(engine, kafka_config, v2, RunRequest.incremental(), f"{unique_name}-4")


def test_a_changed_target_table_is_refused_until_the_table_is_moved(engine, db_url, kafka_config, unique_name):
    """Issue 25 item 8: the new table started empty while the ledger said everything was committed."""
    _topic(kafka_config, unique_name, 3)
    v1 = _spec(unique_name)
    stage_and_commit(engine, db_url, v1, f"{unique_name}-1", ROWS)
    v2 = _spec(unique_name, target_table=f"{unique_name}.items_v2")
    # A run staged under v1 is not committed into v2's table (the spec file changed in between).
    plan_ranges(engine, v1, f"{unique_name}-0", "backfill", [OffsetRange(unique_name, 0, 2, 3)])
    mark_staged(engine, f"{unique_name}-0", write_stage(db_url, v1, f"{unique_name}-0", [Record(0, 2, {"id": "c"})]))
    with pytest.raises(SchemaChangeError, match=rf"planned for {v1.qualified_target} but .* now names"):
        commit_stored(engine, v2, f"{unique_name}-0")
    with pytest.raises(SchemaChangeError, match=rf"target_table from {v1.qualified_target} to {v2.qualified_target}"
                       r".*ALTER TABLE"):  # fmt: skip
        snapshot_and_migrate(engine, kafka_config, v2, RunRequest.incremental(), f"{unique_name}-2")
    assert _target(engine, v2.qualified_target) is None
    assert _run(engine, f"{unique_name}-2").state == "failed"

    with engine.begin() as conn:  # the remedy: move the table, so the ledger still describes it
        conn.execute(text(f"ALTER TABLE {v1.qualified_target} RENAME TO items_v2"))
    plan = snapshot_and_migrate(engine, kafka_config, v2, RunRequest.incremental(), f"{unique_name}-3")
    assert [(r.start, r.end) for r in plan.ranges] == [(2, 3)]  # on from the ledger
    assert _target(engine, v2.qualified_target) == {"a": "a0", "b": "b1"}


def test_a_target_table_belongs_to_one_pipeline(engine, db_url, kafka_config, unique_name, tmp_path: Path):
    """Issue 25 item 3: two pipelines on one table compared topic names, ignored each other's
    deletion markers, and a rebuild of one swapped out the other's rows."""
    shared = f"{unique_name}.shared"
    first, second = _spec(f"{unique_name}_a", target_table=shared), _spec(f"{unique_name}_b", target_table=shared)
    for spec in (first, second):
        (tmp_path / f"{spec.name}.yaml").write_text(yaml.safe_dump(_raw(spec.name, target_table=shared)))
    with pytest.raises(SpecError, match=rf"target_table': {shared} is also the target of .*{first.name}.yaml"):
        load_specs(tmp_path)

    # Specs deployed apart: the registry refuses the second before it touches anything.
    stage_and_commit(engine, db_url, first, f"{unique_name}-1", ROWS)
    with pytest.raises(SpecError, match=rf"{shared} belongs to pipeline '{first.name}'"):
        snapshot_and_migrate(engine, kafka_config, second, RunRequest.incremental(), f"{unique_name}-2")
    assert _target(engine, shared) == {"a": "a0", "b": "b1"}
    with engine.connect() as conn:
        names = conn.execute(text("SELECT name FROM reprocess.pipelines WHERE target_table = :t"), {"t": shared})
        assert list(names.scalars()) == [first.name]

    # The bookkeeping schemas (deletion markers among them) are nobody's target.
    with pytest.raises(SpecError, match="bookkeeping"):
        _spec(unique_name, target_table=f"reprocess_deleted.{first.name}")


_LSN = {"type": "bigint", "path": "$source.lsn", "required": True}
_CDC = {"format": "debezium", "ordering": {"mode": "column", "column": "v"},
        "columns": {"id": "text", "s": "text", "v": _LSN}}  # fmt: skip

# Issue 39 item 4: an ordering column derived by an ``expr`` (or rewritten by a ``transform:``).
_MILLIS = {"type": "bigint", "required": True, "expr": "unix_millis(ts)"}
_BY_EXPR = {"ordering": {"mode": "column", "column": "v"},
            "columns": {"id": "text", "s": "text", "ts": "timestamptz", "v": _MILLIS}}  # fmt: skip
_FN = {"transform": "tests.support.transform_fns:v1", "transform_version": "1"}


@pytest.mark.parametrize(
    ("v1", "v2", "says"),
    [
        ({}, {"format": "avro"}, r"changes format 'json' → 'avro'; encoding 'json' → 'avro'"),
        (_CDC, {**_CDC, "encoding": "avro"}, r"changes encoding 'json' → 'avro'"),
        ({"format": "avro"}, {"format": "avro", "schema_registry": "other_registry"},
         r"changes schema_registry 'schema_registry_default' → 'other_registry'"),
        (_CDC, {**_CDC, "columns": {**_CDC["columns"], "v": {"type": "bigint", "path": "$source.txId",
                                                              "required": True}}},
         r"changes the ordering column 'v''s path '\$source.lsn' → '\$source.txId'"),
        (_BY_EXPR, {**_BY_EXPR, "columns": {**_BY_EXPR["columns"], "v": {**_MILLIS, "expr": "unix_seconds(ts)"}}},
         r"changes the ordering column 'v''s expr 'unix_millis\(ts\)' → 'unix_seconds\(ts\)'"),
        ({**_BY_EXPR, **_FN}, {**_BY_EXPR, **_FN, "transform_version": "2"},
         r"changes transform_version '1' → '2' \(the new function may derive the ordering column 'v': if it does "
         r"not, declare what it sets with transform_derives\)"),
        # Declared on the new side only: the stored rows were ordered by what the old function may have set.
        ({**_BY_EXPR, **_FN}, {**_BY_EXPR, **_FN, "transform_version": "2", "transform_derives": ["s"]},
         r"changes transform_version '1' → '2' \(the old function declared nothing, so the stored rows' "
         r"ordering column 'v' may hold values it set\)"),
        ({}, {"tombstones": "delete"}, r"changes tombstones 'dead_letter' → 'delete'"),
        ({"tombstones": "delete"}, {}, r"changes tombstones 'delete' → 'dead_letter'"),
    ],
    ids=["format", "encoding", "registry", "ordering-source", "ordering-expr", "ordering-transform",
         "ordering-transform-declared-after", "tombstones-on",
         "tombstones-off"],
)  # fmt: skip
def test_a_change_of_how_records_decode_needs_a_rebuild(engine, db_url, kafka_config, unique_name, v1, v2, says):
    """Issue 26: the records already loaded would decode to other rows (or order by other values)
    than the ones stored from them, while the ledger says they are loaded."""
    _topic(kafka_config, unique_name, 2)
    rows = [Record(0, i, {"id": "a", "s": f"a{i}", **({"v": i} if "ordering" in v1 else {})}) for i in range(2)]
    stage_and_commit(engine, db_url, _spec(unique_name, **v1), f"{unique_name}-1", rows)
    with pytest.raises(SchemaChangeError, match=says + r", with committed positions.*Nothing was planned\. Revert "
                       r"the change, or rebuild.*mode=rebuild"):  # fmt: skip
        snapshot_and_migrate(
            engine, kafka_config, _spec(unique_name, **v2), RunRequest.incremental(), f"{unique_name}-2"
        )
    assert _run(engine, f"{unique_name}-2").state == "failed"
    rebuild = RunRequest.from_params({"mode": "rebuild", "dry_run": True}, RunKind.BACKFILL)
    snapshot_and_migrate(engine, kafka_config, _spec(unique_name, **v2), rebuild, f"{unique_name}-3")  # a rebuild may
