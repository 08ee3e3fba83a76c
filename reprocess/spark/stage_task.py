"""``df.mapInArrow(StageTask(...), TASK_WRITE_SCHEMA)``: each Spark task writes its rows into the
stage once (:func:`reprocess.postgres.stage_write.write_task`) and reports what the stage holds
for it, so the job can check the stage task by task.

Also the test hook :class:`TaskFault` (``$REPROCESS_TEST_TASK_FAULT``), read by the job's driver
and carried to the executors inside the pickled function; unset, it changes nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Final

from reprocess.postgres.stage_write import TaskWrite, write_task

if TYPE_CHECKING:
    import pyarrow as pa

TASK_WRITE_SCHEMA: Final = "task int, attempt int, rows bigint, written_by int"
FAULT_ENV: Final = "REPROCESS_TEST_TASK_FAULT"


class FaultKind(StrEnum):
    EXIT = "exit"  # the Python worker exits (os._exit) right after the task's COPY committed
    STALL = "stall"  # the attempt sleeps after its COPY committed: a straggler for speculation to copy


@dataclass(frozen=True, slots=True)
class TaskFault:
    """A TEST HOOK, never set in production: attempt 0 of write task ``task`` misbehaves the way
    a real cluster makes it, so the tests can prove Spark's retries and speculation harmless.

    ``exit:<task>`` kills the attempt's Python worker right after its COPY committed (a lost
    executor or worker: Spark runs the task again). ``stall:<task>:<seconds>`` makes the attempt
    sleep after its COPY committed (a slow node, a GC pause before the task reports: with
    ``spark.speculation`` Spark starts a copy elsewhere, which finds the task's rows staged).
    Only the first attempt is touched, so the job always finishes.

    Examples
    --------
    >>> TaskFault.parse("exit:1")
    TaskFault(kind=<FaultKind.EXIT: 'exit'>, task=1, seconds=0.0)
    >>> TaskFault.parse("stall:0:30").seconds
    30.0
    """

    kind: FaultKind
    task: int
    seconds: float = 0.0

    @classmethod
    def parse(cls, text: str) -> TaskFault:
        kind, _, rest = text.partition(":")
        task, _, seconds = rest.partition(":")
        try:
            return cls(FaultKind(kind), int(task), float(seconds or 0))
        except ValueError:
            raise ValueError(
                f"${FAULT_ENV}={text!r}: expected 'exit:<task>' or 'stall:<task>:<seconds>' (a test hook; unset it)"
            ) from None

    @classmethod
    def from_env(cls) -> TaskFault | None:
        text = os.environ.get(FAULT_ENV)
        return cls.parse(text) if text else None


@dataclass(frozen=True, slots=True)
class StageTask:
    """The stage write of one Spark task: its partition index and attempt number come from
    Spark's ``TaskContext`` (task 0, attempt 0 when called outside Spark, as a test may).

    A plain function over ``mapInArrow`` rather than a Python data source writer: the writer
    costs two extra Python planner processes per job (write plan, commit), ~2 s of a small run.
    ``dsn`` (the libpq URL) travels inside the pickled function: the executors may run in
    another environment than the driver (a Spark Connect server's Python workers, a cluster),
    so an environment variable set for the driver would not reach them. It is left out of the
    repr, so it never appears in a plan's text or a log.
    """

    table: str
    oid: int  # the stage table this job created (create_stage)
    columns: tuple[str, ...]
    dsn: str = field(repr=False)
    fault: TaskFault | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        task, attempt = (context.partitionId(), context.attemptNumber()) if context is not None else (0, 0)
        fault = self.fault if self.fault is not None and self.fault.task == task and attempt == 0 else None
        written = write_task(self.dsn, self.table, self.oid, self.columns, batches, task, attempt)
        if fault is not None and fault.kind is FaultKind.EXIT:
            os._exit(1)  # the test hook: the worker dies with its COPY committed
        if fault is not None and fault.kind is FaultKind.STALL:
            time.sleep(fault.seconds)  # the test hook: committed, but slow to report
        yield task_write_batch(written)


def task_write_batch(written: TaskWrite) -> pa.RecordBatch:
    """A task's one-row result in :data:`TASK_WRITE_SCHEMA`."""
    import pyarrow as pa

    schema = pa.schema(
        [("task", pa.int32()), ("attempt", pa.int32()), ("rows", pa.int64()), ("written_by", pa.int32())]
    )
    values = {"task": [written.task], "attempt": [written.attempt], "rows": [written.rows]}
    return pa.RecordBatch.from_pydict({**values, "written_by": [written.written_by]}, schema=schema)
