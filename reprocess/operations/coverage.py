"""What is in Postgres and what is not: the queries behind the coverage page and ``cli status``.

Every panel is one indexed query (``sql/005_coverage.sql``) that reads only Postgres: the log
start and end are those of the latest offset snapshot (taken by every run's plan), not a live
broker call, so the page stays fast and works while the broker is down. Values are always
bound; nothing here builds SQL from a caller's string.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Generic, TypeVar

from sqlalchemy import Connection

from reprocess.core.ranges import OffsetRange, PartitionSnapshot, retention_risks
from reprocess.operations.coverage_sql import (
    CALENDAR,
    DEAD_LETTER_KINDS,
    DEAD_LETTERS,
    PARTITIONS,
    PIPELINE_FACTS,
    PIPELINE_NAMES,
    RUNS,
)

PAGE_SIZE: Final = 50
CALENDAR_DAYS: Final = 31
PREVIEW_BYTES: Final = 160
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PartitionCoverage:
    """One partition as the ledger sees it against the latest snapshot of the log."""

    pipeline: str
    topic: str
    partition: int
    log_start: int | None
    log_end: int | None
    snapshot_at: datetime | None
    ledger: int | None  # the next offset to read; None before the first commit
    ledger_run: str | None  # the run that last moved the ledger
    unread_since: datetime | None  # when the oldest unread offsets were first seen
    verdict: str | None
    verdict_window: datetime | None
    islands: tuple[tuple[int, int], ...]  # committed [start, end), merged
    lost: tuple[tuple[int, int], ...]  # ranges a run recorded as lost (allow_data_loss)
    verdict_healed_by: str | None = None  # verdict "healed": the backfill run whose commit closed the gap

    @property
    def lag(self) -> int | None:
        """Offsets between the ledger and the log end (an upper bound on records: markers take offsets)."""
        if self.log_end is None:
            return None
        position = self.ledger if self.ledger is not None else (self.log_start or 0)
        return max(self.log_end - position, 0)

    @property
    def risk(self) -> str:
        """``lost``: unread offsets are already below the log start; ``at risk``: the same rule as the
        planner's warning (the position sits in the oldest 5 % of the retained log); else ``ok``."""
        if self.log_start is None or self.log_end is None or not self.lag:
            return "ok"
        position = self.ledger if self.ledger is not None else self.log_start
        if position < self.log_start:
            return "lost"
        snapshot = PartitionSnapshot(self.topic, self.partition, self.log_start, self.log_end, None)
        pending = OffsetRange(self.topic, self.partition, position, self.log_end)
        return "at risk" if retention_risks([pending], [snapshot]) else "ok"

    def as_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "topic": self.topic,
            "partition": self.partition,
            "log_start": self.log_start,
            "ledger": self.ledger,
            "log_end": self.log_end,
            "lag": self.lag,
            "last_run": self.ledger_run,
            "reconciled": self.verdict,
            "reconciled_window": _iso(self.verdict_window),
            "healed_by": self.verdict_healed_by,
            "snapshot_at": _iso(self.snapshot_at),
            "unread_since": _iso(self.unread_since),
            "risk": self.risk,
            "committed": [list(x) for x in self.islands],
            "lost": [list(x) for x in self.lost],
        }


@dataclass(frozen=True, slots=True)
class PipelineOverview:
    name: str
    target_table: str
    topics: tuple[str, ...]
    last_run: str | None
    last_committed_at: datetime | None
    dag_id: str | None
    dag_run_id: str | None
    dead_letters_day: int
    values_incomplete: int  # Debezium: left-out values no record or stored row held (postgres.left_out)
    verdict: str | None
    verdict_window: datetime | None
    partitions: tuple[PartitionCoverage, ...] = field(default_factory=tuple)

    @property
    def lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    @property
    def unread_since(self) -> datetime | None:
        return min((p.unread_since for p in self.partitions if p.unread_since), default=None)

    @property
    def risk(self) -> str:
        risks = {p.risk for p in self.partitions}
        return next((r for r in ("lost", "at risk") if r in risks), "ok")

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "target_table": self.target_table,
            "topics": list(self.topics),
            "last_run": self.last_run,
            "last_committed_at": _iso(self.last_committed_at),
            "dag_id": self.dag_id,
            "dag_run_id": self.dag_run_id,
            "lag": self.lag,
            "unread_since": _iso(self.unread_since),
            "dead_letters_day": self.dead_letters_day,
            "values_incomplete": self.values_incomplete,
            "reconciled": self.verdict,
            "reconciled_window": _iso(self.verdict_window),
            "risk": self.risk,
            "partitions": len(self.partitions),
        }


