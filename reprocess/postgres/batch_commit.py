"""A chunked run's own commit: its batches each went through the commit protocol
(:mod:`reprocess.postgres.commit`); the run commits once every batch has and the batches cover
its plan exactly, with their counts summed."""

from __future__ import annotations

from sqlalchemy import Connection

from reprocess.core.errors import RunStateError
from reprocess.core.ranges import TopicPartition, uncovered
from reprocess.core.runs import RunState
from reprocess.postgres import store


def sum_committed_batches(conn: Connection, run_id: str) -> dict[str, int] | None:
    """Mark a chunked run committed once every batch is; None when the run has no batches.

    Runs inside the commit protocol's transaction (postgres.commit), which holds the run's lock.

    Raises
    ------
    ReprocessError
        Naming the first batch that is not committed.
    """
    children = store.batch_runs(conn, run_id)
    if not children:
        return None
    pending = [c for c in children if c.state != RunState.COMMITTED]
    if pending:
        raise RunStateError(
            f"run {run_id}: batch {pending[0].batch_index + 1} of {len(children)} is {pending[0].state}, "
            "not committed; re-run the Spark task to resume from it",
            run_id=run_id,
        )
    _check_batches_cover_plan(conn, run_id)
    totals = {name: sum(getattr(c, name) or 0 for c in children) for name in store.RUN_COUNTS}
    store.mark_parent_committed(conn, run_id, len(children), totals)
    return totals


def _check_batches_cover_plan(conn: Connection, run_id: str) -> None:
    """A chunked run commits only when its batches read exactly its plan: a batch cut from another
    plan of the run (a re-plan) would leave a slice unread while the run says committed."""
    plan = store.load_ranges(conn, run_id).ranges
    cut, _ = store.batch_cut(conn, run_id)
    pieces: dict[TopicPartition, list[tuple[int, int]]] = {}
    for r in (r for batch in cut for r in batch):
        pieces.setdefault(r.tp, []).append((r.start, r.end))
    planned = {r.tp: (r.start, r.end) for r in plan if r.width}
    wrong = sorted(
        f"{tp.topic}[{tp.partition}]"
        for tp in {*planned, *pieces}
        if tp not in planned
        or any(a < planned[tp][0] or b > planned[tp][1] for a, b in pieces.get(tp, []))
        or uncovered(*planned[tp], pieces.get(tp, []))
    )
    if wrong:
        raise RunStateError(
            f"run {run_id}: its batches do not cover its plan exactly on {', '.join(wrong)}; nothing was committed. "
            "its batches were cut from another plan of it; trigger a new run for the range instead",
            run_id=run_id,
        )
