"""The ledger's positions of a pipeline: per partition, the next offset its committed runs have read.

One reader for every caller (planning, reconciliation, lag, resets, the mirror, plans), so the
ledger is read one way: ``reprocess.consumer_offsets``, keyed by :class:`TopicPartition`.
"""

from __future__ import annotations

from sqlalchemy import Connection

from reprocess.core.ranges import TopicPartition
from reprocess.postgres import queries


def ledger_positions(conn: Connection, pipeline: str, *, for_update: bool = False) -> dict[TopicPartition, int]:
    """``pipeline``'s next offset per partition; ``for_update`` locks the rows (the incremental's
    compare-and-set, a reset's write) until the transaction ends."""
    query = queries.LEDGER_FOR_UPDATE if for_update else queries.LEDGER_FOR_PIPELINE
    return {TopicPartition(r.topic, r.partition): r.next_offset for r in conn.execute(query, {"pipeline": pipeline})}


def ledger_movers(conn: Connection, pipeline: str) -> dict[TopicPartition, tuple[int, str]]:
    """``pipeline``'s next offset per partition and the run that last moved it (a commit or a reset)."""
    rows = conn.execute(queries.LEDGER_MOVERS, {"pipeline": pipeline})
    return {TopicPartition(r.topic, r.partition): (r.next_offset, r.run_id) for r in rows}
