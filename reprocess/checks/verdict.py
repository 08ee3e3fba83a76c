"""A partition's verdict from what the window's checks found, and the run of every check over a window
(:func:`judge`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reprocess.checks.base import Check, Found, Window
from reprocess.checks.coverage import COVERAGE
from reprocess.checks.dead_letters import DEAD_LETTERS
from reprocess.checks.missing_keys import KEYS
from reprocess.checks.registry import CHECKS
from reprocess.core.ranges import OffsetRange
from reprocess.core.runs import NOT_STABLE


@dataclass(frozen=True, slots=True)
class PartitionVerdict:
    """One partition of a window: what the checks found (``found``, in :data:`~reprocess.checks.registry.CHECKS`
    order), what it accounted for (``keys``, ``dead``), and why it may not be final yet."""

    range: OffsetRange
    committed: tuple[tuple[int, int], ...] = ()  # the ledger's committed ranges overlapping the window
    found: tuple[Found, ...] = ()
    keys: int = 0  # keys whose newest record of the window lies in this partition
    dead: int = 0  # invalid records of the window
    unstable: OffsetRange | None = None  # [LSO, HW) an open transaction holds where the window reaches the LSO
    unread: OffsetRange | None = None  # [ledger, window end): the window's part the pipeline has not read yet

    @property
    def gap(self) -> bool:
        return bool(self.found)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of gap found (stored in ``reprocess.reconciliations.kinds``)."""
        return tuple(f.kind for f in self.found)

    @property
    def verdict(self) -> str:
        """``gap`` (a backfill closes it), else :data:`NOT_STABLE` (the window reaches a held LSO or past the
        ledger), else ``ok``."""
        return "gap" if self.gap else NOT_STABLE if self.unstable is not None or self.unread is not None else "ok"

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @property
    def heal(self) -> OffsetRange | None:
        """The one range whose backfill closes the gaps: the span of the checks' heal ranges, the whole
        window when none has a range of its own; None without a gap."""
        if not self.found:
            return None
        ranges = [f.heal for f in self.found if f.heal is not None]
        if not ranges:
            return self.range
        r = self.range
        return OffsetRange(r.topic, r.partition, min(x.start for x in ranges), max(x.end for x in ranges))

    def detail(self) -> str:
        if self.ok:
            return f"{self.keys} keys, {self.dead} dead letters, all accounted for"
        if not self.gap and self.unread is not None:
            u = self.unread
            return (
                f"{NOT_STABLE}: not read yet: the ledger is at {u.start}, below the window's end {u.end}; offsets "
                f"[{u.start}, {u.end}) are the incremental's lag, not a gap (so far {self.keys} keys, {self.dead} "
                "dead letters accounted for below the ledger); check the window again once the ledger passes it"
            )
        if not self.gap and self.unstable is not None:
            u = self.unstable
            return (
                f"{NOT_STABLE}: an open transaction holds the last stable offset at {u.start} below the high "
                f"watermark {u.end}; the window's records past it stay unread until its producer commits or aborts "
                f"(so far {self.keys} keys, {self.dead} dead letters accounted for); check the window again then"
            )
        return "; ".join(f.detail for f in self.found)


def partition_verdict(
    r: OffsetRange,
    results: Mapping[Check[Any], Any],
    *,
    checks: Sequence[Check[Any]] = CHECKS,
    left_out: Collection[str] = (),
    committed: Sequence[tuple[int, int]] = (),
    keys: int = 0,
    dead: int = 0,
    unstable: OffsetRange | None = None,
    unread: OffsetRange | None = None,
) -> PartitionVerdict:
    """The verdict of the window's range ``r`` of one partition from each check's result there (a check
    ``results`` leaves out found nothing). ``left_out``: the spec's columns an event may leave out."""
    found = []
    for check in checks:
        result = results.get(check, check.query.none)
        detail = check.detail(result)
        if detail is not None:
            found.append(Found(check.kind, detail, check.heal(result, r, left_out)))
    return PartitionVerdict(r, tuple(committed), tuple(found), keys, dead, unstable, unread)


def judge(
    window: Window,
    checks: Sequence[Check[Any]] = CHECKS,
    unstable: Sequence[OffsetRange] = (),
    unread: Sequence[OffsetRange] = (),
) -> list[PartitionVerdict]:
    """Every check over ``window``, one verdict per range; ``unstable`` and ``unread``: the partitions whose
    verdict is at best not yet stable (``reprocess.operations.reconcile.WindowRanges``)."""
    held = {r.tp: r for r in unstable}
    not_read = {r.tp: r for r in unread}
    verdicts = []
    for r in window.ranges:
        results = {c: window.result(c.query, r.tp) for c in checks}
        verdicts.append(
            partition_verdict(
                r, results, checks=checks, left_out=window.spec.unchanged_columns,
                committed=window.result(COVERAGE, r.tp).committed, keys=window.result(KEYS, r.tp).keys,
                dead=window.result(DEAD_LETTERS, r.tp).dead, unstable=held.get(r.tp), unread=not_read.get(r.tp),
            )
        )  # fmt: skip
    return verdicts
