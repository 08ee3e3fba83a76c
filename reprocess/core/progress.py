"""Progress of a run's Spark stage: records read of the planned offsets, rate and ETA, reported at
a bounded rate (every ``interval`` seconds at most) and once, exact, at the end.

Pure arithmetic over what the caller observes (Spark's finished tasks, the exact counts of
finished batches): the same lines go to the task log and to ``reprocess.run_progress`` (the
coverage page). Planned is a count of offsets, an upper bound on records (transaction markers
and aborted records take offsets), so a finished run may end below 100 % of planned.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

INTERVAL_ENV: Final = "REPROCESS_PROGRESS_INTERVAL_S"
DEFAULT_INTERVAL_S: Final = 10.0


def interval_from_env() -> float:
    """Seconds between two progress lines: ``REPROCESS_PROGRESS_INTERVAL_S`` or 10."""
    return float(os.environ.get(INTERVAL_ENV) or DEFAULT_INTERVAL_S)


@dataclass(frozen=True, slots=True)
class ProgressLine:
    run_id: str
    pipeline: str
    records: int
    planned: int
    elapsed_s: float
    exact: bool
    done: bool

    @property
    def rate(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the current rate (planned offsets as the upper bound); 0 when done."""
        if self.done:
            return 0.0
        return max(self.planned - self.records, 0) / self.rate if self.rate > 0 else None

    def render(self) -> str:
        """The task log's line.

        Examples
        --------
        >>> ProgressLine("r/1", "orders", 25_000, 100_000, 10.0, False, False).render()
        'progress run_id=r/1 pipeline=orders records_read=~25000 of planned 100000 (25%) rate=2500 records/s eta=30 s'
        >>> ProgressLine("r/1", "orders", 99_990, 100_000, 40.0, True, True).render()
        'progress run_id=r/1 pipeline=orders records_read=99990 of planned 100000 (100%) rate=2500 records/s done'
        """
        share = self.records / self.planned * 100 if self.planned else 100.0
        eta = "done" if self.done else ("eta=?" if self.eta_s is None else f"eta={self.eta_s:.0f} s")
        return (
            f"progress run_id={self.run_id} pipeline={self.pipeline} records_read={'' if self.exact else '~'}"
            f"{self.records} of planned {self.planned} ({share:.0f}%) rate={self.rate:.0f} records/s {eta}"
        )


class ProgressMeter:
    """Turns observations into lines, at most one per ``interval_s``; the count never goes back.

    Examples
    --------
    >>> m = ProgressMeter("r/1", "orders", planned=1000, interval_s=10, started=0.0)
    >>> m.observe(100, exact=False, now=4.0) is None  # too soon after the start
    True
    >>> m.observe(300, exact=False, now=10.0).records
    300
    >>> m.observe(250, exact=True, now=15.0) is None  # too soon; an estimate above it stays
    True
    >>> m.observe(600, exact=True, now=21.0).render().split("orders ")[1]
    'records_read=600 of planned 1000 (60%) rate=29 records/s eta=14 s'
    >>> m.finish(990, now=30.0).render().split("orders ")[1]
    'records_read=990 of planned 1000 (99%) rate=33 records/s done'
    """

    def __init__(self, run_id: str, pipeline: str, planned: int, interval_s: float, started: float) -> None:
        self.run_id, self.pipeline, self.planned = run_id, pipeline, planned
        self.interval_s, self.started, self.last = interval_s, started, started
        self.records, self.exact = 0, True

    def line(self, now: float, done: bool = False) -> ProgressLine:
        return ProgressLine(self.run_id, self.pipeline, self.records, self.planned, now - self.started,
                            self.exact, done)  # fmt: skip

    def observe(self, records: int, *, exact: bool, now: float) -> ProgressLine | None:
        if records > self.records or (exact and records == self.records):
            self.records, self.exact = records, exact
        if now - self.last < self.interval_s:
            return None
        self.last = now
        return self.line(now)

    def finish(self, records: int, now: float) -> ProgressLine:
        """The exact count, whatever the estimates said."""
        self.records, self.exact = records, True
        return self.line(now, done=True)