@dataclass(frozen=True, slots=True)
class RunRow:
    run_id: str
    kind: str
    state: str
    dag_id: str | None
    dag_run_id: str | None
    created_at: datetime
    committed_at: datetime | None
    seconds: float
    records_read: int | None
    rows_upserted: int | None
    dead_letters: int | None
    batch_count: int | None
    error: str | None
    ranges: tuple[OffsetRange, ...]
    records_filtered: int | None = None  # good records the spec's ``where`` did not keep

    def range_text(self, limit: int = 3) -> str:
        """The planned ranges; many partitions are summarised."""
        if len(self.ranges) <= limit:
            return ", ".join(str(r) for r in self.ranges) or "-"
        width = sum(r.width for r in self.ranges)
        return f"{len(self.ranges)} partitions, {width:,} offsets"

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "kind": self.kind,
            "state": self.state,
            "dag_id": self.dag_id,
            "dag_run_id": self.dag_run_id,
            "created_at": _iso(self.created_at),
            "committed_at": _iso(self.committed_at),
            "seconds": round(self.seconds, 1),
            "records_read": self.records_read,
            "rows_upserted": self.rows_upserted,
            "dead_letters": self.dead_letters,
            "records_filtered": self.records_filtered,
            "batches": self.batch_count,
            "error": self.error,
            "ranges": [[r.topic, r.partition, r.start, r.end] for r in self.ranges],
        }


@dataclass(frozen=True, slots=True)
class CalendarCell:
    window_start: datetime
    window_end: datetime
    topic: str
    partition: int
    kafka_start: int
    kafka_end: int
    verdict: str  # ok, gap, or healed: ok after a gap (kept in reprocess.reconciliation_history)
    detail: str | None
    checked_at: datetime
    heal_conf: dict[str, Any] | None  # the backfill conf that closes a gap; None otherwise
    healed_by: str | None = None  # healed: the backfill run whose commit closed the gap
    gap_detail: str | None = None  # healed: the gap it had, and when it was found
    gap_checked_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "window_start": _iso(self.window_start),
            "window_end": _iso(self.window_end),
            "topic": self.topic,
            "partition": self.partition,
            "kafka_start": self.kafka_start,
            "kafka_end": self.kafka_end,
            "verdict": self.verdict,
            "detail": self.detail,
            "checked_at": _iso(self.checked_at),
            "heal_conf": self.heal_conf,
            "healed_by": self.healed_by,
            "gap_detail": self.gap_detail,
            "gap_checked_at": _iso(self.gap_checked_at),
        }


@dataclass(frozen=True, slots=True)
class DeadLetter:
    topic: str
    partition: int
    offset: int
    run_id: str
    key: bytes | None
    value: bytes | None
    error: str
    error_kind: str
    kafka_timestamp: datetime | None
    created_at: datetime
    resolved_run_id: str | None = None  # the run whose read found the record parsing (a redrive)
    resolved_at: datetime | None = None

    @property
    def key_preview(self) -> str | None:
        return preview(self.key)

    @property
    def value_preview(self) -> str | None:
        return preview(self.value)

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "run_id": self.run_id,
            "key": self.key_preview,
            "value": self.value_preview,
            "value_bytes": None if self.value is None else len(self.value),
            "error": self.error,
            "error_kind": self.error_kind,
            "kafka_timestamp": _iso(self.kafka_timestamp),
            "created_at": _iso(self.created_at),
            "resolved_run_id": self.resolved_run_id,
            "resolved_at": _iso(self.resolved_at),
        }


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: tuple[T, ...]
    offset: int
    has_next: bool


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def preview(raw: bytes | memoryview | None, limit: int = PREVIEW_BYTES) -> str | None:
    """Raw Kafka bytes as plain text that is safe to show anywhere: UTF-8 with every control or
    undecodable byte written as an escape, cut at ``limit`` bytes. Callers still HTML-escape it.

    Examples
    --------
    >>> preview(b'{"a": 1}')
    '{"a": 1}'
    >>> preview(b"\\xff\\x00<b>")
    '\\\\xff\\\\x00<b>'
    >>> preview(b"x" * 5, limit=3)
    'xxx… (5 bytes)'
    """
    if raw is None:
        return None
    data = bytes(raw)
    text_ = data[:limit].decode("utf-8", errors="backslashreplace")
    safe = "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii") for c in text_)
    return safe + (f"… ({len(data)} bytes)" if len(data) > limit else "")


