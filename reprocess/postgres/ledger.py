"""The ledger's positions of a pipeline: per partition, the next offset its committed runs have read.

One reader for every caller (planning, reconciliation, lag, resets, the mirror, plans), so the
ledger is read one way: ``reprocess.consumer_offsets``, keyed by :class:`TopicPartition`; and one
writer per commit kind, each recording the committed ranges with the move: :func:`advance_ledger`
(a merge into the live target) and :func:`point_ledger_at` (a rebuild's swap).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from sqlalchemy import Connection, text

from reprocess.core.ranges import OffsetRange, TopicPartition
from reprocess.postgres import queries

_FORGET_COMMITTED: Final = text("DELETE FROM reprocess.committed_ranges WHERE pipeline = :pipeline")


def ledger_positions(conn: Connection, pipeline: str, *, for_update: bool = False) -> dict[TopicPartition, int]:
    """``pipeline``'s next offset per partition; ``for_update`` locks the rows (the incremental's
    compare-and-set, a reset's write) until the transaction ends."""
    query = queries.LEDGER_FOR_UPDATE if for_update else queries.LEDGER_FOR_PIPELINE
    return {TopicPartition(r.topic, r.partition): r.next_offset for r in conn.execute(query, {"pipeline": pipeline})}


def ledger_movers(conn: Connection, pipeline: str) -> dict[TopicPartition, tuple[int, str]]:
    """``pipeline``'s next offset per partition and the run that last moved it (a commit or a reset)."""
    rows = conn.execute(queries.LEDGER_MOVERS, {"pipeline": pipeline})
    return {TopicPartition(r.topic, r.partition): (r.next_offset, r.run_id) for r in rows}


def advance_ledger(
    conn: Connection, pipeline: str, run_id: str, ranges: Iterable[OffsetRange], starts: Mapping[TopicPartition, int]
) -> None:
    """A commit's move: each partition's position from its accounted start to the range's end (a
    compare-and-set: a position elsewhere is left as it is), and the ranges recorded committed."""
    for r in ranges:
        params = {"pipeline": pipeline, "run_id": run_id, "topic": r.topic, "partition": r.partition,
                  "start": r.start, "end": r.end}  # fmt: skip
        conn.execute(queries.ADVANCE_LEDGER, {**params, "start": starts[r.tp]})
        conn.execute(queries.INSERT_COMMITTED_RANGE, params)


def point_ledger_at(conn: Connection, pipeline: str, run_id: str, ranges: Iterable[OffsetRange]) -> None:
    """A swap's move: the positions at the ends of what the rebuild read, whatever they were, and
    the committed ranges those ranges alone (the table now holds exactly them)."""
    conn.execute(_FORGET_COMMITTED, {"pipeline": pipeline})
    for r in ranges:
        params = {"pipeline": pipeline, "run_id": run_id, "topic": r.topic, "partition": r.partition,
                  "start": r.start, "end": r.end, "new": r.end}  # fmt: skip
        conn.execute(queries.RESET_LEDGER, params)
        conn.execute(queries.INSERT_COMMITTED_RANGE, params)
