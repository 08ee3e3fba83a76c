"""Tombstones delete in order (spec ``tombstones: delete``): a replay never resurrects a key.

The first tests commit through the real protocol with stage rows written by the product's stage
writer (no Spark); the last reads real tombstones (null values) from the broker with Spark.
Expectations are written out from the records, not read from the product.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.core.runs import RunKind, RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import parse_spec
from reprocess.postgres.target import MARKERS_SCHEMA
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import orders_spec, run_spark_stage
from tests.support.staging import Record, stage_and_commit


def _spec(name: str) -> PipelineSpec:
    return parse_spec(
        {"name": name, "topics": [name], "key": ["id"], "columns": {"id": "text", "s": "text"},
         "tombstones": "delete", "target_table": f"{name}.items"},
        source=f"{name}.yaml",
    )  # fmt: skip


def _rows(engine, spec) -> dict[str, tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT id, s, _kafka_offset FROM {spec.qualified_target}")).all()
    return {r[0]: (r[1], r[2]) for r in rows}


def _markers(engine, spec) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(text(f'SELECT id, _kafka_offset FROM {MARKERS_SCHEMA}."{spec.name}"')).all()
    return dict(rows)


def _put(offset: int, key: str, s: str, partition: int = 0) -> Record:
    return Record(partition, offset, {"id": key, "s": s})


def _delete(offset: int, key: str, partition: int = 0) -> Record:
    return Record(partition, offset, {"id": key}, tombstone=True)


def test_insert_delete_then_replay_of_the_insert_keeps_the_key_deleted(engine, db_url, unique_name):
    spec = _spec(unique_name)
    inserts = [_put(0, "a", "a0"), _put(1, "b", "b1")]
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", inserts)
    deleted = stage_and_commit(engine, db_url, spec, f"{unique_name}-2", [_delete(2, "a")])
    assert deleted.rows_deleted == 1
    assert _rows(engine, spec) == {"b": ("b1", 1)} and _markers(engine, spec) == {"a": 2}

    replay = stage_and_commit(engine, db_url, spec, f"{unique_name}-3", inserts)
    assert (replay.rows_upserted, replay.rows_deleted) == (0, 0)
    assert _rows(engine, spec) == {"b": ("b1", 1)} and _markers(engine, spec) == {"a": 2}


def test_delete_then_newer_insert_is_present_and_older_delete_replay_changes_nothing(engine, db_url, unique_name):
    spec = _spec(unique_name)
    # One run holds insert, delete and re-insert of a: the newest (the re-insert) wins in the stage.
    stage_and_commit(
        engine, db_url, spec, f"{unique_name}-1", [_put(0, "a", "a0"), _delete(1, "a"), _put(2, "a", "a2")]
    )
    assert _rows(engine, spec) == {"a": ("a2", 2)} and _markers(engine, spec) == {}
    # A delete committed first (a backfill of a later slice), then the older insert: still deleted,
    # then a newer insert in a later run: present, and the marker is gone.
    stage_and_commit(engine, db_url, spec, f"{unique_name}-2", [_delete(5, "b")])
    stage_and_commit(engine, db_url, spec, f"{unique_name}-3", [_put(4, "b", "b4")])
    assert "b" not in _rows(engine, spec) and _markers(engine, spec) == {"b": 5}
    stage_and_commit(engine, db_url, spec, f"{unique_name}-4", [_put(6, "b", "b6")])
    assert _rows(engine, spec) == {"a": ("a2", 2), "b": ("b6", 6)} and _markers(engine, spec) == {}
    # Replaying every older record, deletes included, changes nothing.
    older = [_put(0, "a", "a0"), _delete(1, "a"), _put(4, "b", "b4"), _delete(5, "b")]
    replay = stage_and_commit(engine, db_url, spec, f"{unique_name}-5", older)
    assert (replay.rows_upserted, replay.rows_deleted) == (0, 0)
    assert _rows(engine, spec) == {"a": ("a2", 2), "b": ("b6", 6)} and _markers(engine, spec) == {}


@pytest.mark.integration("spark")
def test_real_tombstones_from_the_broker_delete_and_a_replay_does_not_resurrect(kafka_config, engine, unique_name):
    """Null values on a real topic, keyed by the order id as plain text (the Kafka key, since a
    tombstone has no payload); a key that maps to no column value is a dead letter."""
    from reprocess.kafka import demo_data
    from reprocess.kafka.clients import make_producer

    spec = orders_spec(unique_name, unique_name, tombstones="delete", max_dead_letter_ratio=0.5)
    demo_data.create_topic(kafka_config, unique_name, 1)
    producer = make_producer(kafka_config)

    def send(key: bytes | None, value: dict[str, Any] | None) -> None:
        producer.produce(unique_name, key=key, value=None if value is None else json.dumps(value).encode())
        producer.flush()  # delivered before the next plan

    def order(order_id: str, status: str) -> dict[str, Any]:
        return {"order_id": order_id, "customer_id": "c", "status": status, "amount": "1.5",
                "updated_at": "2026-11-01T00:00:00Z"}  # fmt: skip

    send(b"o-1", order("o-1", "new"))  # offset 0
    send(b"o-2", order("o-2", "new"))  # 1
    send(b"o-1", None)  # 2: deletes o-1
    send(None, None)  # 3: a tombstone without a key: dead letter
    first = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-1")
    run_spark_stage(spec, first.run_id)
    result = commit_stored(engine, spec, first.run_id)
    assert (result.rows_deleted, result.dead_letters) == (0, 1)  # o-1's newest record in the run is its tombstone

    def statuses() -> dict[str, str]:
        with engine.connect() as conn:
            return dict(conn.execute(text(f"SELECT order_id, status FROM {spec.qualified_target}")).all())

    assert statuses() == {"o-2": "new"}
    slice_ = json.dumps({unique_name: {"0": 0}}), json.dumps({unique_name: {"0": 2}})
    replay = RunRequest.from_params(
        {"start_mode": "offsets", "start_value": slice_[0], "end_mode": "offsets", "end_value": slice_[1]},
        RunKind.BACKFILL,
    )
    snapshot_and_migrate(engine, kafka_config, spec, replay, f"{unique_name}-2")
    run_spark_stage(spec, f"{unique_name}-2")
    assert commit_stored(engine, spec, f"{unique_name}-2").rows_upserted == 0
    assert statuses() == {"o-2": "new"}

    send(b"o-1", order("o-1", "reopened"))  # 4: a newer insert brings it back
    second = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-3")
    run_spark_stage(spec, second.run_id)
    commit_stored(engine, spec, second.run_id)
    assert statuses() == {"o-1": "reopened", "o-2": "new"}