def pipeline_names(conn: Connection) -> list[str]:
    return list(conn.execute(PIPELINE_NAMES).scalars())


def partitions(conn: Connection, pipelines: Sequence[str]) -> list[PartitionCoverage]:
    rows = conn.execute(PARTITIONS, {"pipelines": list(pipelines)})
    return [
        PartitionCoverage(
            r.pipeline,
            r.topic,
            r.partition,
            r.log_start,
            r.log_end,
            r.snapshot_at,
            r.ledger,
            r.ledger_run,
            r.unread_since,
            r.verdict,
            r.verdict_window,
            tuple((a, b) for a, b in r.islands),
            tuple((a, b) for a, b in r.lost),
            r.verdict_healed_by,
        )
        for r in rows
    ]


def overview(conn: Connection, pipelines: Sequence[str]) -> list[PipelineOverview]:
    """Per pipeline facts plus its partitions (two queries for any number of pipelines)."""
    by_pipeline: dict[str, list[PartitionCoverage]] = {}
    for p in partitions(conn, pipelines):
        by_pipeline.setdefault(p.pipeline, []).append(p)
    return [
        PipelineOverview(
            r.name,
            r.target_table,
            tuple(r.topics or ()),
            r.last_run,
            r.last_committed_at,
            r.dag_id,
            r.dag_run_id,
            r.dead_letters_day,
            r.values_incomplete,
            r.verdict,
            r.verdict_window,
            tuple(by_pipeline.get(r.name, ())),
        )
        for r in conn.execute(PIPELINE_FACTS, {"pipelines": list(pipelines)})
    ]


def runs(conn: Connection, pipeline: str, offset: int = 0, limit: int = PAGE_SIZE) -> Page[RunRow]:
    rows = conn.execute(RUNS, {"pipeline": pipeline, "limit": limit + 1, "offset": offset}).all()
    items = tuple(
        RunRow(
            r.run_id,
            r.kind,
            r.state,
            r.dag_id,
            r.dag_run_id,
            r.created_at,
            r.committed_at,
            float(r.seconds or 0),
            r.records_read,
            r.rows_upserted,
            r.dead_letters,
            r.batch_count,
            r.error,
            tuple(OffsetRange(t, p, a, b) for t, p, a, b in r.ranges),
            r.records_filtered,
        )
        for r in rows[:limit]
    )
    return Page(items, offset, len(rows) > limit)


def calendar(conn: Connection, pipeline: str, days: int = CALENDAR_DAYS) -> list[CalendarCell]:
    return [
        CalendarCell(
            r.window_start,
            r.window_end,
            r.topic,
            r.partition,
            r.kafka_start,
            r.kafka_end,
            r.verdict,
            r.detail,
            r.checked_at,
            r.heal_conf if r.verdict == "gap" else None,
            r.healed_by_run,
            r.gap_detail,
            r.gap_checked_at,
        )
        for r in conn.execute(CALENDAR, {"pipeline": pipeline, "days": days})
    ]


def dead_letters(
    conn: Connection,
    pipeline: str,
    kind: str | None = None,
    run_id: str | None = None,
    offset: int = 0,
    limit: int = PAGE_SIZE,
) -> Page[DeadLetter]:
    params = {"pipeline": pipeline, "kind": kind, "run_id": run_id, "limit": limit + 1, "offset": offset}
    rows = conn.execute(DEAD_LETTERS, params).all()
    items = tuple(
        DeadLetter(
            r.topic,
            r.partition,
            r.offset,
            r.run_id,
            _bytes(r.key),
            _bytes(r.value),
            r.error,
            r.error_kind,
            r.kafka_timestamp,
            r.created_at,
            r.resolved_run_id,
            r.resolved_at,
        )
        for r in rows[:limit]
    )
    return Page(items, offset, len(rows) > limit)


def dead_letter_kinds(conn: Connection, pipeline: str) -> list[tuple[str, int]]:
    return [(r.error_kind, r.n) for r in conn.execute(DEAD_LETTER_KINDS, {"pipeline": pipeline})]


def _bytes(value: bytes | memoryview | None) -> bytes | None:
    return None if value is None else bytes(value)
