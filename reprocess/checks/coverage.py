"""Uncovered offsets: offsets of the window no committed range of the ledger holds."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from sqlalchemy import text

from reprocess.checks.base import Query, Window, ranges_params
from reprocess.core.ranges import OffsetRange, TopicPartition, healing_range, uncovered

# Every range of the window in one statement; LATERAL: each range is its own scan of the lookup index
# (committed_ranges grows by a row per partition per run).
_COMMITTED = text(
    "SELECT r.topic, r.partition, c.start_offset, c.end_offset FROM unnest(CAST(:topics AS text[]), "
    "CAST(:partitions AS int[]), CAST(:starts AS bigint[]), CAST(:ends AS bigint[])) AS r(topic, partition, start, "
    "stop), LATERAL (SELECT start_offset, end_offset FROM reprocess.committed_ranges WHERE pipeline = :pipeline "
    "AND topic = r.topic AND partition = r.partition AND end_offset > r.start AND start_offset < r.stop) AS c "
    "ORDER BY 1, 2, 3"
)


@dataclass(frozen=True, slots=True)
class Coverage:
    committed: tuple[tuple[int, int], ...] = ()  # the ledger's committed ranges overlapping the window
    uncovered: tuple[tuple[int, int], ...] = ()  # the window's offset ranges the ledger never committed


def _coverage(window: Window) -> dict[TopicPartition, Coverage]:
    committed: dict[TopicPartition, list[tuple[int, int]]] = {r.tp: [] for r in window.ranges}
    for topic, partition, start, end in window.conn.execute(_COMMITTED, ranges_params(window)):
        committed[TopicPartition(topic, partition)].append((start, end))
    return {
        r.tp: Coverage(tuple(committed[r.tp]), tuple(uncovered(r.start, r.end, committed[r.tp]))) for r in window.ranges
    }


COVERAGE: Final = Query("coverage", _coverage, Coverage())


class Uncovered:
    kind: Final = "uncovered"
    query: Final = COVERAGE

    def detail(self, result: Coverage) -> str | None:
        gaps = result.uncovered
        return f"uncovered offsets {', '.join(f'[{a}, {b})' for a, b in gaps)}" if gaps else None

    def heal(self, result: Coverage, window: OffsetRange, left_out: Collection[str]) -> OffsetRange | None:
        return healing_range(window, list(result.uncovered))  # the span of the gaps


CHECK: Final = Uncovered()
