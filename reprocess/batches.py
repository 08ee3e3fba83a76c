"""Chunked runs: cut a plan into batches that each commit atomically, and resume after a failure.

A batch holds at most ``batch_size`` offsets per partition. Batch ``k`` is a child run
``<run_id>#<k>`` with its own ranges, stage and commit, so a run of n batches that fails in
batch k+1 keeps batches 0..k and starts again at k+1.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import Connection, Engine, text

from reprocess import queries
from reprocess.errors import ReprocessError
from reprocess.plan import load_plan
from reprocess.ranges import OffsetRange
from reprocess.runs import RunPlan

log = logging.getLogger(__name__)

_CREATE_CHILD = text(
    "INSERT INTO reprocess.runs (run_id, pipeline, kind, state, request, parent_run_id, batch_index, batch_count, "
    "dag_id, dag_run_id, planned_at) SELECT :child, pipeline, kind, 'planned', request, run_id, :k, :n, dag_id, "
    "dag_run_id, now() FROM reprocess.runs WHERE run_id = :parent ON CONFLICT (run_id) DO NOTHING"
)
_CHILDREN = text(
    "SELECT run_id, state, batch_index, records_read, rows_staged, rows_upserted, dead_letters "
    "FROM reprocess.runs WHERE parent_run_id = :parent ORDER BY batch_index"
)
_MARK_PARENT_COMMITTED = text(
    "UPDATE reprocess.runs SET state = 'committed', committed_at = now(), records_read = :records_read, "
    "rows_staged = :rows_staged, rows_upserted = :rows_upserted, dead_letters = :dead_letters, error = NULL, "
    "batch_count = :n WHERE run_id = :run_id"
)


def split_batches(ranges: tuple[OffsetRange, ...] | list[OffsetRange], batch_size: int) -> list[list[OffsetRange]]:
    """Batch k holds ``[start + k·size, start + (k+1)·size)`` of every partition still unfinished.

    Examples
    --------
    >>> [[(r.partition, r.start, r.end) for r in b] for b in split_batches([OffsetRange("t", 0, 0, 5),
    ...                                                                     OffsetRange("t", 1, 10, 12)], 2)]
    [[(0, 0, 2), (1, 10, 12)], [(0, 2, 4)], [(0, 4, 5)]]
    """
    batches: list[list[OffsetRange]] = []
    k = 0
    while True:
        batch = [
            OffsetRange(r.topic, r.partition, r.start + k * batch_size, min(r.start + (k + 1) * batch_size, r.end))
            for r in ranges
            if r.start + k * batch_size < r.end
        ]
        if not batch:
            return batches
        batches.append(batch)
        k += 1


def child_run_id(run_id: str, k: int) -> str:
    return f"{run_id}#{k}"


def run_in_batches(
    engine: Engine, plan: RunPlan, batch_size: int, stage_and_commit: Callable[[RunPlan, int, int], None]
) -> int:
    """Create the child runs once, then stage+commit each one not yet committed, in order.

    Returns the number of batches. ``stage_and_commit(child_plan, k, n)`` does one batch.
    """
    batches = split_batches(plan.ranges, batch_size)
    n = len(batches)
    with engine.begin() as conn:
        for k, batch in enumerate(batches):
            child = child_run_id(plan.run_id, k)
            conn.execute(_CREATE_CHILD, {"child": child, "parent": plan.run_id, "k": k, "n": n})
            if not conn.execute(queries.RUN_RANGES, {"run_id": child}).first():
                conn.execute(
                    queries.INSERT_RUN_RANGE,
                    [{"run_id": child, "topic": r.topic, "partition": r.partition, "start": r.start, "end": r.end}
                     for r in batch],
                )  # fmt: skip
        states = {r.run_id: r.state for r in conn.execute(_CHILDREN, {"parent": plan.run_id})}
    for k in range(n):
        child = child_run_id(plan.run_id, k)
        if states.get(child) == "committed":
            log.info("batch run_id=%s %d of %d already committed: resuming after it", plan.run_id, k + 1, n)
            continue
        with engine.connect() as conn:
            child_plan = load_plan(conn, child)
        stage_and_commit(child_plan, k, n)
    return n


def commit_parent(conn: Connection, run_id: str) -> dict[str, int] | None:
    """Mark a chunked run committed once every batch is; None when the run has no batches.

    Runs inside the caller's transaction (the commit protocol's), which holds the run's lock.

    Raises
    ------
    ReprocessError
        Naming the first batch that is not committed.
    """
    children = conn.execute(_CHILDREN, {"parent": run_id}).all()
    if not children:
        return None
    pending = [c for c in children if c.state != "committed"]
    if pending:
        raise ReprocessError(
            f"run {run_id}: batch {pending[0].batch_index + 1} of {len(children)} is {pending[0].state}, "
            "not committed; re-run the Spark task to resume from it"
        )
    totals = {
        name: sum(getattr(c, name) or 0 for c in children)
        for name in ("records_read", "rows_staged", "rows_upserted", "dead_letters")
    }
    conn.execute(_MARK_PARENT_COMMITTED, {"run_id": run_id, "n": len(children), **totals})
    return totals
