"""Deliberate ledger resets, the way ``kafka-consumer-groups --reset-offsets`` moves a group.

A reset is planned first (dry run: a table of current → new position per partition and what
the next incremental run would read) and applied only on request: under the pipeline's
advisory lock, in one transaction with an audit row per partition (who, when, why), then
mirrored to the consumer group. The positions come from the planner's own snapshot and
verified time lookup, so a reset by time lands where a backfill by time would start.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from reprocess.core.errors import SpecError
from reprocess.core.names import reset_run_id
from reprocess.core.ranges import PartitionSnapshot, TopicPartition
from reprocess.core.runs import parse_timestamp
from reprocess.core.spec import PipelineSpec
from reprocess.kafka.offsets import offsets_for_time, take_snapshot
from reprocess.postgres import queries
from reprocess.postgres.ledger import ledger_positions

log = logging.getLogger(__name__)


class ResetMode(enum.StrEnum):
    """The ``--reset-offsets`` scenarios of ``kafka-consumer-groups`` that apply to a ledger."""

    EARLIEST = "to-earliest"
    LATEST = "to-latest"
    OFFSET = "to-offset"
    DATETIME = "to-datetime"
    SHIFT_BY = "shift-by"

    @property
    def takes_value(self) -> bool:
        """Whether the mode moves to a position the user gives (``value``), not to an end of the log."""
        return self not in (ResetMode.EARLIEST, ResetMode.LATEST)


@dataclass(frozen=True, slots=True)
class ResetRequest:
    mode: ResetMode
    value: str | None = None
    topics: tuple[str, ...] = ()  # empty: every topic of the spec
    partitions: tuple[int, ...] = ()  # empty: every partition

    def validate(self, spec: PipelineSpec) -> None:
        """Every problem is a :class:`SpecError` naming the option."""
        if self.mode in (ResetMode.OFFSET, ResetMode.SHIFT_BY):
            try:
                number = int(self.value or "")
            except ValueError:
                raise SpecError(f"--{self.mode.value} needs an integer, got {self.value!r}") from None
            if self.mode is ResetMode.OFFSET and number < 0:
                raise SpecError(f"--to-offset must be >= 0, got {number}")
        if self.mode is ResetMode.DATETIME:
            parse_timestamp(self.value or "", "--to-datetime")
        for topic in self.topics:
            if topic not in spec.topics:
                raise SpecError(
                    f"{spec.name}: topic {topic!r} is not one of the pipeline's topics {list(spec.topics)}",
                    pipeline=spec.name,
                    topic=topic,
                )


@dataclass(frozen=True, slots=True)
class ResetRow:
    """One partition's move; ``current`` is None when the ledger never held it."""

    topic: str
    partition: int
    log_start: int
    log_end: int
    current: int | None
    new: int
    note: str = ""

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def next_read(self) -> int:
        """Offsets the next incremental run would read: ``[new, log_end)``."""
        return max(0, self.log_end - self.new)


def resolve_reset(
    request: ResetRequest,
    snapshots: Iterable[PartitionSnapshot],
    ledger: Mapping[TopicPartition, int],
    time_offsets: Mapping[TopicPartition, int] | None = None,
) -> list[ResetRow]:
    """The new position of every selected partition, clamped to the retained log.

    A partition the ledger never held counts as sitting at its log start, which is where an
    incremental run would begin (see ``plan._start``).

    Examples
    --------
    >>> s = [PartitionSnapshot("t", 0, 10, 100, None), PartitionSnapshot("t", 1, 0, 50, None)]
    >>> [(r.partition, r.current, r.new, r.note) for r in resolve_reset(
    ...     ResetRequest(ResetMode.SHIFT_BY, "-30"), s, {TopicPartition("t", 0): 30})]
    [(0, 30, 10, 'clamped to the log start'), (1, None, 0, 'clamped to the log start')]
    """
    rows = []
    for s in snapshots:
        if (request.topics and s.topic not in request.topics) or (
            request.partitions and s.partition not in request.partitions
        ):
            continue
        current = ledger.get(s.tp)
        if request.mode is ResetMode.EARLIEST:
            wanted = s.log_start
        elif request.mode is ResetMode.LATEST:
            wanted = s.log_end
        elif request.mode is ResetMode.OFFSET:
            wanted = int(request.value or 0)
        elif request.mode is ResetMode.SHIFT_BY:
            wanted = (current if current is not None else s.log_start) + int(request.value or 0)
        else:
            assert time_offsets is not None
            wanted = time_offsets[s.tp]
        new = min(max(wanted, s.log_start), s.log_end)
        note = "" if new == wanted else ("clamped to the log start" if new > wanted else "clamped to the log end")
        rows.append(ResetRow(s.topic, s.partition, s.log_start, s.log_end, current, new, note))
    if request.partitions and not rows:
        raise SpecError(f"partitions {list(request.partitions)} match no partition of the selected topics")
    return rows


