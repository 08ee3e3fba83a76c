"""Values differ: target rows that carry their newest window record's lineage but hold other values than
that record derives under the current spec (a person's UPDATE, a decoding or transform bug, a wrongly
resolved placeholder), through the one derived-vs-stored formulation (:mod:`reprocess.postgres.compare`).

Lineage says which record a row came from; this says whether the row still holds what that record derives.
Column by column in one join of the stage's rows with the target on key AND lineage (the rows the key
check already found right), so its cost is one more hash join over the window's keys. A row last written
before the window is not read.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

from reprocess.checks.base import Query, Window
from reprocess.core.ranges import OffsetRange, TopicPartition
from reprocess.postgres.compare import differing_rows_sql, value_columns
from reprocess.postgres.target import target_identifier


@dataclass(frozen=True, slots=True)
class ValueCheck:
    """One partition's rows that carry their newest record's lineage but not what it derives."""

    rows: int = 0
    columns: tuple[tuple[str, int], ...] = ()  # (column, rows differing in it)
    span: tuple[int, int] | None = None  # [first, last + 1) offsets of their records: the heal re-reads them
    examples: tuple[tuple[str, str, Any, Any], ...] = ()  # (key, column, stored, derived)

    def detail(self) -> str:
        columns = ", ".join(f"{c} ×{n}" for c, n in self.columns)
        examples = "; ".join(
            f"{k} {c}: stored {json.dumps(a)} vs derived {json.dumps(b)}" for k, c, a, b in self.examples
        )
        return f"{self.rows} rows differ from what their newest record derives ({columns}); e.g. {examples}"


def _values(window: Window) -> dict[TopicPartition, ValueCheck]:
    spec = window.spec
    values = value_columns(spec)
    if not values:
        return {}
    window.cur.execute(differing_rows_sql(spec, window.stage, target_identifier(spec)))
    out = {}
    for topic, partition, rows, *rest in window.cur.fetchall():
        counts, (first, last, examples) = rest[: len(values)], rest[len(values) :]
        out[TopicPartition(topic, partition)] = ValueCheck(
            int(rows),
            tuple((c, int(n)) for c, n in zip(values, counts, strict=True) if n),
            (int(first), int(last) + 1),
            tuple(tuple(e) for e in examples or ()),
        )
    return out


VALUES: Final = Query("values", _values, ValueCheck())


class ValuesDiffer:
    kind: Final = "values differ"
    query: Final = VALUES

    def detail(self, result: ValueCheck) -> str | None:
        return result.detail() if result.rows else None

    def heal(self, result: ValueCheck, window: OffsetRange, left_out: Collection[str]) -> OffsetRange | None:
        """The offsets of the records whose rows differ (their replay re-derives exactly those rows); a
        column an event may leave out (``left_out``) heals from the window's start, where the check found
        its full value: the differing records alone would take it from the stored (wrong) row again."""
        if result.span is None:
            return None
        start, end = result.span
        if any(column in left_out for column, _ in result.columns):
            start = window.start
        return OffsetRange(window.topic, window.partition, start, end)


CHECK: Final = ValuesDiffer()
