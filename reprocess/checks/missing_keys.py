"""Missing keys: keys whose newest record of the window has no target row (nor deletion marker)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from reprocess.checks.base import Query, Window
from reprocess.core.ranges import OffsetRange, TopicPartition
from reprocess.postgres.key_checks import key_checks_sql


@dataclass(frozen=True, slots=True)
class KeyRows:
    """One partition's side of the key check's anti-join: keys whose newest window record lies in it."""

    keys: int = 0
    missing: int = 0  # no target row
    stale: int = 0  # a target row older (by the Ordering) than the newest record
    missing_examples: tuple[str, ...] = ()
    stale_examples: tuple[str, ...] = ()


def _keys(window: Window) -> dict[TopicPartition, KeyRows]:
    window.cur.execute(key_checks_sql(window.spec, window.stage))
    return {
        TopicPartition(topic, partition): KeyRows(keys, missing, stale, tuple(m or ()), tuple(s or ()))
        for topic, partition, keys, missing, stale, m, s in window.cur.fetchall()
    }


KEYS: Final = Query("keys", _keys, KeyRows())  # read by missing_keys and older_rows: run once


class MissingKeys:
    kind: Final = "missing"
    query: Final = KEYS

    def detail(self, result: KeyRows) -> str | None:
        if not result.missing:
            return None
        return f"{result.missing} keys missing from the target (e.g. {', '.join(result.missing_examples)})"

    def heal(self, result: KeyRows, window: OffsetRange, left_out: Collection[str]) -> OffsetRange | None:
        return window  # their records may lie anywhere in the window


CHECK: Final = MissingKeys()
