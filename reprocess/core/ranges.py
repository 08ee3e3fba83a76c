"""Offset ranges and the pure maths on them (no I/O).

Ranges are half-open ``[start, end)``: ``end`` is the next offset the ledger will hold, so
consecutive runs chain without overlap. Transaction markers take offsets, so ``end - start``
is an upper bound on the number of records, never a count.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from reprocess.core.errors import SpecError

EARLIEST: Final = -2
LATEST: Final = -1


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    topic: str
    partition: int
    start: int  # inclusive
    end: int  # exclusive: the next offset the ledger will hold

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise SpecError(
                f"{self.tp}: invalid range [{self.start}, {self.end})",
                topic=self.topic,
                partition=self.partition,
                offsets=range(self.start, self.end),
            )

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def width(self) -> int:
        """Upper bound on the records in the range (markers take offsets too)."""
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}] [{self.start}, {self.end})"


@dataclass(frozen=True, slots=True)
class PartitionSnapshot:
    """What Kafka reported for one partition at planning time."""

    topic: str
    partition: int
    log_start: int
    log_end: int
    group_committed: int | None
    topic_id: str | None = None  # the broker's id of this incarnation of the topic (KIP-516)
    # The high watermark (read_uncommitted log end); ``log_end`` is the last stable offset (LSO).
    high_watermark: int | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def unstable(self) -> int:
        """Offsets above the LSO (HW − LSO): held back by a transaction still open, none read yet."""
        return max((self.high_watermark or 0) - self.log_end, 0)


def offsets_json(ranges: Iterable[OffsetRange], field: str) -> str:
    """Render Spark's ``startingOffsets``/``endingOffsets`` JSON for the ranges.

    Examples
    --------
    >>> offsets_json([OffsetRange("t", 1, 3, 9), OffsetRange("t", 0, 0, 4)], "end")
    '{"t": {"0": 4, "1": 9}}'
    """
    out: dict[str, dict[str, int]] = {}
    for r in sorted(ranges):
        out.setdefault(r.topic, {})[str(r.partition)] = getattr(r, field)
    return json.dumps(out)


def uncovered(start: int, end: int, committed: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Parts of ``[start, end)`` not covered by the committed ranges.

    Examples
    --------
    >>> uncovered(0, 10, [(0, 3), (5, 8)])
    [(3, 5), (8, 10)]
    >>> uncovered(4, 6, [(0, 10)])
    []
    >>> uncovered(0, 2, [(1, 1)])  # an empty range covers nothing and splits no gap
    [(0, 2)]
    """
    gaps, position = [], start
    for a, b in sorted(committed):
        if a >= b:
            continue
        if a > position:
            gaps.append((position, min(a, end)))
        position = max(position, b)
        if position >= end:
            break
    if position < end:
        gaps.append((position, end))
    return [(a, b) for a, b in gaps if a < b]


def healing_range(window: OffsetRange, gaps: list[tuple[int, int]]) -> OffsetRange:
    """The one range that closes a reconciled window: the span of its uncovered ``gaps``, or the
    whole window when every offset was committed but keys were missing.

    Examples
    --------
    >>> str(healing_range(OffsetRange("t", 0, 0, 100), [(10, 20), (40, 50)]))
    't[0] [10, 50)'
    """
    return OffsetRange(window.topic, window.partition, gaps[0][0], gaps[-1][1]) if gaps else window


BACKFILL_CONF_KEYS: Final = ("start_mode", "start_value", "end_mode", "end_value")


def backfill_conf(ranges: Iterable[OffsetRange]) -> dict[str, str]:
    """The backfill DAG's trigger conf that reads exactly ``ranges`` (at most one per partition).

    Examples
    --------
    >>> backfill_conf([OffsetRange("t", 0, 5, 9)])["start_value"]
    '{"t": {"0": 5}}'
    >>> tuple(backfill_conf([])) == BACKFILL_CONF_KEYS
    True
    """
    ranges = list(ranges)
    return {
        "start_mode": "offsets",
        "start_value": offsets_json(ranges, "start"),
        "end_mode": "offsets",
        "end_value": offsets_json(ranges, "end"),
    }