def _kafka_view(
    kafka: Mapping[str, Any], spec: PipelineSpec, request: ResetRequest
) -> tuple[list[PartitionSnapshot], dict[TopicPartition, int] | None]:
    """Snapshot and, for ``to-datetime``, the verified offsets for the time (Kafka I/O only)."""
    request.validate(spec)
    snapshots = take_snapshot(kafka, spec, request.topics or spec.topics)
    if request.mode is not ResetMode.DATETIME:
        return snapshots, None
    ts_ms = int(parse_timestamp(request.value or "", "--to-datetime").timestamp() * 1000)
    return snapshots, offsets_for_time(kafka, snapshots, ts_ms)


def plan_reset(engine: Engine, kafka: Mapping[str, Any], spec: PipelineSpec, request: ResetRequest) -> list[ResetRow]:
    """The dry run: what ``--execute`` would do now; writes nothing."""
    snapshots, times = _kafka_view(kafka, spec, request)
    with engine.connect() as conn:
        ledger = ledger_positions(conn, spec.name)
    return resolve_reset(request, snapshots, ledger, times)


def execute_reset(
    engine: Engine,
    kafka: Mapping[str, Any],
    spec: PipelineSpec,
    request: ResetRequest,
    *,
    reason: str,
    requested_by: str,
) -> list[ResetRow]:
    """Apply the reset under the pipeline's lock with its audit rows, then mirror to the group.

    The positions are resolved again inside the lock (a ``shift-by`` is relative to the
    ledger as it is then), so a run that committed since the dry run is not undone blindly.
    An incremental run planned before the reset is fenced by its compare-and-set.
    """
    from reprocess.operations.mirror import mirror_group_offsets
    from reprocess.postgres.store import ensure_pipeline

    if not reason.strip():
        raise SpecError("a reset needs a reason (--reason): it is recorded in reprocess.ledger_resets")
    ensure_pipeline(engine, spec)
    snapshots, times = _kafka_view(kafka, spec, request)
    with engine.begin() as conn:
        conn.execute(queries.PIPELINE_LOCK, {"pipeline": spec.name})
        rows = resolve_reset(request, snapshots, ledger_positions(conn, spec.name, for_update=True), times)
        for r in rows:
            params = {"pipeline": spec.name, "topic": r.topic, "partition": r.partition, "old": r.current,
                      "new": r.new, "mode": request.mode.value, "value": request.value, "reason": reason,
                      "by": requested_by}  # fmt: skip
            reset_id = conn.execute(queries.INSERT_LEDGER_RESET, params).scalar_one()
            conn.execute(queries.RESET_LEDGER, {**params, "run_id": reset_run_id(reset_id)})
    log.info("reset pipeline=%s mode=%s value=%s by=%s rows=%s", spec.name, request.mode.value, request.value,
             requested_by, [(str(r.tp), r.current, r.new) for r in rows])  # fmt: skip
    mirror_group_offsets(engine, kafka, spec)
    return rows


def format_reset(spec: PipelineSpec, request: ResetRequest, rows: list[ResetRow], *, executed: bool) -> str:
    """The table ``kafka-consumer-groups --reset-offsets`` prints, plus what an incremental would read."""
    what = f"--{request.mode.value}" + (f" {request.value}" if request.value is not None else "")
    head = "EXECUTED" if executed else "DRY RUN (nothing changed; add --execute to apply)"
    header = ("TOPIC", "PARTITION", "LOG-START", "LOG-END", "CURRENT", "NEW", "NEXT INCREMENTAL READS", "NOTE")
    table = [header]
    for r in rows:
        reads = f"[{r.new}, {r.log_end}) = {r.next_read} offsets"
        current = "-" if r.current is None else str(r.current)
        table.append((r.topic, str(r.partition), str(r.log_start), str(r.log_end), current, str(r.new), reads, r.note))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = [f"{head}: reset {spec.name} (group {spec.consumer_group}) {what}", ""]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    return "\n".join(lines)
