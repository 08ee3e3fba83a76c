"""Uncovered offsets: offsets of the window no committed range of the ledger holds."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from sqlalchemy import text

from reprocess.checks.base import Query, Window
from reprocess.core.ranges import OffsetRange, TopicPartition, healing_range, uncovered

_COMMITTED = text(
    "SELECT start_offset, end_offset FROM reprocess.committed_ranges "
    "WHERE pipeline = :pipeline AND topic = :topic AND partition = :partition AND end_offset > :start "
    "AND start_offset < :end ORDER BY start_offset"
)


@dataclass(frozen=True, slots=True)
class Coverage:
    committed: tuple[tuple[int, int], ...] = ()  # the ledger's committed ranges overlapping the window
    uncovered: tuple[tuple[int, int], ...] = ()  # the window's offset ranges the ledger never committed


def _coverage(window: Window) -> dict[TopicPartition, Coverage]:
    out = {}
    for r in window.ranges:
        params = {"pipeline": window.spec.name, "topic": r.topic, "partition": r.partition, "start": r.start,
                  "end": r.end}  # fmt: skip
        committed = tuple((a, b) for a, b in window.conn.execute(_COMMITTED, params))
        out[r.tp] = Coverage(committed, tuple(uncovered(r.start, r.end, list(committed))))
    return out


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
