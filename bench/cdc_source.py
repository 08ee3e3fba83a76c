"""The source side of a Debezium life, independent of the product: change the source table, wait
for its change events, and compare a target table with the source table itself, per key and column.

The oracle of a CDC pipeline is the table Debezium reads: after a run, the target must hold the
same value in every mapped column of every key (and no other key). This module reads both
tables with psycopg2 and imports nothing of the product (only :mod:`devstack`'s address of the
source database), so a wrong decode, a NULL in place of a value Debezium left out, or a stale
row shows up as a difference: key, column, source value, target value.

:data:`LIFE_COLUMNS` is the table the CDC life tests and :mod:`bench.cdc_life` stream: a
composite key, a large ``text`` and a large ``jsonb`` value stored out of line (``STORAGE
EXTERNAL``, more than 2 kB: TOASTed, so an update leaving them unchanged streams Debezium's
placeholder), ``numeric(20,6)``, ``timestamptz``, ``boolean``, unicode text and NULLs.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as time_of_day
from decimal import Decimal
from typing import Any, Final

import psycopg2
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from psycopg2 import sql
from psycopg2.extras import Json

from devstack import debezium

Key = tuple[Any, ...]
Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Column:
    """A column of the source table and how the pipeline maps it.

    ``spec`` is the spec's column entry. ``json``: compare as parsed JSON (a ``jsonb`` column mapped
    to a text column: the text Debezium sends need not be byte-equal to ``jsonb::text``).
    """

    name: str
    source_type: str
    spec: Mapping[str, Any]
    large: bool = False  # stored out of line (STORAGE EXTERNAL): left out of updates that keep it
    json: bool = False


# The life table's columns (source type, spec type; ``json=True``: compared as parsed JSON): every
# column type of the spec (tests/integration/formats/test_debezium_types.py streams each through every
# converter); a column added here needs its values in :func:`life_row`.
LIFE_COLUMNS: Final = (
    Column("region", "text", {"type": "text", "required": True}),
    Column("id", "integer", {"type": "integer", "required": True}),
    Column("name", "text", {"type": "text"}),
    Column("amount", "numeric(20,6)", {"type": "numeric(20,6)"}),
    Column("seen_at", "timestamptz", {"type": "timestamptz"}),
    Column("flag", "boolean", {"type": "boolean"}),
    Column("ref", "uuid", {"type": "uuid"}),
    Column("day", "date", {"type": "date"}),
    Column("local_at", "timestamp", {"type": "timestamp"}),
    Column("at_time", "time", {"type": "time"}),
    Column("rank", "smallint", {"type": "smallint"}),
    Column("ratio", "real", {"type": "real"}),
    Column("labels", "text[]", {"type": "text[]"}),
    Column("counts", "bigint[]", {"type": "bigint[]"}),
    Column("body", "text", {"type": "text"}, large=True),
    Column("doc", "jsonb", {"type": "jsonb"}, large=True, json=True),
    Column("blob", "bytea", {"type": "bytea"}, large=True),
)
LIFE_KEY: Final = ("region", "id")
# Values a life writes into its text columns: unicode of several scripts, an emoji, quotes.
UNICODE: Final = ("Zoë", "東京", "Łódź 🙂", "O'Brien", "naïve café", "Ελλάδα", "")


def create_table(table: str, columns: Sequence[Column] = LIFE_COLUMNS, key: Sequence[str] = LIFE_KEY,
                 identity: str = "DEFAULT") -> list[sql.Composable]:  # fmt: skip
    """The statements creating ``public.<table>``: large columns stored out of line, the replica identity."""
    name = sql.Identifier("public", table)
    defs = sql.SQL(", ").join(
        [sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.source_type)) for c in columns]
        + [sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, key)))]
    )
    out = [sql.SQL("CREATE TABLE {} ({})").format(name, defs)]
    out += [
        sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET STORAGE EXTERNAL").format(name, sql.Identifier(c.name))
        for c in columns
        if c.large
    ]
    replica = {"DEFAULT": sql.SQL("DEFAULT"), "FULL": sql.SQL("FULL")}[identity]
    out.append(sql.SQL("ALTER TABLE {} REPLICA IDENTITY {}").format(name, replica))
    return out


def life_row(region: str, id_: int, version: int = 0, *, nulls: bool = False) -> Row:
    """A row of the life table, the same for the same (key, version): unicode text, an exact
    ``numeric(20,6)`` (negative ones too), microseconds, a value of every other column type, and a
    6 kB text, a 3 kB+ JSON document and 4 kB of bytes (all stored out of line); ``nulls``: every
    non-key value NULL."""
    seed = f"{region}/{id_}/{version}"
    n = int(hashlib.md5(seed.encode()).hexdigest()[:12], 16)
    if nulls:
        return {"region": region, "id": id_, **dict.fromkeys(c.name for c in LIFE_COLUMNS[2:])}
    pad = (hashlib.sha256(seed.encode()).hexdigest() * 100)[:3000]
    return {
        "region": region,
        "id": id_,
        "name": f"{UNICODE[n % len(UNICODE)]} {id_}.{version}",
        "amount": (Decimal(n % 10**20) / 10**6 - Decimal(10**13)).quantize(Decimal("0.000001")),
        "seen_at": datetime(2026, 1, 1, tzinfo=UTC) + timedelta(microseconds=n % 10**14),
        "flag": bool(n % 2),
        "ref": str(uuid.UUID(hashlib.md5(seed.encode()).hexdigest())),
        "day": date(1970, 1, 1) + timedelta(days=n % 40_000),
        "local_at": datetime(2026, 1, 1) + timedelta(microseconds=n % 10**13),
        "at_time": time_of_day(n % 24, n % 60, n % 60, n % 10**6),
        "rank": n % 65_536 - 32_768,
        "ratio": n % 1000 / 8,
        "labels": ["a", UNICODE[n % len(UNICODE)], None][: 1 + n % 3],
        "counts": [n % 10**15, -(n % 1000)],
        "body": f"{seed} é {pad}{pad}",
        "doc": {"seed": seed, "tags": ["a", "ü", str(n % 97)], "n": n % 1000 / 8, "nested": {"pad": pad}},
        "blob": bytes.fromhex(hashlib.sha256(seed.encode()).hexdigest()) * 128,
    }


def _param(c: Column, value: Any) -> Any:
    return Json(value) if c.json and value is not None else value


def insert(table: str, *rows: Row, columns: Sequence[Column] = LIFE_COLUMNS) -> tuple[sql.Composable, list[Any]]:
    """An INSERT of ``rows`` (every column), for :func:`source`."""
    one = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(columns)))
    statement = sql.SQL("INSERT INTO {} ({}) VALUES {}").format(
        sql.Identifier("public", table), _select(columns), sql.SQL(", ").join([one] * len(rows))
    )
    return statement, [_param(c, r[c.name]) for r in rows for c in columns]


def _where(key: Key, names: Sequence[str]) -> tuple[sql.Composable, list[Any]]:
    cond = sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(k)) for k in names)
    return cond, list(key)


def update(table: str, key: Key, values: Mapping[str, Any], columns: Sequence[Column] = LIFE_COLUMNS,
           key_names: Sequence[str] = LIFE_KEY) -> tuple[sql.Composable, list[Any]]:  # fmt: skip
    """An UPDATE of ``values`` (a new key's columns too: a primary-key change) of the row ``key``."""
    by_name = {c.name: c for c in columns}
    sets = sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(name)) for name in values)
    cond, params = _where(key, key_names)
    statement = sql.SQL("UPDATE {} SET {} WHERE {}").format(sql.Identifier("public", table), sets, cond)
    return statement, [_param(by_name[n], v) for n, v in values.items()] + params


