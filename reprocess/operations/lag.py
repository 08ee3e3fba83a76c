"""A pipeline's lag read live: the broker's log ends against the ledger, and the age of the oldest
unread record, per partition.

The coverage page reads lag from the latest run's snapshot, which stands still while no run takes
one; this reads the broker now, so a stopped pipeline's lag keeps growing where it is watched
(the metrics of :mod:`reprocess.airflow.metrics`). The lag itself is the coverage page's rule
(:class:`reprocess.operations.coverage.PartitionCoverage`), so both say the same number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine

from reprocess.core.ranges import PartitionSnapshot, TopicPartition
from reprocess.core.spec import PipelineSpec
from reprocess.kafka.offsets import first_unread_timestamps, take_snapshot
from reprocess.operations.coverage import PartitionCoverage
from reprocess.postgres.ledger import ledger_positions


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    lag: int  # offsets between the ledger (the log start before the first commit) and the log end
    oldest_unread_seconds: float  # now minus the first unread record's timestamp; 0 when none is unread
    unstable: int = 0  # HW − LSO: offsets an open transaction holds back, in no lag until it ends


def live_lag(
    engine: Engine, kafka: Mapping[str, Any], spec: PipelineSpec, now: datetime | None = None
) -> list[PartitionLag]:
    """Per partition of the spec's topics: the lag and the oldest unread record's age, read now."""
    seen = now or datetime.now(UTC)
    snapshots, ledger, lags = ledger_lags(engine, kafka, spec, seen)
    lagging = [s for s in snapshots if lags[s.tp]]
    stamps = first_unread_timestamps(kafka, lagging, ledger) if lagging else {}
    return [
        PartitionLag(
            s.topic,
            s.partition,
            lags[s.tp],
            max(seen.timestamp() - stamps[s.tp] / 1000, 0.0) if s.tp in stamps else 0.0,
            s.unstable,
        )
        for s in snapshots
    ]


def ledger_lags(
    engine: Engine, kafka: Mapping[str, Any], spec: PipelineSpec, seen: datetime
) -> tuple[list[PartitionSnapshot], dict[TopicPartition, int], dict[TopicPartition, int]]:
    """The log now (no group read: the ledger is the position), the ledger's next offsets, and the
    lag per partition by the coverage page's rule; no record is read."""
    snapshots = take_snapshot(kafka, spec, spec.topics, with_group=False)
    with engine.connect() as conn:
        ledger = ledger_positions(conn, spec.name)
    lags = {
        s.tp: PartitionCoverage(
            pipeline=spec.name, topic=s.topic, partition=s.partition, log_start=s.log_start,
            ledger=ledger.get(s.tp), log_end=s.log_end, ledger_run=None, verdict=None, verdict_window=None,
            verdict_healed_by=None, snapshot_at=seen, unread_since=None, islands=(), lost=(),
        ).lag or 0
        for s in snapshots
    }  # fmt: skip
    return snapshots, ledger, lags
