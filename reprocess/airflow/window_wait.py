"""The reconcile DAG's wait for its window: the scheduler starts a check at the window's end, when
the incremental (a DAG of its own, on its own schedule) may not have read the window's last records
yet. Those records are the incremental's lag, not a gap, and the check of them would only say "not
yet stable"; so the check waits until the ledger passes the window (and no open transaction holds
its last stable offset), as a sensor in reschedule mode: between two looks it holds no worker slot.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from airflow.sdk import BaseSensorOperator

from reprocess.airflow.faults import ConfigFaultMixin
from reprocess.core.ranges import OffsetRange
from reprocess.core.spec import PipelineSpec

log = logging.getLogger(__name__)

WAIT_TASK: Final = "wait_for_incremental"
# How long past its end a window waits for the incremental: two runs of an @hourly incremental. A
# window still unread then is checked anyway; its check says "not yet stable" and fails the run, as
# an incremental that far behind (paused, failing) is a problem of its own to look at.
UNREAD_WAIT: Final = timedelta(hours=2)
POKE_INTERVAL_S: Final = 60.0  # one Kafka offset lookup and one ledger read per look


def checked_window(dag_run: Any, data_interval_start: Any, data_interval_end: Any) -> tuple[datetime, datetime]:
    """The window a reconcile run checks: a healing backfill's check names its window (any day) in
    the conf; a scheduled run checks its data interval."""
    from reprocess.core.runs import RECHECK_WINDOW, parse_window

    conf = (dag_run.conf if dag_run is not None else None) or {}
    if conf.get(RECHECK_WINDOW):
        return parse_window(conf[RECHECK_WINDOW], f"conf {RECHECK_WINDOW}")
    return data_interval_start, data_interval_end


def keeps_waiting(waiting: Sequence[OffsetRange], window_end: datetime, now: datetime, wait: timedelta) -> bool:
    """Whether a check whose window still has ``waiting`` ranges (unread by the incremental, or held
    by an open transaction) looks again later: until ``wait`` past the window's end.

    >>> end = datetime(2026, 11, 2, tzinfo=UTC)
    >>> unread = [OffsetRange("orders", 0, 40, 70)]
    >>> keeps_waiting(unread, end, end + timedelta(minutes=5), timedelta(hours=2))
    True
    >>> keeps_waiting(unread, end, end + timedelta(hours=3), timedelta(hours=2))
    False
    >>> keeps_waiting([], end, end, timedelta(hours=2))
    False
    """
    return bool(waiting) and now < window_end + wait


class WindowReadSensor(ConfigFaultMixin, BaseSensorOperator):
    """Done once the pipeline's ledger has passed the window's end on every partition (one it has no
    position for waits too: a first incremental may still be under way) and no open transaction holds
    the window's last stable offset, or once :data:`UNREAD_WAIT` has passed since
    the window's end (a past window, e.g. of ``airflow backfill create``, is looked at once). The
    reconcile run's first task: a configuration fault fails it at once, named."""

    first_contact = True

    def __init__(self, *, spec: PipelineSpec, wait: timedelta = UNREAD_WAIT, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", POKE_INTERVAL_S)
        super().__init__(mode="reschedule", **kwargs)
        self.spec = spec
        self.wait = wait

    def poke(self, context: Any) -> bool:
        from reprocess.airflow.common import app_engine, kafka_config
        from reprocess.operations.reconcile import snapshot_window

        interval = context["data_interval_start"], context["data_interval_end"]
        start, end = checked_window(context.get("dag_run"), *interval)
        planned = snapshot_window(app_engine(), kafka_config(), self.spec, start, end)
        waiting = [*planned.unread, *planned.never_read, *planned.unstable]
        ranges = ", ".join(f"{r.topic}[{r.partition}] [{r.start}, {r.end})" for r in waiting)
        if keeps_waiting(waiting, end, datetime.now(UTC), self.wait):
            log.info(
                "reconcile pipeline=%s window=[%s, %s) waits for the incremental: %s not read yet (the ledger is "
                "below the window's end or has no position, or an open transaction holds it); looking again in %.0f s",
                self.spec.name, start.isoformat(), end.isoformat(), ranges, self.poke_interval,
            )  # fmt: skip
            return False
        if waiting:
            log.warning(
                "reconcile pipeline=%s window=[%s, %s): %s still not read %s after the window's end; checking "
                "anyway (not yet stable; a gap where nothing was ever committed): is the incremental DAG %s running?",
                self.spec.name, start.isoformat(), end.isoformat(), ranges, self.wait,
                self.spec.dag_id("incremental"),
            )  # fmt: skip
        return True
