"""One Spark task's write into a run's stage, idempotent per task: whatever Spark runs twice
(a task retried after a lost executor or Python worker, a speculative copy) stages its rows once.

A task attempt COPYs its rows and records ``(stage, task, attempt, rows)`` in
``reprocess.stage_writes`` in ONE transaction. An attempt that finds its task recorded writes
nothing and does not read its input: the committed attempt's rows stand. Two attempts writing
at once both COPY, and the second to insert the record waits for the first's transaction on the
primary key: when that commits, the second rolls its COPY back (first committer wins); when it
aborts, the second's goes through. So the stage holds each task's rows exactly once, and a
retry never makes the other tasks' work be read or written again.

Why per write task and not per Kafka offset range: the stage rows are the output of the dedupe's
aggregation (:func:`reprocess.spark.transform.to_stage`), so the task that writes holds the rows of
a set of keys (a shuffle partition, or the one read task when there is no shuffle), however
many ranges the read tasks grouped. Spark keeps a task's partition index for every attempt of
it, and the partition's contents depend on the planned ranges alone (the read is bounded, the
partitioning hashes the key), so any attempt's rows are that partition's rows and keeping the
first committed is exact. Partition indexes mean something within one stage job only: the
records are cleared with the stage whenever it is (re)created or dropped (:mod:`reprocess.postgres.stage`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import psycopg2
from psycopg2 import sql

from reprocess.core.errors import StaleStageTask
from reprocess.postgres.refused import IsolatingCopy

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TaskWrite:
    """What one finished task attempt reports: the stage holds ``rows`` rows of ``task``, written
    by attempt ``written_by`` (``attempt`` itself, or an earlier attempt that had committed)."""

    task: int
    attempt: int
    rows: int
    written_by: int


# The record of a task's committed write; the stage is named without its schema (reprocess_stage).
_WRITTEN: Final = "SELECT attempt, rows FROM reprocess.stage_writes WHERE stage = %s AND task = %s"
# Inserted last, in the COPY's transaction: a concurrent attempt's uncommitted record makes this
# wait on the primary key; DO NOTHING (no row returned) means another attempt committed first.
_RECORD: Final = (
    "INSERT INTO reprocess.stage_writes (stage, task, attempt, rows) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (stage, task) DO NOTHING RETURNING attempt"
)
_ALL_WRITTEN: Final = "SELECT task, attempt, rows FROM reprocess.stage_writes WHERE stage = %s"
_OID: Final = (
    "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s"
)
_FORGET: Final = "DELETE FROM reprocess.stage_writes WHERE stage = %s"


def write_task(
    dsn: str, table: str, oid: int, columns: Sequence[str], batches: Iterator[pa.RecordBatch], task: int, attempt: int
) -> TaskWrite:
    """COPY ``batches`` into ``table`` (``schema.name``) as ``attempt`` of ``task``, once per task.

    ``oid`` is the stage table the job created: an attempt that outlived its job (a zombie
    executor) finds the stage dropped or re-created by a newer job and writes nothing, since a
    task number means something in its own job only.

    Raises
    ------
    StaleStageTask
        The stage is not the one this task's job created.
    """
    schema_name, _, name = table.partition(".")
    copy = sql.SQL("COPY {}.{} ({}) FROM STDIN WITH (FORMAT csv)").format(
        sql.Identifier(schema_name), sql.Identifier(name), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    conn = psycopg2.connect(dsn)
    try:
        with conn, conn.cursor() as cur:
            # The stage is UNLOGGED and checked by row count before any commit reads it, so
            # its COPY needs no wait for a WAL flush (the target's merge keeps the server's).
            cur.execute("SET LOCAL synchronous_commit TO off")
            # Held to the commit: the stage cannot be dropped or re-created under this write.
            cur.execute(sql.SQL("LOCK TABLE {}.{} IN ROW EXCLUSIVE MODE").format(
                sql.Identifier(schema_name), sql.Identifier(name)))  # fmt: skip
            if stage_oid(cur, table) != oid:
                raise StaleStageTask(f"stage {table} was re-created after task {task}'s job started; it writes nothing")
            cur.execute(_WRITTEN, (name, task))
            found = cur.fetchone()
            if found is not None:  # an earlier attempt committed: keep its rows, read nothing
                return TaskWrite(task, attempt, int(found[1]), int(found[0]))
            # A row PostgreSQL refuses for a record-level reason is staged as its dead letter
            # (reprocess.postgres.refused); any other error fails the attempt, which Spark retries.
            writer = IsolatingCopy(cur, copy.as_string(cur))
            rows = 0
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                writer.copy(batch)
                rows += batch.num_rows
            if writer.refused:
                log.warning("stage=%s task=%d rows=%d refused by PostgreSQL, staged as dead letters=%d",
                            table, task, rows, writer.refused)  # fmt: skip
            cur.execute(_RECORD, (name, task, attempt, rows))
            if cur.fetchone() is None:  # a concurrent attempt committed first: ours is discarded
                conn.rollback()
                cur.execute(_WRITTEN, (name, task))
                winner = cur.fetchone()
                if winner is None:  # the job finished with the winner's rows and dropped the stage
                    raise StaleStageTask(f"stage {table} was dropped while a spare attempt of task {task} wrote")
                return TaskWrite(task, attempt, int(winner[1]), int(winner[0]))
        return TaskWrite(task, attempt, rows, attempt)
    finally:
        conn.close()


def stage_oid(cur: Any, table: str) -> int | None:
    """The oid of ``table`` (``schema.name``, unquoted parts), None when it does not exist."""
    schema_name, _, name = table.partition(".")
    cur.execute(_OID, (schema_name, name))
    found = cur.fetchone()
    return int(found[0]) if found else None


def written_tasks(cur: Any, stage: str) -> dict[int, tuple[int, int]]:
    """task → (attempt that wrote it, rows) for the stage table named ``stage``."""
    cur.execute(_ALL_WRITTEN, (stage,))
    return {int(task): (int(attempt), int(rows)) for task, attempt, rows in cur.fetchall()}


def forget_writes(cur: Any, stage: str) -> None:
    """Clear the stage's write records (with the stage itself, in the caller's transaction)."""
    cur.execute(_FORGET, (stage,))