def rekey(table: str, old: Key, new: Key, key_names: Sequence[str] = LIFE_KEY) -> tuple[sql.Composable, list[Any]]:
    """A primary-key change of ``old`` to ``new``, every other column unchanged (the large ones left out)."""
    return update(table, old, dict(zip(key_names, new, strict=True)), key_names=key_names)


def delete(table: str, key: Key, key_names: Sequence[str] = LIFE_KEY) -> tuple[sql.Composable, list[Any]]:
    cond, params = _where(key, key_names)
    return sql.SQL("DELETE FROM {} WHERE {}").format(sql.Identifier("public", table), cond), params


def source(*statements: str | sql.Composable | tuple[str | sql.Composable, Sequence[Any]]) -> None:
    """Run ``statements`` (SQL, or SQL with its parameters) in ONE transaction of the source database."""
    conn = psycopg2.connect(debezium.source_dsn())
    try:
        with conn, conn.cursor() as cur:
            for s in statements:
                if isinstance(s, tuple):
                    cur.execute(s[0], s[1])
                else:
                    cur.execute(s)
    finally:
        conn.close()


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    """The topic's partitions (a life's topic may have several: keys spread over them); none while
    the connector has not created it yet."""
    found = consumer.list_topics(topic, timeout=10).topics.get(topic)
    return sorted(found.partitions) if found is not None and found.error is None else []


