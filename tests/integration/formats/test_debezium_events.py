"""Debezium change events produced directly (no connector): a change updated out of the spec's
``where`` takes its row out of the table, and a value gap in a column a later event left out is
healed from the record that sent the value, so the heal's re-check passes.

On real Kafka, Spark and Postgres. What each row must hold is written next to the events that
make it (the oracle), never computed by the product.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import text

from reprocess.core.errors import ReconciliationGap
from reprocess.core.runs import RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import read_spec
from reprocess.kafka import demo_data
from reprocess.kafka.clients import make_producer
from tests.support.helpers import backfill, plan_stage_commit, reconcile_over_connect

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]
BASE = datetime(2026, 11, 1, tzinfo=UTC)
WINDOW = (BASE, BASE + timedelta(days=1))
LEFT_OUT = "__debezium_unavailable_value"  # Debezium's placeholder for an unchanged TOASTed value


def _spec(name: str, **settings: Any) -> PipelineSpec:
    raw = {"name": name, "topics": [name], "format": "debezium", "key": ["id"], "target_table": f"{name}.items",
           "columns": {"id": "integer", "status": "text", "notes": "text"}, **settings}  # fmt: skip
    path = Path(os.environ["REPROCESS_PIPELINES_DIR"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return read_spec(path)


def _produce(kafka: dict[str, Any], topic: str, events: list[tuple[str, int, str, str]]) -> None:
    """(op, id, status, notes) change events on one partition, one second apart from BASE."""
    demo_data.create_topic(kafka, topic, 1)
    producer = make_producer(kafka)
    for i, (op, key, status, notes) in enumerate(events):
        ts = int((BASE + timedelta(seconds=i)).timestamp() * 1000)
        after = {"id": key, "status": status, "notes": notes}
        value = {"before": None, "after": after, "op": op, "source": {"ts_ms": ts}, "ts_ms": ts}
        producer.produce(topic, key=json.dumps({"id": key}).encode(), value=json.dumps(value).encode(), timestamp=ts)
    producer.flush()


def _rows(engine, spec) -> dict[int, tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT id, status, notes FROM {spec.qualified_target}"))
        return {r[0]: (r[1], r[2]) for r in rows}


def test_a_change_updated_out_of_the_where_deletes_its_row_and_sends_its_values_to_later_changes(
    kafka_config, engine, unique_name
):
    spec = _spec(unique_name, where="status <> 'test'")
    _produce(kafka_config, unique_name, [
        ("c", 1, "ok", "n1"),
        ("c", 2, "ok", "a1"),
        ("u", 1, "test", "n1"),  # 1 leaves the filter: the source row no longer matches, its row goes
        ("u", 2, "test", "a2"),  # 2 leaves it with new notes...
        ("u", 2, "ok", LEFT_OUT),  # ...and comes back, its notes unchanged since: a2
        ("c", 3, "test", "x"),  # never in the filter
    ])  # fmt: skip
    backfill(engine, kafka_config, spec, f"{unique_name}-1")
    assert _rows(engine, spec) == {2: ("ok", "a2")}
    assert all(v.ok for v in reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-c1"))

    # Cut between 2's change out of the filter and its comeback: the later run finds no stored row
    # for the notes its change left out, so the value is recorded incomplete (visible), never stale.
    cut = _spec(f"{unique_name}_cut", topics=[unique_name], where="status <> 'test'")
    for run, (start, end) in enumerate([(0, 4), (4, 6)]):
        offsets = {"start_mode": "offsets", "start_value": json.dumps({unique_name: {"0": start}}),
                   "end_mode": "offsets", "end_value": json.dumps({unique_name: {"0": end}})}  # fmt: skip
        plan_stage_commit(engine, kafka_config, cut, RunRequest.from_params(offsets), f"{unique_name}-cut{run}")
    assert _rows(engine, cut) == {2: ("ok", None)}
    with engine.connect() as conn:
        listed = conn.execute(text('SELECT key, "column" FROM reprocess.incomplete_values WHERE pipeline = :p'),
                              {"p": cut.name}).all()  # fmt: skip
    assert [tuple(r) for r in listed] == [({"id": 2}, "notes")]


def test_a_value_gap_in_a_left_out_column_heals_from_the_record_that_sent_it_and_its_recheck_passes(
    kafka_config, engine, unique_name
):
    spec = _spec(unique_name)
    _produce(kafka_config, unique_name, [
        ("c", 1, "new", "full notes"),
        ("c", 2, "new", "two"),
        ("u", 1, "paid", LEFT_OUT),  # notes unchanged: still "full notes"
    ])  # fmt: skip
    backfill(engine, kafka_config, spec, f"{unique_name}-1")
    assert _rows(engine, spec) == {1: ("paid", "full notes"), 2: ("new", "two")}
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {spec.qualified_target} SET notes = 'wrong' WHERE id = 1"))

    with pytest.raises(ReconciliationGap) as gap:
        reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-c1")
    assert "notes" in str(gap.value), str(gap.value)
    conf = gap.value.heal_conf
    print(conf)
    ranges = {k: conf[k] for k in ("start_mode", "start_value", "end_mode", "end_value")}
    plan_stage_commit(engine, kafka_config, spec, RunRequest.from_params(ranges), f"{unique_name}-heal")
    assert _rows(engine, spec) == {1: ("paid", "full notes"), 2: ("new", "two")}
    assert all(v.ok for v in reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-c2"))
