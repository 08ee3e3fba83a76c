"""What is in Postgres and what is not: the queries behind the coverage page and ``cli status``.

Every panel is one indexed query (``reprocess/sql/005_coverage.sql``) that reads only Postgres: the log
start and end are those of the latest offset snapshot (taken by every run's plan), not a live
broker call, so the page stays fast and works while the broker is down. Values are always
bound; nothing here builds SQL from a caller's string.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Generic, TypeVar

from sqlalchemy import Connection, text

from reprocess.plan import retention_risks
from reprocess.ranges import OffsetRange, PartitionSnapshot

PAGE_SIZE: Final = 50
CALENDAR_DAYS: Final = 31
PREVIEW_BYTES: Final = 160
T = TypeVar("T")

# Per partition of the pipelines: the latest snapshot, the ledger, committed islands, lost ranges,
# the latest verdict and the time the oldest unread offsets were first seen. The partitions are
# those of each topic's latest snapshot plus those in the ledger. Each LATERAL is an index probe.
PARTITIONS: Final = text(
    """
WITH topics AS (
    SELECT p.name AS pipeline, t.topic
      FROM reprocess.pipelines p CROSS JOIN LATERAL jsonb_array_elements_text(p.spec -> 'topics') AS t(topic)
     WHERE p.name = ANY(:pipelines)
), parts AS (
    SELECT t.pipeline, t.topic, s.partition
      FROM topics t
      CROSS JOIN LATERAL (
            SELECT s.run_id FROM reprocess.offset_snapshots s JOIN reprocess.runs r ON r.run_id = s.run_id
             WHERE s.topic = t.topic AND r.pipeline = t.pipeline ORDER BY s.taken_at DESC LIMIT 1) latest
      JOIN reprocess.offset_snapshots s ON s.run_id = latest.run_id AND s.topic = t.topic
    UNION
    SELECT pipeline, topic, partition FROM reprocess.consumer_offsets WHERE pipeline = ANY(:pipelines)
)
SELECT parts.pipeline, parts.topic, parts.partition,
       snap.log_start, snap.log_end, snap.taken_at AS snapshot_at,
       led.next_offset AS ledger, led.run_id AS ledger_run,
       unread.since AS unread_since,
       rec.verdict, rec.window_start AS verdict_window,
       coalesce(cov.islands, '[]'::jsonb) AS islands, coalesce(lost.ranges, '[]'::jsonb) AS lost
  FROM parts
  LEFT JOIN reprocess.consumer_offsets led
         ON led.pipeline = parts.pipeline AND led.topic = parts.topic AND led.partition = parts.partition
  LEFT JOIN LATERAL (
        SELECT s.log_start, s.log_end, s.taken_at
          FROM reprocess.offset_snapshots s JOIN reprocess.runs r ON r.run_id = s.run_id
         WHERE s.topic = parts.topic AND s.partition = parts.partition AND r.pipeline = parts.pipeline
         ORDER BY s.taken_at DESC LIMIT 1) snap ON true
  LEFT JOIN LATERAL (
        -- Log ends only grow: the first snapshot after the last one that ended at or below the
        -- ledger is when the oldest unread offsets were first seen (a lower bound of their age).
        SELECT s.taken_at AS since
          FROM reprocess.offset_snapshots s JOIN reprocess.runs r ON r.run_id = s.run_id
         WHERE s.topic = parts.topic AND s.partition = parts.partition AND r.pipeline = parts.pipeline
           AND s.log_end > coalesce(led.next_offset, 0)
           AND s.taken_at > coalesce((
                SELECT s2.taken_at FROM reprocess.offset_snapshots s2 JOIN reprocess.runs r2 ON r2.run_id = s2.run_id
                 WHERE s2.topic = parts.topic AND s2.partition = parts.partition AND r2.pipeline = parts.pipeline
                   AND s2.log_end <= coalesce(led.next_offset, 0)
                 ORDER BY s2.taken_at DESC LIMIT 1), '-infinity')
         ORDER BY s.taken_at LIMIT 1) unread
         ON snap.log_end > coalesce(led.next_offset, snap.log_start)
  LEFT JOIN LATERAL (
        SELECT verdict, window_start FROM reprocess.reconciliations x
         WHERE x.pipeline = parts.pipeline AND x.topic = parts.topic AND x.partition = parts.partition
         ORDER BY window_start DESC LIMIT 1) rec ON true
  LEFT JOIN LATERAL (
        SELECT jsonb_agg(jsonb_build_array(c.start_offset, c.end_offset) ORDER BY c.start_offset) AS islands
          FROM reprocess.covered_ranges c
         WHERE c.pipeline = parts.pipeline AND c.topic = parts.topic AND c.partition = parts.partition) cov ON true
  LEFT JOIN LATERAL (
        SELECT jsonb_agg(jsonb_build_array((x ->> 'start')::bigint, (x ->> 'end')::bigint)) AS ranges
          FROM reprocess.runs r CROSS JOIN LATERAL jsonb_array_elements(r.lost_ranges) AS x
         WHERE r.pipeline = parts.pipeline AND r.lost_ranges <> '[]'::jsonb
           AND x ->> 'topic' = parts.topic AND (x ->> 'partition')::int = parts.partition) lost ON true
 ORDER BY parts.pipeline, parts.topic, parts.partition
