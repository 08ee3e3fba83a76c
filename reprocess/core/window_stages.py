"""A window check (the daily reconciliation) as stages: ``SnapshotWindow → ReadWindow → Verdicts``.

One task of the reconcile DAG each (``reprocess.airflow.reconcile_dag``); the evaluator
(``reprocess.runner.window``) runs them. A window check writes verdicts, never a target, so it has
stages of its own beside a run's (``reprocess.core.stages``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from reprocess.core.ranges import OffsetRange
from reprocess.core.tasks import Task


@dataclass(frozen=True, slots=True)
class SnapshotWindow:
    """A window check's snapshot: its offsets per partition (operations.reconcile.snapshot_window)."""

    check_id: str
    window_start: datetime
    window_end: datetime
    healed_by: str | None = None  # the backfill whose heal this check is
    task: Task = field(default=Task.PLAN_WINDOW, kw_only=True)

    @property
    def run_id(self) -> str:  # what the evaluator's log and describe name
        return self.check_id


@dataclass(frozen=True, slots=True)
class ReadWindow:
    """Stage a window's newest record per key and invalid records (spark.job.stage_window); no run, no target."""

    check_id: str
    ranges: tuple[OffsetRange, ...]
    bisect: bool = False  # the audit's: stage only the key ranges whose checksums differ from the target's
    task: Task = field(default=Task.SPARK_WINDOW, kw_only=True)

    @property
    def run_id(self) -> str:
        return self.check_id


@dataclass(frozen=True, slots=True)
class Verdicts:
    """Run reprocess.checks over the check's stage, store a verdict per partition (operations.reconcile)."""

    check_id: str
    window_start: datetime
    window_end: datetime
    ranges: tuple[OffsetRange, ...]
    unstable: tuple[OffsetRange, ...] = ()  # [LSO, HW) an open transaction holds: at best not yet stable
    unread: tuple[OffsetRange, ...] = ()  # [ledger, window end): not read yet, at best not yet stable
    healed_by: str | None = None
    task: Task = field(default=Task.RECONCILE, kw_only=True)

    @property
    def run_id(self) -> str:
        return self.check_id


def window_stages(
    snapshot: SnapshotWindow,
    ranges: Sequence[OffsetRange],
    unstable: Sequence[OffsetRange] = (),
    unread: Sequence[OffsetRange] = (),
) -> tuple[ReadWindow, Verdicts]:
    """The stages after a window check's snapshot, from the ranges it resolved (test_window_stages.py)."""
    s = snapshot
    return (
        ReadWindow(s.check_id, tuple(ranges)),
        Verdicts(s.check_id, s.window_start, s.window_end, tuple(ranges), tuple(unstable), tuple(unread), s.healed_by),
    )
