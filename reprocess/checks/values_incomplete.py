"""Values incomplete: Debezium values the window's records left out that no record or stored row held,
so the target holds NULL (recorded by the commit in ``reprocess.incomplete_values``)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from sqlalchemy import text

from reprocess.checks.base import Query, Window, ranges_params
from reprocess.core.ranges import OffsetRange, TopicPartition

# Every range of the window in one statement (one pass over the pipeline's incomplete values).
_INCOMPLETE = text(
    "SELECT r.topic, r.partition, count(*) FROM unnest(CAST(:topics AS text[]), CAST(:partitions AS int[]), "
    "CAST(:starts AS bigint[]), CAST(:ends AS bigint[])) AS r(topic, partition, start, stop) "
    "JOIN reprocess.incomplete_values i ON i.pipeline = :pipeline AND i.topic = r.topic AND i.partition = r.partition "
    'AND i."offset" >= r.start AND i."offset" < r.stop GROUP BY 1, 2'
)


def _incomplete(window: Window) -> dict[TopicPartition, int]:
    rows = window.conn.execute(_INCOMPLETE, ranges_params(window))
    return {TopicPartition(topic, partition): int(n) for topic, partition, n in rows}


INCOMPLETE: Final = Query("incomplete values", _incomplete, 0)


class ValuesIncomplete:
    kind: Final = "values incomplete"
    query: Final = INCOMPLETE

    def detail(self, result: int) -> str | None:
        if not result:
            return None
        return (
            f"{result} values incomplete: the connector left them out and no record or stored row held "
            "them, so the target holds NULL (reprocess.incomplete_values); set REPLICA IDENTITY FULL on the "
            "source table and have the connector re-snapshot it"
        )

    def heal(self, result: int, window: OffsetRange, left_out: Collection[str]) -> OffsetRange | None:
        return None  # replaying cannot give what no record holds: the whole window only when nothing else heals


CHECK: Final = ValuesIncomplete()