"""
)

# Per pipeline: its spec's topics, its last committed run, dead letters of the last day and the
# verdict of its latest reconciled window (the worst partition's).
PIPELINE_FACTS: Final = text(
    """
SELECT p.name, p.target_table, p.spec -> 'topics' AS topics,
       last.run_id AS last_run, last.committed_at AS last_committed_at, last.dag_id, last.dag_run_id,
       (SELECT count(*) FROM reprocess.dead_letters d
         WHERE d.pipeline = p.name AND d.created_at > now() - interval '1 day') AS dead_letters_day,
       rec.window_start AS verdict_window, rec.verdict
  FROM reprocess.pipelines p
  LEFT JOIN LATERAL (
        SELECT run_id, committed_at, dag_id, dag_run_id FROM reprocess.runs r
         WHERE r.pipeline = p.name AND r.state = 'committed' ORDER BY committed_at DESC LIMIT 1) last ON true
  LEFT JOIN LATERAL (
        SELECT x.window_start, CASE WHEN bool_and(x.verdict = 'ok') THEN 'ok' ELSE 'gap' END AS verdict
          FROM reprocess.reconciliations x
         WHERE x.pipeline = p.name
           AND x.window_start = (SELECT max(window_start) FROM reprocess.reconciliations y WHERE y.pipeline = p.name)
         GROUP BY x.window_start) rec ON true
 WHERE p.name = ANY(:pipelines)
 ORDER BY p.name
"""
)

PIPELINE_NAMES: Final = text("SELECT name FROM reprocess.pipelines ORDER BY name")

# Top-level runs, newest first (batches are summed into their parent); one page plus one row,
# which tells whether there is a next page without counting 10,000 runs. The page is cut before
# the ranges are aggregated, so a far page costs no more than the first.
RUNS: Final = text(
    """
WITH page AS (
    SELECT * FROM reprocess.runs r
     WHERE r.pipeline = :pipeline AND r.parent_run_id IS NULL
     ORDER BY r.created_at DESC
     LIMIT :limit OFFSET :offset
)
SELECT r.run_id, r.kind, r.state, r.dag_id, r.dag_run_id, r.created_at, r.committed_at, r.error,
       r.records_read, r.rows_upserted, r.dead_letters, r.batch_count,
       extract(epoch FROM (coalesce(r.committed_at, r.staged_at, r.planned_at, r.created_at) - r.created_at))
           AS seconds,
       coalesce(rr.ranges, '[]'::jsonb) AS ranges
  FROM page r
  LEFT JOIN LATERAL (
        SELECT jsonb_agg(jsonb_build_array(topic, partition, start_offset, end_offset) ORDER BY topic, partition)
               AS ranges
          FROM reprocess.run_ranges x WHERE x.run_id = r.run_id) rr ON true
 ORDER BY r.created_at DESC
"""
)

# One cell per (window, partition) over the last days that have verdicts; gap cells carry the
# healing backfill conf the reconciliation stored with them.
CALENDAR: Final = text(
    """
SELECT x.window_start, x.window_end, x.topic, x.partition, x.kafka_start, x.kafka_end, x.verdict, x.detail,
       x.checked_at, x.heal_conf
  FROM reprocess.reconciliations x
 WHERE x.pipeline = :pipeline
   AND x.window_start > (SELECT max(window_start) FROM reprocess.reconciliations y WHERE y.pipeline = :pipeline)
                        - make_interval(days => :days)
 ORDER BY x.window_start, x.topic, x.partition
"""
)

# Newest first, optionally one error kind or one run; one page plus one row.
DEAD_LETTERS: Final = text(
    """
SELECT topic, partition, "offset", run_id, key, value, error, error_kind, kafka_timestamp, created_at,
       resolved_run_id, resolved_at
  FROM reprocess.dead_letters
 WHERE pipeline = :pipeline
   AND (CAST(:kind AS text) IS NULL OR error_kind = :kind)
   AND (CAST(:run_id AS text) IS NULL OR run_id = :run_id)
 ORDER BY created_at DESC, topic, partition, "offset"
 LIMIT :limit OFFSET :offset
"""
)

# Per error kind: how many dead letters are still open (not resolved by a redrive).
DEAD_LETTER_KINDS: Final = text(
    "SELECT error_kind, count(*) FILTER (WHERE resolved_run_id IS NULL) AS n FROM reprocess.dead_letters "
    "WHERE pipeline = :pipeline GROUP BY error_kind ORDER BY n DESC, error_kind"
)


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
    verdict: str
    detail: str | None
    checked_at: datetime
    heal_conf: dict[str, Any] | None  # the backfill conf that closes a gap; None when ok

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
            r.heal_conf if r.verdict != "ok" else None,
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
