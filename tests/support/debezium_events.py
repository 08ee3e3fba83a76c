"""A source table's life as Debezium streams it, written straight to a topic of any number of
partitions (no Kafka Connect): the JSON converter without schemas, REPLICA IDENTITY DEFAULT, the
shapes ``tests/integration/formats/test_cdc.py`` checks against a real connector. The table itself
(:attr:`SourceTable.rows`) is the oracle: it imports nothing of the product.

- an insert is ``op: c`` with the whole row; an update is ``op: u`` whose unchanged large
  (TOASTed) columns carry the placeholder; a delete is ``op: d`` whose ``before`` holds the key
  alone, then its tombstone;
- a primary-key change is the old key's delete (header ``__debezium.newkey``) and tombstone on the
  old key's partition, then the new key's create (header ``__debezium.oldkey``, the large columns
  left out) on the new key's, both at the statement's commit time (``source.ts_ms``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PLACEHOLDER = "__debezium_unavailable_value"
Key = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Event:
    partition: int
    key: bytes
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass
class SourceTable:
    """The rows (the oracle) and the change events of every statement, in commit order."""

    key: tuple[str, ...]
    columns: tuple[str, ...]  # the non-key columns
    large: frozenset[str]  # left out of a change that keeps them (TOASTed)
    partition_of: Callable[[Key], int]
    rows: dict[Key, dict[str, Any]] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    ts_ms: int = 1_700_000_000_000

    def _key_json(self, key: Key) -> bytes:
        return json.dumps(dict(zip(self.key, key, strict=True)), separators=(",", ":")).encode()

    def _emit(self, key: Key, op: str, after: Mapping[str, Any] | None, headers: tuple[tuple[str, bytes], ...] = ()):
        before = None
        if op == "d":  # REPLICA IDENTITY DEFAULT: the key only
            before = {**dict(zip(self.key, key, strict=True)), **dict.fromkeys(self.columns)}
        value = {"before": before, "after": dict(after) if after is not None else None, "op": op,
                 "source": {"ts_ms": self.ts_ms, "lsn": self.ts_ms * 8}, "ts_ms": self.ts_ms}  # fmt: skip
        self.events.append(Event(self.partition_of(key), self._key_json(key), json.dumps(value).encode(), headers))

    def _row(self, key: Key, values: Mapping[str, Any], left_out: Sequence[str] = ()) -> dict[str, Any]:
        row = {**dict(zip(self.key, key, strict=True)), **values}
        return {**row, **dict.fromkeys(left_out, PLACEHOLDER)}

    def insert(self, key: Key, **values: Any) -> None:
        self.ts_ms += 1
        self.rows[key] = {c: values.get(c) for c in self.columns}
        self._emit(key, "c", self._row(key, self.rows[key]))

    def update(self, key: Key, **values: Any) -> None:
        self.ts_ms += 1
        self.rows[key].update(values)
        kept = [c for c in self.large if c not in values]
        self._emit(key, "u", self._row(key, self.rows[key], kept))

    def delete(self, key: Key) -> None:
        self.ts_ms += 1
        del self.rows[key]
        self._emit(key, "d", None)
        self.events.append(Event(self.partition_of(key), self._key_json(key), None))

    def rekey(self, old: Key, new: Key) -> None:
        """``UPDATE … SET <key> = new WHERE <key> = old``: every other value unchanged."""
        self.ts_ms += 1
        self.rows[new] = self.rows.pop(old)
        self._emit(old, "d", None, (("__debezium.newkey", self._key_json(new)),))
        self.events.append(Event(self.partition_of(old), self._key_json(old), None))
        self._emit(new, "c", self._row(new, self.rows[new], sorted(self.large)),
                   (("__debezium.oldkey", self._key_json(old)),))  # fmt: skip

    def ends(self, partitions: int, upto: int | None = None) -> dict[int, int]:
        """Per partition, the offset after the first ``upto`` events (all by default)."""
        out = dict.fromkeys(range(partitions), 0)
        for e in self.events[:upto]:
            out[e.partition] += 1
        return out


def produce(producer: Any, topic: str, events: Sequence[Event]) -> None:
    """Send ``events`` in order, each to its partition (a fresh topic: the n-th of a partition is at offset n)."""
    for e in events:
        producer.produce(topic, key=e.key, value=e.value, partition=e.partition, headers=list(e.headers))
    producer.flush(30)