def wait_for(kafka_config: Mapping[str, Any], topic: str, marker: bytes, seconds: float = 120) -> int:
    """The offset after the first event whose value holds ``marker`` (e.g. a row's name), once it
    arrived, in its partition (every partition is searched).

    Read from the log start, not offset 0: after delete-records offset 0 is out of range, and the
    reset to the latest offset would skip a marker that arrived meanwhile."""
    consumer = Consumer({**kafka_config, "group.id": f"{topic}-wait", "enable.auto.commit": False})
    deadline = time.monotonic() + seconds
    try:
        while not (partitions := _partitions(consumer, topic)) and time.monotonic() < deadline:
            time.sleep(0.5)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error() and marker in (msg.value() or b""):
                return int(msg.offset() or 0) + 1
    finally:
        consumer.close()
    raise AssertionError(f"no change event holding {marker!r} reached {topic} in {seconds:.0f}s")


def ends(kafka_config: Mapping[str, Any], topic: str) -> dict[int, int]:
    """Per partition, the offset after its last record now (its high watermark)."""
    consumer = Consumer({**kafka_config, "group.id": f"{topic}-ends", "enable.auto.commit": False})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in _partitions(consumer, topic)
        }
    finally:
        consumer.close()


def events(kafka_config: Mapping[str, Any], topic: str) -> list[tuple[int, dict[str, Any] | None]]:
    """Every record of ``topic`` up to its end now: (offset, the JSON envelope or None), partition by
    partition, each in offset order (a key's events stay on one partition). Offsets below the log
    start (delete-records) or compacted away are skipped."""
    consumer = Consumer({**kafka_config, "group.id": f"{topic}-events", "enable.auto.commit": False})
    try:
        out: list[tuple[int, dict[str, Any] | None]] = []
        for p in _partitions(consumer, topic):
            start, end = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
            got: list[tuple[int, dict[str, Any] | None]] = []
            deadline = time.monotonic() + 60
            while (not got or got[-1][0] < end - 1) and end > start:
                msg = consumer.poll(1)
                assert time.monotonic() < deadline, f"{topic}[{p}]: records up to {end} did not arrive in 60 s"
                if msg is None or msg.error() or msg.partition() != p:
                    continue
                got.append((int(msg.offset() or 0), json.loads(msg.value()) if msg.value() else None))
            out += got
        return out
    finally:
        consumer.close()


def resent(kafka_config: Mapping[str, Any], topic: str) -> int:
    """Change events the connector sent twice (the same operation of the same row at the same LSN), as
    it does after a crash for the events whose offsets it had not flushed (Debezium is at least once)."""
    seen = [(e["op"], json.dumps(e["before"] or e["after"], sort_keys=True)[:200], e["source"]["lsn"])
            for _, e in events(kafka_config, topic) if e and e["op"] != "r"]  # fmt: skip
    return len(seen) - len(set(seen))


