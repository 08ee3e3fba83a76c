"""Values incomplete: Debezium values the window's records left out that no record or stored row held,
so the target holds NULL (recorded by the commit in ``reprocess.incomplete_values``)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from sqlalchemy import text

from reprocess.checks.base import Query, Window
from reprocess.core.ranges import OffsetRange, TopicPartition

_INCOMPLETE = text(
    "SELECT count(*) FROM reprocess.incomplete_values WHERE pipeline = :pipeline AND topic = :topic "
    'AND partition = :partition AND "offset" >= :start AND "offset" < :end'
)


def _incomplete(window: Window) -> dict[TopicPartition, int]:
    out = {}
    for r in window.ranges:
        params = {"pipeline": window.spec.name, "topic": r.topic, "partition": r.partition, "start": r.start,
                  "end": r.end}  # fmt: skip
        out[r.tp] = int(window.conn.execute(_INCOMPLETE, params).scalar_one())
    return out


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
