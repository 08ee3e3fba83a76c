"""Live progress of the stage job from Spark's own task counts, whichever source reads Kafka.

While a Spark action runs, the share of its finished tasks (over every stage of the action) turns
into an estimate of records read: the action's planned offsets times that share, scaled by the
records per offset the finished batches showed. Over Spark Connect the session's progress handler
reports the stages (``registerProgressHandler``: tasks, finished tasks); under spark-submit a
thread polls the status tracker (``SparkContext.statusTracker()``). Between actions and at the
end, the exact counts from Postgres (a batch's commit, the stage's count) replace the estimate.
Each line (at most every ``REPROCESS_PROGRESS_INTERVAL_S``, default 10 s) goes to the log (the
Airflow task log: the Connect client runs in the task, a spark-submit driver's output is streamed
into it) and to ``reprocess.run_progress`` (the coverage page).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Engine

from reprocess.core.progress import ProgressLine, ProgressMeter, interval_from_env
from reprocess.postgres.store import save_progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

POLL_S: Final = 0.5  # how often the spark-submit path reads the status tracker


class RunProgress:
    """The progress of one stage job (all its batches): estimates while Spark runs, exact between."""

    def __init__(self, spark: SparkSession, engine: Engine, pipeline: str, run_id: str, planned: int) -> None:
        self.spark, self.engine = spark, engine
        self.meter = ProgressMeter(run_id, pipeline, planned, interval_from_env(), time.monotonic())
        self.done_records = 0  # exact records of the finished actions
        self.done_offsets = 0  # their planned offsets
        self.waiting_offsets = 0  # planned offsets of finished actions whose counts have not come yet
        self.lock = threading.Lock()
        self._publish(self.meter.line(time.monotonic()))  # the page shows the run from its start

    @contextmanager
    def action(self, offsets: int) -> Iterator[None]:
        """One Spark action over ``offsets`` planned offsets; call :meth:`finished` with its exact
        count, which may come while the next action runs (a batch's commit)."""

        def on_share(share: float) -> None:
            with self.lock:
                per_offset = self.done_records / self.done_offsets if self.done_offsets else 1.0
                estimate = self.done_records + int((self.waiting_offsets + share * offsets) * per_offset)
            self._observe(estimate, exact=False)

        with task_share(self.spark, on_share):
            yield
        with self.lock:
            self.waiting_offsets += offsets

    def finished(self, records: int, offsets: int) -> None:
        """An action's exact records and its planned offsets."""
        with self.lock:  # a batch's commit thread reports while the next batch's action runs
            self.done_records += records
            self.done_offsets += offsets
            self.waiting_offsets -= offsets
            done = self.done_records
        self._observe(done, exact=True)

    def close(self) -> ProgressLine:
        """The last line: the exact records of the whole job."""
        line = self.meter.finish(self.done_records, time.monotonic())
        self._publish(line)
        return line

    def _observe(self, records: int, *, exact: bool) -> None:
        with self.lock:
            line = self.meter.observe(records, exact=exact, now=time.monotonic())
        if line is not None:
            self._publish(line)

    def _publish(self, line: ProgressLine) -> None:
        log.info("%s", line.render())
        try:
            save_progress(self.engine, line)
        except Exception:  # the page's copy must never fail the stage
            log.warning("progress run_id=%s: could not store the progress line", line.run_id, exc_info=True)


def share_of_tasks(stages: Iterable[tuple[int, int]]) -> float:
    """Finished tasks over all tasks of the stages seen so far, as (tasks, finished) pairs.

    Examples
    --------
    >>> share_of_tasks([(4, 4), (4, 1)])
    0.625
    >>> share_of_tasks([])
    0.0
    """
    pairs = list(stages)
    total = sum(t for t, _ in pairs)
    return sum(min(f, t) for t, f in pairs) / total if total else 0.0


@contextmanager
def task_share(spark: SparkSession, on_share: Callable[[float], None]) -> Iterator[None]:
    """Call ``on_share`` with the share of finished tasks while the block's Spark action runs."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        with _connect_handler(spark, on_share):
            yield
    else:
        with _status_tracker(spark, on_share):
            yield


@contextmanager
def _connect_handler(spark: Any, on_share: Callable[[float], None]) -> Iterator[None]:
    """Spark Connect streams the execution's stages with its results; the handler sees each update."""

    def handler(stages: Any, inflight_tasks: int, operation_id: str | None, done: bool) -> None:
        if stages:
            on_share(share_of_tasks((s.num_tasks, s.num_completed_tasks) for s in stages))

    spark.registerProgressHandler(handler)
    try:
        yield
    finally:
        spark.removeProgressHandler(handler)


@contextmanager
def _status_tracker(spark: SparkSession, on_share: Callable[[float], None]) -> Iterator[None]:
    """A thread reads the status tracker; a stage that leaves the active list counts as finished."""
    tracker = spark.sparkContext.statusTracker()
    already = set(tracker.getActiveStageIds())  # nothing of ours runs yet
    stop = threading.Event()

    def poll() -> None:
        seen: dict[int, tuple[int, int]] = {}
        while not stop.wait(POLL_S):
            active = set(tracker.getActiveStageIds()) - already
            for sid in seen.keys() - active:
                seen[sid] = (seen[sid][0], seen[sid][0])
            for sid in active:
                info = tracker.getStageInfo(sid)
                if info is not None:
                    seen[sid] = (info.numTasks, info.numCompletedTasks)
            if seen:
                on_share(share_of_tasks(seen.values()))

    thread = threading.Thread(target=poll, name="reprocess-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