def window_ranges(starting: str, ending: str) -> list[OffsetRange]:
    """The ranges named by a pair of Spark offset JSONs (``startingOffsets``, ``endingOffsets``).

    Examples
    --------
    >>> window_ranges('{"t": {"0": 5}}', '{"t": {"0": 9}}')
    [OffsetRange(topic='t', partition=0, start=5, end=9)]
    """
    starts, ends = parse_offsets_json(starting, "starting"), parse_offsets_json(ending, "ending")
    if set(starts) != set(ends):
        raise SpecError(f"starting and ending offsets name different partitions: {starting} vs {ending}")
    return [OffsetRange(tp.topic, tp.partition, starts[tp], ends[tp]) for tp in sorted(starts)]


def parse_offsets_json(text: str, what: str) -> dict[TopicPartition, int]:
    """Parse Spark-style ``{"topic": {"0": 23, "1": -2}}`` into a typed map.

    Examples
    --------
    >>> parse_offsets_json('{"t": {"0": 23, "1": -2}}', "startingOffsets")
    {TopicPartition(topic='t', partition=0): 23, TopicPartition(topic='t', partition=1): -2}
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{what} is not valid JSON ({exc.msg} at char {exc.pos}): {text!r}") from exc
    return _offsets_from_mapping(raw, what)


def _offsets_from_mapping(raw: object, what: str) -> dict[TopicPartition, int]:
    if not isinstance(raw, Mapping):
        raise SpecError(f'{what} must be an object like {{"topic": {{"0": 42}}}}, got {raw!r}')
    out: dict[TopicPartition, int] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, Mapping):
            raise SpecError(f"{what}: topic {topic!r} must map partition → offset, got {parts!r}", topic=str(topic))
        for part, offset in parts.items():
            if not str(part).isdigit():
                raise SpecError(f"{what}: partition {part!r} of topic {topic!r} is not a number", topic=str(topic))
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise SpecError(
                    f"{what}: offset for {topic}[{part}] must be an integer >= -2 "
                    f"(-2 earliest, -1 latest), got {offset!r}",
                    topic=str(topic),
                    partition=int(part),
                )
            out[TopicPartition(str(topic), int(part))] = offset
    return out


def ranges_to_rows(ranges: Iterable[OffsetRange]) -> list[dict[str, object]]:
    """Plain dicts for XCom and SQL parameters (the only place ranges become dicts)."""
    return [{"topic": r.topic, "partition": r.partition, "start": r.start, "end": r.end} for r in sorted(ranges)]


def retention_risks(ranges: list[OffsetRange], snapshots: list[PartitionSnapshot]) -> list[str]:
    """Warn when a start sits in the oldest 5 % of a partition's retained log: retention may
    delete it before the read gets there (the run would then fail as data loss).

    Examples
    --------
    >>> risks = retention_risks([OffsetRange("t", 0, 101, 200)], [PartitionSnapshot("t", 0, 100, 1100, None)])
    >>> risks[0].split(" (")[0]
    't[0]: start 101 is 1 offsets above the log start 100'
    >>> retention_risks([OffsetRange("t", 0, 600, 700)], [PartitionSnapshot("t", 0, 100, 1100, None)])
    []
    """
    by_tp = {s.tp: s for s in snapshots}
    out = []
    for r in ranges:
        s = by_tp[r.tp]
        retained = s.log_end - s.log_start
        if s.log_start > 0 and r.width and retained and (r.start - s.log_start) < 0.05 * retained:
            out.append(
                f"{r.tp}: start {r.start} is {r.start - s.log_start} offsets above the log start {s.log_start} "
                "(oldest 5% of the retained log): retention may delete it before it is read"
            )
    return out
