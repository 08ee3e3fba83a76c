"""The hostile-value corpus on the real stack: each case produced as one Kafka record, and what a
run left in PostgreSQL read back with every column (or checked against each case, :func:`run_and_check`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from reprocess.core.runs import RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.kafka.clients import make_admin, make_producer
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import run_spark_stage
from tests.support.hostile_corpus import TOPIC_MAX_BYTES, Case


def produce_corpus(kafka_config: dict[str, Any], topic: str, cases: list[Case]) -> dict[str, int]:
    """One partition, one record per case (its name as the key), on a topic that takes values of
    up to TOPIC_MAX_BYTES; returns each case's offset from the broker's delivery reports."""
    from confluent_kafka.admin import NewTopic

    admin = make_admin(kafka_config)
    topic_config = {"max.message.bytes": str(TOPIC_MAX_BYTES)}
    for fut in admin.create_topics([NewTopic(topic, 1, 1, config=topic_config)], request_timeout=15).values():
        fut.result()
    producer = make_producer(kafka_config, **{"message.max.bytes": TOPIC_MAX_BYTES})
    offsets: dict[str, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets[msg.key().decode()] = msg.offset()

    for case in cases:
        producer.produce(topic, key=case.name.encode(), value=case.value, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    return offsets


def snapshot(engine: Any, spec: PipelineSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The target's rows and the pipeline's dead letters, every column (bytea as bytes)."""
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT * FROM {spec.qualified_target} ORDER BY _kafka_offset")).all()
        dead = conn.execute(
            text('SELECT * FROM reprocess.dead_letters WHERE pipeline = :p ORDER BY "offset"'), {"p": spec.name}
        ).all()
    return [_plain(r) for r in rows], [_plain(d) for d in dead]


def _plain(row: Any) -> dict[str, Any]:
    return {k: bytes(v) if isinstance(v, memoryview) else v for k, v in row._mapping.items()}


def run_and_check(engine: Any, kafka_config: dict[str, Any], spec: PipelineSpec, cases: list[Case]) -> None:
    """Produce ``cases`` to the spec's topic, back it up in one run, and assert each case ends as it
    says: its row stored with the columns it names, or a dead letter whose error holds its ``error``."""
    offsets = produce_corpus(kafka_config, spec.topics[0], cases)
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), f"{spec.name}_run")
    run_spark_stage(spec, plan.run_id)
    commit_stored(engine, spec, plan.run_id)
    rows, dead_letters = snapshot(engine, spec)
    stored = {r["_kafka_offset"]: r for r in rows}
    dead = {d["offset"]: d["error"] for d in dead_letters}
    for case in cases:
        offset = offsets[case.name]
        if case.row is not None:
            assert offset in stored, (case.name, dead.get(offset))
            assert {c: stored[offset][c] for c in case.row} == case.row, case.name
        else:
            assert case.error is not None and case.error in dead.get(offset, ""), (case.name, dead.get(offset))
