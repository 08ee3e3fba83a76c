"""Dead letters unrecorded: invalid records of the window that ``reprocess.dead_letters`` does not hold."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from psycopg2 import sql

from reprocess.checks.base import Query, Window
from reprocess.core.ranges import OffsetRange, TopicPartition
from reprocess.core.stage_rows import DEAD
from reprocess.postgres.dead_letters import dead_letter_of


@dataclass(frozen=True, slots=True)
class DeadRows:
    dead: int = 0  # invalid records of the window
    unrecorded: int = 0  # ... that reprocess.dead_letters does not hold


def _dead(window: Window) -> dict[TopicPartition, DeadRows]:
    window.cur.execute(
        sql.SQL(
            'SELECT s._kafka_topic, s._kafka_partition, count(*), count(*) FILTER (WHERE d."offset" IS NULL) '
            "FROM {stage} s LEFT JOIN reprocess.dead_letters d ON d.pipeline = %(pipeline)s AND {same_record} "
            "WHERE s._kind = {dead} GROUP BY 1, 2"
        ).format(stage=window.stage, same_record=dead_letter_of("d", "s"), dead=sql.Literal(DEAD)),
        {"pipeline": window.spec.name},
    )
    return {TopicPartition(t, p): DeadRows(n, unrecorded) for t, p, n, unrecorded in window.cur.fetchall()}


DEAD_LETTERS: Final = Query("dead letters", _dead, DeadRows())


class DeadLettersUnrecorded:
    kind: Final = "dead letters unrecorded"
    query: Final = DEAD_LETTERS

    def detail(self, result: DeadRows) -> str | None:
        return f"{result.unrecorded} invalid records not in the dead letters" if result.unrecorded else None

    def heal(self, result: DeadRows, window: OffsetRange, left_out: Collection[str]) -> OffsetRange | None:
        return window


CHECK: Final = DeadLettersUnrecorded()
