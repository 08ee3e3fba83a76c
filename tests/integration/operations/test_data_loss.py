"""Real data loss by retention: the broker deletes old segments holding records the ledger never covered.

After a first run, the topic gets a ``retention.ms`` of 7 days: its records carry November 1
timestamps, so the broker (which checks retention every second here) deletes every segment
below the log end, records produced after the run included. The next run must stop with the
product's data-loss error naming the topic, each partition and its lost range; with
``allow_data_loss`` it records the loss and goes on from the new log start. The oracle is
``tests/support/oracle.py`` over the records that were read before the deletion and after it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from reprocess.core.errors import DataLossError
from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.runner.start import snapshot_and_migrate
from tests.support.helpers import (
    committed_ranges,
    ledger,
    log_ends,
    oracle_rows,
    orders_spec,
    plan_stage_commit,
    runs,
    target_rows,
)

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

WEEK_MS = 7 * 24 * 3600 * 1000


def _log_starts(kafka: dict[str, Any], topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(kafka)  # held: a collected client never completes its futures
    answers = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.earliest() for p in range(partitions)})
    return {tp.partition: f.result().offset for tp, f in answers.items()}


def _set_retention(kafka: dict[str, Any], topic: str, ms: int) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient(kafka)
    entry = ConfigEntry("retention.ms", str(ms), incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result()


def test_segments_deleted_by_retention_stop_the_run_with_the_lost_ranges_or_are_recorded_when_allowed(
    kafka_config, engine, unique_name
):
    kafka, topic = kafka_config, unique_name
    spec = orders_spec(unique_name, topic)
    demo_data.create_topic(kafka, topic, 2)
    first = demo_data.produce(kafka, topic, 2, demo_data.order_events(100, 3, seed=71), malformed=())
    plan_stage_commit(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-1")
    position = ledger(engine, spec)
    assert position == log_ends(first)

    unread = [
        (k.replace("o-", "u-"), {**ev, "order_id": ev["order_id"].replace("o-", "u-")})
        for k, ev in demo_data.order_events(80, 3, seed=72)
    ]
    lost = demo_data.produce(kafka, topic, 2, unread, malformed=())
    gone = log_ends(lost)
    _set_retention(kafka, topic, WEEK_MS)
    deadline = time.monotonic() + 60
    while _log_starts(kafka, topic, 2) != gone:
        assert time.monotonic() < deadline, f"retention deleted nothing in 60 s: {_log_starts(kafka, topic, 2)}"
        time.sleep(0.5)

    # The run stops before reading: the error names the topic, each partition and its lost range.
    with pytest.raises(DataLossError) as stopped:
        snapshot_and_migrate(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-2")
    message = str(stopped.value)
    for p in (0, 1):
        assert f"{topic}[{p}]" in message and f"[{position[p]}, {gone[p]})" in message, message
    assert "allow_data_loss" in message
    assert ledger(engine, spec) == position

    # Allowed: the loss is recorded in the run and the ledger goes on from the log start.
    allowed_request = RunRequest.from_params({"start_mode": "ledger", "allow_data_loss": True})
    allowed = plan_stage_commit(engine, kafka, spec, allowed_request, f"{unique_name}-3")
    assert sorted((x.partition, x.start, x.end) for x in allowed.lost) == [(p, position[p], gone[p]) for p in (0, 1)]
    assert ledger(engine, spec) == gone

    # Records produced now (current timestamps, kept by retention) are read by the next run.
    fresh = [
        (k.replace("o-", "f-"), {**ev, "order_id": ev["order_id"].replace("o-", "f-")})
        for k, ev in demo_data.order_events(50, 2, seed=73)
    ]
    now = demo_data.produce(kafka, topic, 2, fresh, malformed=(), base_time=datetime.now(UTC))
    plan_stage_commit(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-4")
    survived = demo_data.Produced(sorted(first.messages + now.messages))
    assert target_rows(engine, spec) == oracle_rows(survived)
    assert ledger(engine, spec) == log_ends(now)
    read = {p: [(a, b) for a, b in pieces if a < b] for p, pieces in committed_ranges(engine, spec).items()}
    assert read == {p: [(0, position[p]), (gone[p], log_ends(now)[p])] for p in (0, 1)}  # the gap is the loss
    states = {r.run_id: r.state for r in runs(engine, spec)}
    assert states[f"{unique_name}-2"] == "failed"
    assert [states[f"{unique_name}-{i}"] for i in (1, 3, 4)] == ["committed"] * 3