def until(what: str, check: Callable[[], Any], seconds: float = 120) -> Any:
    """``check()``'s first truthy answer, polled every 0.5 s."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"{what}: not seen in {seconds:.0f}s")


def _select(columns: Sequence[Column]) -> sql.Composable:
    return sql.SQL(", ").join(sql.Identifier(c.name) for c in columns)


def _normalised(columns: Sequence[Column], raw: Sequence[Any]) -> Row:
    row: Row = {}
    for c, v in zip(columns, raw, strict=True):
        if c.json and isinstance(v, str):
            try:
                v = json.loads(v)
            except ValueError:
                v = _NotJson(v)
        row[c.name] = bytes(v) if isinstance(v, memoryview) else str(v) if isinstance(v, uuid.UUID) else v
    return row


@dataclass(frozen=True, slots=True)
class _NotJson:
    """A JSON column's target text that does not parse (e.g. Debezium's placeholder written as the value)."""

    text: str


def source_rows(table: str, columns: Sequence[Column] = LIFE_COLUMNS, key: Sequence[str] = LIFE_KEY) -> dict[Key, Row]:
    """key → row of the source table ``public.<table>``, read with psycopg2 (jsonb as text, parsed)."""
    conn = psycopg2.connect(debezium.source_dsn())
    try:
        with conn.cursor() as cur:
            cols = sql.SQL(", ").join(
                sql.SQL("{}::text").format(sql.Identifier(c.name)) if c.json else sql.Identifier(c.name)
                for c in columns
            )
            cur.execute(sql.SQL("SELECT {} FROM {}").format(cols, sql.Identifier("public", table)))
            return _keyed(columns, key, cur.fetchall())
    finally:
        conn.close()


def target_rows(conn: Any, schema: str, table: str, columns: Sequence[Column] = LIFE_COLUMNS,
                key: Sequence[str] = LIFE_KEY) -> dict[Key, Row]:  # fmt: skip
    """key → row of a target table, through ``conn`` (a DB-API connection of psycopg2)."""
    with conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT {} FROM {}").format(_select(columns), sql.Identifier(schema, table)))
        return _keyed(columns, key, cur.fetchall())


def _keyed(columns: Sequence[Column], key: Sequence[str], rows: Iterable[Sequence[Any]]) -> dict[Key, Row]:
    out: dict[Key, Row] = {}
    for raw in rows:
        row = _normalised(columns, raw)
        out[tuple(row[k] for k in key)] = row
    return out


@dataclass(frozen=True, slots=True)
class Difference:
    """One wrong value: ``column`` is ``"<row>"`` for a key the target lacks (or holds and the source does not)."""

    key: Key
    column: str
    source: Any
    target: Any

    @property
    def kind(self) -> str:
        """What is wrong: missing row, extra row, NULL in place of a value, a value in place of NULL, other value."""
        if self.column == "<row>":
            return "missing row" if self.target is _ABSENT else "extra row"
        if self.target is None:
            return "NULL instead of the value"
        if self.source is None:
            return "a value instead of NULL"
        return "another value"

    def __str__(self) -> str:
        return f"key {self.key}: {self.column}: source {show(self.source)} vs target {show(self.target)}"


class _Absent:
    def __repr__(self) -> str:
        return "(no row)"


_ABSENT: Final = _Absent()


def differences(expected: Mapping[Key, Row], got: Mapping[Key, Row]) -> list[Difference]:
    """Every (key, column) whose target value is not the source's; a missing or extra key once, as ``<row>``."""
    out: list[Difference] = []
    for k in sorted(set(expected) | set(got), key=repr):
        if k not in got:
            out.append(Difference(k, "<row>", "(row)", _ABSENT))
        elif k not in expected:
            out.append(Difference(k, "<row>", _ABSENT, "(row)"))
        else:
            out += [Difference(k, c, v, got[k][c]) for c, v in expected[k].items() if not _same(v, got[k][c])]
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return a == b  # 1.500000 (numeric(20,6)) is 1.5 (numeric)
    return type(a) is type(b) and a == b if a is not None and b is not None else a is b


def show(v: Any) -> str:
    """A value for a report: short values whole, long ones by their start, length and md5."""
    if v is None:
        return "NULL"
    if isinstance(v, _NotJson):
        return f"not JSON: {show(v.text)}"
    if isinstance(v, dict | list):
        v = json.dumps(v, sort_keys=True, ensure_ascii=False)
    if isinstance(v, str) and len(v) > 40:
        return f"{v[:20]!r}… ({len(v)} chars, md5 {hashlib.md5(v.encode()).hexdigest()[:8]})"
    return repr(v) if isinstance(v, str) else str(v)


def report(diffs: Sequence[Difference], rows: int, limit: int = 40) -> str:
    """``N of M rows wrong`` with the differences per kind and column, then the first ``limit`` of them."""
    keys = {d.key for d in diffs}
    kinds: dict[tuple[str, str], int] = {}
    for d in diffs:
        kinds[d.kind, d.column] = kinds.get((d.kind, d.column), 0) + 1
    lines = [f"{len(keys)} of {rows} rows wrong ({len(diffs)} wrong values)"]
    lines += [f"  {n:5} x {kind}: {column}" for (kind, column), n in sorted(kinds.items())]
    lines += [f"  {d}" for d in diffs[:limit]]
    if len(diffs) > limit:
        lines.append(f"  … and {len(diffs) - limit} more")
    return "\n".join(lines)
