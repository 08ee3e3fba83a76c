"""What the table, the dead letters and the ledger must hold after each step of a scenario.

The rules, written out here from DESIGN.md §2 and the README (not from the product's code):

- a record is read once its offset is below its partition's ledger (every run starts at the log start
  or at the ledger, so the read set of a partition is ``[0, ledger)``);
- a record is a row, a delete (a tombstone under ``tombstones: delete``, its key from the Kafka key) or
  a dead letter (``values.Invalid``: malformed JSON, a missing required field, a value the column's
  type cannot hold, a tombstone kept as a dead letter);
- per key the newest row or delete wins; "newer" is ONE total order: ``offset`` ordering compares
  (topic, partition, offset), a column ordering compares (the column's value in PostgreSQL's order,
  topic byte-wise, partition, offset); a key whose winner is a delete has no row;
- the ledger only moves forward: a run over ``[start, end)`` sets it to ``end`` when it has none or
  when ``start <= ledger < end`` (contiguous), and never rewinds it; a replay below it writes nothing.

Nothing here imports the product.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.adversary.avro_oracle import values as avro_values
from tests.adversary.model import Pipeline, Record, Step
from tests.adversary.steps import base_kind, derive, keeps
from tests.adversary.values import Invalid, check_key, from_json, parse_object, sort_key

Key = tuple[Any, ...]


@dataclass(frozen=True)
class Placed:
    partition: int
    offset: int
    record: Record


def interpret(
    p: Pipeline, r: Record, registry: dict[str, Any] | None = None
) -> tuple[str, Key, dict[str, Any]] | Invalid:
    """("row", key, values), ("filtered", key, values) or ("delete", key, {}) — or the Invalid that makes
    it a dead letter.
    ``registry``: an avro scenario's versions (:mod:`tests.adversary.avro_oracle`)."""
    try:
        if r.value is None:
            if p.tombstones != "delete":
                raise Invalid("tombstone kept as a dead letter")
            key = _tombstone_key(p, r.key)
            check_key(p.key, key)
            return "delete", key, {}
        values = avro_values(p, r.value, registry or {}) if p.format == "avro" else _json_values(p, r.value)
        key = tuple(values[c.name] for c in p.key)
        check_key(p.key, key)
        return "row" if keeps(p, values) else "filtered", key, values  # filtered: a good record the where drops
    except Invalid as exc:
        return exc


def _json_values(p: Pipeline, value: bytes) -> dict[str, Any]:
    obj = parse_object(value)
    values: dict[str, Any] = {}
    derived = dict(p.exprs)
    for c in p.columns:
        if c.name in derived:
            continue  # an expr column (tests/adversary/steps.py): derived below from the typed values
        v = obj.get(c.name)
        if v is None:
            if c.required or c in p.key:
                raise Invalid(f"missing required field {c.name}")
            values[c.name] = None
        else:
            values[c.name] = from_json(c, v)
    return values | derive(p, values)


def _tombstone_key(p: Pipeline, key: bytes | None) -> Key:
    if key is None:
        raise Invalid("a tombstone without a key")
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid("a key that is no text") from None
    if len(p.key) == 1:
        return (from_json(p.key[0], text),)
    obj = parse_object(key)
    if any(obj.get(c.name) is None for c in p.key):
        raise Invalid("a key object without every key column")
    return tuple(from_json(c, obj[c.name]) for c in p.key)


@dataclass
class Oracle:
    pipeline: Pipeline
    placed: list[Placed]
    topic: str
    ledger: dict[int, int] = field(default_factory=dict)
    registry: dict[str, Any] = field(default_factory=dict)  # an avro scenario's (Scenario.registry)

    @property
    def log_ends(self) -> dict[int, int]:
        ends = dict.fromkeys(range(self.pipeline.partitions), 0)
        for x in self.placed:
            ends[x.partition] = max(ends[x.partition], x.offset + 1)
        return ends

    def ranges(self, step: Step) -> dict[int, tuple[int, int]]:
        """The step's [start, end) per partition, from its cut fractions and the state before it."""
        out = {}
        kind = base_kind(step)
        for p, end in self.log_ends.items():
            held = self.ledger.get(p, 0)
            cut = step.cut[p % len(step.cut)] if step.cut else 1.0
            if kind == "backfill":
                out[p] = (0, round(cut * end))
            elif kind == "incremental":
                out[p] = (held, held + round(cut * (end - held)))
            elif kind == "catch_up":
                out[p] = (held, end)
            elif kind == "replay_all":
                out[p] = (0, held)
            elif kind == "replay_slice":
                start = int(step.slice_from[p % len(step.slice_from)] * held) if step.slice_from else 0
                out[p] = (start, start + round(cut * (held - start)))
            else:
                raise AssertionError(step.kind)
        return out

    def apply(self, ranges: dict[int, tuple[int, int]]) -> None:
        """The ledger after a committed run over ``ranges``."""
        for p, (start, end) in ranges.items():
            if start >= end:
                continue
            held = self.ledger.get(p)
            if held is None or start <= held < end:
                self.ledger[p] = end

    def read(self) -> list[Placed]:
        """The records a run has read: below the ledger, never one of an aborted transaction (read_committed)."""
        return [x for x in self.placed if x.offset < self.ledger.get(x.partition, 0) and not x.record.aborted]

    def rows(self) -> dict[Key, dict[str, Any]]:
        """key → the values of its newest record, for keys whose newest event is a row."""
        newest: dict[Key, tuple[Any, str, dict[str, Any]]] = {}
        for x in self.read():
            found = interpret(self.pipeline, x.record, self.registry)
            if isinstance(found, Invalid) or found[0] == "filtered":
                continue  # a filtered record is neither a row nor a delete: the newest KEPT record wins
            kind, key, values = found
            position: tuple[Any, ...] = (self.topic.encode(), x.partition, x.offset)
            if self.pipeline.ordering is not None:
                position = (sort_key(values[self.pipeline.ordering]), *position)
            if key not in newest or newest[key][0] < position:
                newest[key] = (position, kind, values)
        return {k: values for k, (_, kind, values) in newest.items() if kind == "row"}

    def dead_letters(self) -> set[tuple[int, int]]:
        return {
            (x.partition, x.offset)
            for x in self.read()
            if isinstance(interpret(self.pipeline, x.record, self.registry), Invalid)
        }

    def offsets_param(self, bound: dict[int, int]) -> str:
        return json.dumps({self.topic: {str(p): o for p, o in bound.items()}})
