"""The incremental that starts when records arrive (``schedule: on_new_records``): its DAG is
scheduled on an Asset of the pipeline's own, watched in the triggerer by :class:`NewRecordsTrigger`.

The trigger joins no consumer group and reads no record. Every ``poll_seconds`` it asks the broker
for the log ends (the last stable offsets, the end a run plans to) and Postgres for the ledger, and
fires when a partition's log end is past the ledger. So it moves no group: not the one the ledger
mirrors (``mirror_group_offsets`` stays its only writer), not one a team's lag tools read. The
provider's ``AwaitMessageTrigger`` with ``commit_offset=False`` would need a connection of its own
to name a group of its own (the group comes from the connection's extra), would fire on any record
past that group's position instead of the pipeline's, and, never committing, would fire again for
the same record after each restart of the triggerer.

The run plans from the ledger as a cron-started one does; the event only starts it. Runs coalesce
three ways: the trigger fires at most once per set of log ends and at least
``min_interval_seconds`` apart; Airflow keeps one pending event per DAG (its AssetDagRunQueue) and
creates no run while the DAG is at ``max_active_runs=1``; and each run reads to the log end seen
when it starts, so one run takes every record that arrived while the one before it ran.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from airflow.sdk import Asset, AssetWatcher
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from reprocess.core import names
from reprocess.core.ranges import TopicPartition
from reprocess.core.spec import ON_NEW_RECORDS, PipelineSpec

POLL_SECONDS: Final = 2.0  # how often the trigger compares the log ends with the ledger


@dataclass(slots=True)
class Cadence:
    """When the trigger fires: some partition has unread records, its log ends are not the ones of
    the last event (that event's run takes them), and ``min_interval`` seconds passed since it."""

    min_interval: float
    fired_for: dict[TopicPartition, int] | None = None
    fired_at: float | None = None

    def due(self, unread_ends: Mapping[TopicPartition, int], now: float) -> bool:
        """Whether to fire for ``unread_ends`` (the log end of each partition with unread records);
        records the time and ends when it does."""
        if not unread_ends or dict(unread_ends) == self.fired_for:
            return False
        if self.fired_at is not None and now - self.fired_at < self.min_interval:
            return False
        self.fired_for, self.fired_at = dict(unread_ends), now
        return True


class NewRecordsTrigger(BaseEventTrigger):
    """Fires a :class:`TriggerEvent` (the pipeline and its unread offsets per partition) when the
    pipeline's topics hold records past its ledger; runs in the triggerer, as an ``AssetWatcher``'s.

    :param spec_file: the pipeline's spec, read at every check (a changed ``topics`` is watched at once)
    :param pipeline: the pipeline's name (the ledger's key)
    :param min_interval_seconds: the least time between two events
    :param poll_seconds: the time between two checks
    """

    def __init__(
        self, *, spec_file: str, pipeline: str, min_interval_seconds: float, poll_seconds: float = POLL_SECONDS
    ) -> None:
        super().__init__()
        self.spec_file = spec_file
        self.pipeline = pipeline
        self.min_interval_seconds = min_interval_seconds
        self.poll_seconds = poll_seconds
        self._engine: Any = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "spec_file": self.spec_file,
                "pipeline": self.pipeline,
                "min_interval_seconds": self.min_interval_seconds,
                "poll_seconds": self.poll_seconds,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from asgiref.sync import sync_to_async

        cadence = Cadence(self.min_interval_seconds)
        while True:
            try:
                unread = await sync_to_async(self._unread)()
            except Exception as exc:  # a broker, database or spec problem must not end the watch: log, retry
                self.log.warning("pipeline=%s new-records check failed, next in %ss: %s", self.pipeline,
                                 self.poll_seconds, exc)  # fmt: skip
                unread = {}
            ends = {tp: end for tp, (_, end) in unread.items()}
            if cadence.due(ends, time.monotonic()):
                offsets: dict[str, dict[str, dict[str, int]]] = {}
                for tp, (position, end) in sorted(unread.items()):
                    offsets.setdefault(tp.topic, {})[str(tp.partition)] = {"ledger": position, "log_end": end}
                self.log.info("pipeline=%s new records: %s", self.pipeline, offsets)
                yield TriggerEvent({"pipeline": self.pipeline, "unread": offsets})
            await asyncio.sleep(self.poll_seconds)

    def _unread(self) -> dict[TopicPartition, tuple[int, int]]:
        """``(ledger position, log end)`` of each partition with unread records, asked now."""
        from reprocess.airflow.common import app_engine, kafka_config
        from reprocess.formats.specs import read_spec
        from reprocess.operations.lag import ledger_lags

        if self._engine is None:
            self._engine = app_engine()
        spec = read_spec(Path(self.spec_file))
        snapshots, _, lags = ledger_lags(self._engine, kafka_config(), spec, datetime.now(UTC))
        return {s.tp: (s.log_end - lags[s.tp], s.log_end) for s in snapshots if lags[s.tp]}

    async def cleanup(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


def new_records_asset(spec: PipelineSpec) -> Asset:
    """The pipeline's Asset the incremental is scheduled on, watched by its :class:`NewRecordsTrigger`.
    Its own (not the topics' ``kafka://`` Assets): two pipelines reading one topic each have a ledger."""
    trigger = NewRecordsTrigger(
        spec_file=spec.source_file, pipeline=spec.name, min_interval_seconds=spec.min_interval_seconds
    )
    return Asset(
        name=names.new_records_asset(spec.name),
        uri=f"reprocess://{spec.name}/new_records",
        group="reprocess",
        watchers=[AssetWatcher(name=names.new_records_asset(spec.name), trigger=trigger)],
    )


def incremental_schedule(spec: PipelineSpec) -> Any:
    """The incremental DAG's schedule: the spec's cron or preset, or its new-records Asset."""
    return [new_records_asset(spec)] if spec.schedule == ON_NEW_RECORDS else spec.schedule
