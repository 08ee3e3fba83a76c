"""Hypothesis strategies for scenarios: a pipeline over the types of :mod:`tests.adversary.values`,
records over 1-4 partitions (duplicates re-sent, late older versions, tombstones, hostile values at
and beyond each type's limits, malformed records) and the steps run over them (a backfill cut at a
random offset, incrementals, replays of the whole range and of an older slice, a catch-up).

Each field's value is a raw JSON fragment drawn from its type's pool, mostly from the values the
column holds, sometimes from the ones it must refuse; the oracle decides which is which on its own.
Every choice is a Hypothesis draw, so a failing scenario shrinks (fewer records, fewer steps,
smaller cuts). Nothing here imports the product.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st

from tests.adversary.model import Pipeline, Record, Scenario, Step
from tests.adversary.values import ORDERABLE, ORDERABLE_DIGITS, TYPES, Column


def _long_text(n: int) -> str:
    """``n`` characters of base64 that do not compress (PostgreSQL's index would store compressed text)."""
    out, block = "", b"adversary"
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += base64.b64encode(block).decode()
    return out[:n]


LONG_KEYS = (_long_text(2000), _long_text(3000))  # far below and far above the btree row limit (review IV #6)
# Per key type, its logical keys, each as the JSON spellings a record may use for it (the first is
# how a Kafka key, a tombstone's, writes it): PostgreSQL's primary key takes them as one key.
KEY_SPELLINGS: dict[str, list[list[str]]] = {
    "text": [['"a"'], ['"B"'], ['"é"'], ['"k-1"'], ['"salesapac"'], ['"sales-eu"'], ['"😀"', '"\\ud83d\\ude00"'],
             ['"1"', "1"], *([f'"{k}"'] for k in LONG_KEYS)],
    "bigint": [["0", '" 0 "'], ["1", '"1"'], ["-1"], ["2"], ["9223372036854775807"], ["-9223372036854775808"]],
    "integer": [["0"], ["1", '" 1 "'], ["-1"], ["2147483647"]],
    "smallint": [["0"], ["32767", '"32767"'], ["-32768"]],
    "numeric": [["1.5", '"1.50"', '"15e-1"'], ["0", "-0.0", '"0.00"'], ["10", '"1e1"'], ["-2.25"],
                ['"99999999999999999999999999999999999999999"']],
    "double precision": [["0.0", "-0.0"], ["1.5", '"1.5"'], ["-1e-300"]],
    "uuid": [['"a0000000-0000-0000-0000-000000000001"', '"A0000000000000000000000000000001"',
              '"{a0000000-0000-0000-0000-000000000001}"'], ['"b0000000-0000-0000-0000-000000000000"']],
    "date": [['"2026-01-10"'], ['"0001-01-01"'], ['"9999-12-31"']],
    "time": [['"10:00"', '"10:00:00"', '"10:00:00.000000"'], ['"24:00"', '"24:00:00"'], ['"00:00:00.000001"']],
    "timestamptz": [['"2026-11-01T00:00:00Z"', '"2026-11-01T02:00:00+02:00"', '"2026-11-01"'],
                    ['"0001-01-01T00:00:00Z"']],
    "bytea": [['"AAE="'], ['"/w=="'], ['"aGVsbG8="']],
}  # fmt: skip
JSON_KEY_TYPES = tuple(KEY_SPELLINGS)
# The Debezium model's key types and logical values (tests/adversary/debezium.py).
KEY_TYPES = ("text", "bigint", "integer")
KEY_VALUES: dict[str, list[Any]] = {
    "text": ["a", "B", "é", "k-1", "salesapac", "sales-eu", "😀", "1"],
    "bigint": [0, 1, -1, 2, 9223372036854775807, -9223372036854775808],
    "integer": [0, 1, -1, 2147483647],
}
# type → (values the column holds, values it refuses), as the JSON text of the field.
POOLS: dict[str, tuple[list[str], list[str]]] = {
    "text": (
        ['"a"', '"B"', '"é"', '"x y"', '""', '"sales-eu"', '"salesapac"', '"\\u00e9"', '"😀"', '"\\ud83d\\ude00"',
         "-12", "true", "123456789012345678901234567890123456789012", '"12.50"', f'"{_long_text(70_000)}"'],
        ['"a\\u0000b"', '"\\ud800"', "12.50", "1e2", '{"x":1}', "[1]"],
    ),
    "bigint": (
        ["0", "1", "-1", "10", "9", "9223372036854775807", "-9223372036854775808", '" 12 "'],
        ["9223372036854775808", "-9223372036854775809", '"0x10"', "1.5", "1e2", "true"],
    ),
    "integer": (["0", "7", "-7", "10", "9", "2147483647", "-2147483648"], ["2147483648", "-2147483649", "1.0"]),
    "smallint": (["0", "32767", "-32768", "5"], ["32768", "-32769"]),
    "numeric": (
        ["10", "9", "99.5", "100", "12.50", "-1", "-2", "0.000000000123456789", "-0.0", '"1.50e2"', "150", "0",
         '"99999999999999999999999999999999999999999"', "12345678901234567890.123456789012345678"],
        ['"NaN"', '"Infinity"', "1234567890123456789012345678901234567890.5", '"0x1A"', "true", "15e-1"],
    ),
    "double precision": (
        ["0.0", "-0.0", "1.5", "10", "9.5", "0.1", "1.7976931348623157e308", "-1e-300", '"NaN"', '"Infinity"',
         '"-Infinity"'],
        ["1e400", '"1e400"', '"1e-400"', '"abc"'],
    ),
    "real": (["0.5", "1.25", "-2", "0.1", "10", '"NaN"'], ["1e39", '"x"']),
    "boolean": (
        ["true", "false", '"yes"', '"no"', "0", "1", '"t"', '"f"', '" TRUE "', '"Y"', '"n"'],
        ['"maybe"', "[true]", '"on"', '"off"', "2", "1.0", "-1", '"tr"', '"yes please"'],
    ),
    "date": (
        ['"2026-01-10"', '"2025-12-31"', '"0999-01-01"', '"0001-01-01"', '"9999-12-31"', '"2024-02-29"'],
        ['"10000-01-01"', '"2026-02-30"', '"0000-01-01"', '"2026-1-1"'],
    ),
    "time": (
        ['"10:00"', '"10:00:00"', '"10:00:00.5"', '"10:00:00.500000"', '"24:00"', '"24:00:00"', '"23:59:59.999999"',
         '"00:00"', '"09:30"', '"10:00:00.000001"'],
        ['"25:00"', '"24:00:01"', '"10:60"', '"noon"'],
    ),
    "timestamp": (
        ['"2026-01-01T10:00:00"', '"2026-01-01 09:00:00"', '"2026-01-01T10:00:00+02:00"', '"2026-11-01"',
         '"0001-01-01T00:00:00"', '"9999-12-31T23:59:59.999999"', '"2026-01-01T10:00:00.123456789"'],
        ['"10000-01-01T00:00:00"', '"12:00"', '"2026-02-30T00:00:00"'],
    ),
    "timestamptz": (
        ['"2026-11-01T00:00:00Z"', '"2026-11-01T00:00:00+02:00"', '"2026-11-01T12:00:00"', '"2026-11-01"',
         '"2026-11-01T00:00:00.123456789Z"', '"0001-01-01T00:00:00Z"', '"9999-12-31T23:59:59Z"',
         '"2026-10-31T22:00:00Z"'],
        ['"0000-01-01T00:00:00Z"', '"10000-01-01T00:00:00Z"', '"0001-01-01T00:00:00+01:00"',
         '"9999-12-31T23:59:59-01:00"', '"12:00"', '"2026-02-30T00:00:00Z"', '"2026-12-31T23:59:60Z"', "1700000000"],
    ),
    "uuid": (
        ['"b0000000-0000-0000-0000-000000000000"', '"A0000000-0000-0000-0000-000000000000"',
         '"a0000000000000000000000000000000"', '"{a0000000-0000-0000-0000-00000000000f}"'],
        ['"not-a-uuid"', "12"],
    ),
    "json": (
        ['{"a":1}', '[1,"x",null]', '"123"', "123", "true", '{"b":1,"a":2}', '{"a":"x\\u0000"}', "1.50", "[]",
         "{}", '{"n":1.5e2}', '{"deep":[[[[1]]]]}', '{"t":"\\u00e9"}'],
        ['{"a":"\\ud800"}', '{"q":1,"q":2}'],
    ),
    "jsonb": (
        ['{"a":1}', '{"a":{"b":[1,2,"x"]}}', "[1,2]", '"123"', "123", "true", '{"b":1,"a":2}', "1.50", "{}", '""',
         '{"t":"\\u00e9"}', '{"a":[1,{"b":null}]}', '{"n":1e2}'],
        ['{"a":"x\\u0000"}', '{"a":"\\ud800"}', '{"q":1,"q":2}', '["\\u0000"]', '"\\u0000"'],
    ),
    "bytea": (
        ['"AAE="', '""', '"/w=="', '"aGVsbG8gd29ybGQ="', '"AA=="', '"+/+/"', '"AAE"', "12", '"AA E="'],
        ['"A"', '"!!!!"', '"-_8="', '"AAAAA"', "1.5"],
    ),
    "text[]": (
        ["[]", '["a","b c"]', '["",null]', '["NULL"]', '["a,b","{x}","q\\"uote","back\\\\slash"]', '[1,"x"]',
         "[true]", '["é","😀"]', "[null]"],
        ['["a\\u0000"]', "[12.50]", "[1e2]", '[{"a": 1.50}]', '"[]"', '{"a":1}', "[[1,2]]", "[1.5]", '[{"a":1}]',
         '["\\ud800"]', "1"],
    ),
    "bigint[]": (
        ["[]", "[1,2,3]", "[null,1]", "[9223372036854775807,-9223372036854775808]", '["7"," 8 "]'],
        ["[1.5]", "[9223372036854775808]", "[[1]]", '["x"]', "[true]", "[1e2]", '"[1]"', "{}"],
    ),
}  # fmt: skip
MALFORMED = [b"not json", b"[1]", b"", b"null", b"   ", b"{'a':1}", b'{"k0":', b"\xef\xbb\xbf{}", b"\xff\xfe"]


def numeric_pool(precision: int, scale: int) -> tuple[list[str], list[str]]:
    """numeric(p,s)'s values at and beyond its limits (PostgreSQL rounds half away from zero)."""
    whole = precision - scale
    top = "9" * whole + ("." + "9" * scale if scale else "") if whole else "0." + "9" * scale
    half = "0." + "0" * scale + "5"  # rounds up to the last place
    good = ["0", top, "-" + top, half, "-" + half, "0." + "4" * (scale + 1)]
    if whole:
        good += ["1", "-1", "9" * min(whole, 3)]
    bad = ["1" + "0" * whole, "-1" + "0" * whole, top + "9" if scale else top + ".5", '"NaN"']
    if precision > ORDERABLE_DIGITS:  # a JSON number of more than 38 digits is refused: such values are sent as text
        return [f'"{v}"' for v in good], [v if v.startswith('"') else f'"{v}"' for v in bad]
    return good, bad


def _pool(c: Column) -> tuple[list[str], list[str]]:
    return numeric_pool(*c.numeric) if c.numeric else POOLS[c.type]


@st.composite
def columns(draw: st.DrawFn, name: str, kinds: tuple[str, ...], required: bool, orderable: bool = False) -> Column:
    kind = draw(st.sampled_from(kinds))
    mods = None
    if kind == "numeric(p,s)":  # an ordering column holds at most 38 digits (the spec refuses more)
        precision = draw(st.integers(1, ORDERABLE_DIGITS if orderable else 60))
        mods = (precision, draw(st.integers(0, precision)))
    return Column(name, kind, required, mods)


def _key_json(kind: str, group: int, spelled: int) -> str:
    spellings = KEY_SPELLINGS[kind][group]
    return spellings[spelled % len(spellings)]


def _kafka_key(key: tuple[Column, ...], logical: tuple[object, ...]) -> bytes:
    if len(key) == 1:
        return str(logical[0]).encode()
    return json.dumps({c.name: v for c, v in zip(key, logical, strict=True)}, ensure_ascii=False).encode()


def _spelled_kafka_key(key: tuple[Column, ...], groups: tuple[int, ...]) -> bytes:
    """The Kafka key of a logical key given by its spelling groups: each column's first spelling."""
    return _kafka_key(key, tuple(json.loads(KEY_SPELLINGS[c.type][g][0]) for c, g in zip(key, groups, strict=True)))


@st.composite
def pipelines(
    draw: st.DrawFn, types: tuple[str, ...] = TYPES, fmt: str = "json", key_types: tuple[str, ...] = KEY_TYPES
) -> Pipeline:
    """1-2 key columns of ``key_types``, 1-4 value columns of ``types``; a column ordering in three
    pipelines of four, its type any orderable one of ``types``, else offset ordering."""
    key = tuple(draw(columns(f"k{i}", key_types, True)) for i in range(draw(st.integers(1, 2))))
    values = [draw(columns(f"c{i}", types, draw(st.booleans()))) for i in range(draw(st.integers(1, 4)))]
    ordering = None
    orderable = tuple(t for t in types if t in ORDERABLE)
    if orderable and draw(st.integers(0, 3)) != 0:
        values.insert(0, draw(columns("v", orderable, True, orderable=True)))
        ordering = "v"
    tombstones = "delete" if ordering is None and draw(st.booleans()) else "dead_letter"
    return Pipeline(key, (*key, *values), ordering, tombstones, draw(st.integers(1, 4)), fmt)


@st.composite
def scenarios(
    draw: st.DrawFn,
    max_records: int = 40,
    max_steps: int = 4,
    types: tuple[str, ...] = TYPES,
    key_types: tuple[str, ...] = JSON_KEY_TYPES,
) -> Scenario:
    """``types``/``key_types``: the value and key column types drawn from (``make fuzz``'s FUZZ_TYPES,
    FUZZ_KEY_TYPES)."""
    pipeline = draw(pipelines(types, "json", key_types))
    key, partitions, ordering = pipeline.key, pipeline.partitions, pipeline.ordering
    values = pipeline.columns[len(key) :]

    groups = [range(len(KEY_SPELLINGS[c.type])) for c in key]
    logical = draw(st.lists(st.tuples(*(st.sampled_from(g) for g in groups)), min_size=1, max_size=6, unique=True))

    def row(draw: st.DrawFn, which: int, partition: int, kafka_key: bytes, kind: str) -> Record:
        if kind == "malformed":
            return Record(partition, kafka_key, draw(st.sampled_from(MALFORMED)), "malformed")
        fields = [f'"{c.name}":{_key_json(c.type, g, draw(st.integers(0, 3)))}' for c, g in
                  zip(key, logical[which], strict=True)]  # fmt: skip
        hostile = []
        for c in values:
            if not c.required and draw(st.integers(0, 5)) == 0:
                continue  # left out: NULL
            good, bad = _pool(c)
            refused = draw(st.integers(0, 9)) == 0
            fragment = draw(st.sampled_from(bad if refused else good))
            hostile += [c.name] if refused else []
            fields.append(f'"{c.name}":{fragment}')
        fields = draw(st.permutations(fields))
        note = f"refused {','.join(hostile)}" if hostile else "row"
        aborted = kind == "aborted"  # produced in a transaction that is aborted: never read (read_committed)
        note = f"aborted {note}" if aborted else note
        return Record(partition, kafka_key, ("{" + ",".join(fields) + "}").encode(), note, aborted=aborted)

    kinds = ["row"] * 6 + ["tombstone", "malformed", "duplicate", "aborted"]
    records = draw(keyed_records(len(logical), partitions, ordering is not None, max_records, kinds,
                                 lambda which: _spelled_kafka_key(key, logical[which]), row))  # fmt: skip
    for p in range(partitions):  # an aborted record is never its partition's last: its marker would end the log
        last = next((r for r in reversed(records) if r.partition == p), None)
        if last is not None and last.aborted:
            records.append(Record(p, last.key, last.value, "re-sent after its abort"))

    return Scenario(pipeline, tuple(records), draw(steps(records, partitions, max_steps)))


@st.composite
def keyed_records(
    draw: st.DrawFn,
    n_keys: int,
    partitions: int,
    by_column: bool,
    max_records: int,
    kinds: Sequence[str],
    kafka_key: Callable[[int], bytes],
    row: Callable[[st.DrawFn, int, int, bytes, str], Record],
) -> list[Record]:
    """The records of ``n_keys`` logical keys, a kind from ``kinds`` each: a duplicate re-sends an earlier
    record, a tombstone is the key's, any other kind is ``row(draw, key index, partition, Kafka key,
    kind)``. A key stays on its partition under offset ordering; under a column ordering (``by_column``)
    its records land on any. Shared by the formats whose records are not a source table's life."""
    home = [draw(st.integers(0, partitions - 1)) for _ in range(n_keys)]
    records: list[Record] = []
    for _ in range(draw(st.integers(1, max_records))):
        which = draw(st.integers(0, n_keys - 1))
        kind = draw(st.sampled_from(kinds))
        partition = draw(st.integers(0, partitions - 1)) if by_column else home[which]
        if kind == "duplicate" and records:
            again = records[draw(st.integers(0, len(records) - 1))]
            records.append(Record(partition if by_column else again.partition, again.key, again.value, "duplicate"))
        elif kind == "tombstone":
            records.append(Record(partition, kafka_key(which), None, "tombstone"))
        else:
            records.append(row(draw, which, partition, kafka_key(which), kind))
    return records


@st.composite
def steps(draw: st.DrawFn, records: list[Record], partitions: int, max_steps: int) -> tuple[Step, ...]:
    """A backfill cut at random offsets, up to ``max_steps`` incrementals, replays and backfills, a
    catch-up, maybe a whole replay; batch sizes from a third of the busiest partition up."""
    per_partition = max(sum(1 for r in records if r.partition == p) for p in range(partitions))
    smallest = max(1, math.ceil(per_partition / 3))  # at most three batches a run: Spark runs are the cost
    fraction = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])

    def step(kind: str) -> Step:
        cut = tuple(draw(st.lists(fraction, min_size=partitions, max_size=partitions)))
        start = (
            tuple(draw(st.lists(fraction, min_size=partitions, max_size=partitions))) if kind == "replay_slice" else ()
        )
        size = draw(st.none() | st.integers(smallest, max(smallest, per_partition)))
        return Step(kind, cut, start, size)

    kinds = st.sampled_from(["incremental", "replay_all", "replay_slice", "backfill"])
    middle = draw(st.lists(kinds, max_size=max_steps))
    chosen = [step("backfill"), *(step(k) for k in middle), step("catch_up")]
    if draw(st.booleans()):
        chosen.append(step("replay_all"))
    return tuple(chosen)
