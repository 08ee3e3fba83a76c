"""The adversary's Debezium format (issue 56): a model source table goes through a random history and
its change events are written as a real connector on PostgreSQL or on MySQL writes them (the JSON
converter without schemas; PostgreSQL under REPLICA IDENTITY DEFAULT, MySQL with full row images); the
model table itself is the oracle.

The history: snapshot reads (``op: r``, all at the snapshot's LSN, maybe with a transaction open
across the snapshot whose update then comes later in Kafka at a lower LSN), inserts, updates that
leave the large (TOASTed) columns they do not change out with ``__debezium_unavailable_value``,
deletes (``before`` holds the key alone) and their tombstones, primary-key changes (the old key's
``d`` with header ``__debezium.newkey`` and its tombstone, then the new key's ``c`` with header
``__debezium.oldkey`` and every large value left out), and re-sends after a crash (the tail of the
log emitted again). A key's events go to its partition (the keys spread over the partitions); a
prefix of the log may be lost (retention), so a range can lack a row's full value. Review V #2's
shape is drawn on purpose (random lives did not find it): a backlog on a key's partition, a change
of its large values, then its move to another partition; the first backfill reads every partition
up to one point in time and the next run's batches are cut from what is left.

The MySQL connector's events carry the binlog position (``source.file``, ``source.pos``, ``source.row``)
instead of an LSN, its deletes the whole row in ``before``; its histories rotate the binlog
(``FLUSH LOGS``, ``max_binlog_size``): ``pos`` starts small again in the next file (review IV #4's shape),
and a pipeline may map ``$source.pos`` to a column.

What the target must hold (docs/formats/debezium.md, written out here, not the product's code): per
key, its read events applied in Kafka order; a left-out value is the key's newest full value, the
old key's value at a key change (known once the change's delete is read), else unknown: NULL,
listed in ``reprocess.incomplete_values``. An ``expr`` reading only left-out values is resolved
with them. Nothing here imports the product.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import strategies as st

from tests.adversary.model import Pipeline, Record, Scenario
from tests.adversary.oracle import Key, Oracle
from tests.adversary.strategies import KEY_VALUES, columns, steps
from tests.adversary.values import Column, Invalid, from_json, parse_object

PLACEHOLDER = "__debezium_unavailable_value"
UNKNOWN = object()  # a left-out value no read event gives: written NULL, recorded incomplete
SNAPSHOT_LSN = 50_000_000
BINLOG_START = 157  # a MySQL 8 binlog file's first event position (after its header and format event)
CONNECTORS = ("postgresql", "postgresql", "mysql")
POSITION = {"postgresql": ("lsn", "$source.lsn"), "mysql": ("pos", "$source.pos")}  # a column the spec may map
VALUE_TYPES = ("text", "integer", "bigint", "boolean", "numeric")
# Key types whose JSON-converter form is the json format's (a numeric's text, a ZonedTimestamp's ISO 8601)
KEY_TYPES = ("text", "bigint", "integer", "smallint", "numeric", "uuid", "timestamptz")
KEYS: dict[str, list[Any]] = {
    **KEY_VALUES,
    "smallint": [0, 1, -1, 32767, -32768],
    "numeric": ["1.5", "0", "10", "-2.25", "12345678901234567890.123456789"],
    "uuid": [
        "a0000000-0000-0000-0000-000000000001",
        "b0000000-0000-0000-0000-000000000000",
        "0000000f-0000-0000-0000-000000000000",
    ],
    "timestamptz": ["2026-11-01T00:00:00Z", "0001-01-01T00:00:00Z", "2026-10-31T22:00:00.123456Z"],
}
# JSON values as the connector writes them (decimal.handling.mode=string: a numeric is its text)
VALUES: dict[str, list[Any]] = {
    "text": ["a", "B", "é", "x y", "", "😀", "12.50", "sales-eu"],
    "integer": [0, 7, -7, 2147483647, -2147483648],
    "bigint": [0, 1, -1, 9223372036854775807, -9223372036854775808],
    "boolean": [True, False],
    "numeric": ["10", "9", "99.5", "-1", "0.000000000123456789", "12345678901234567890.123456789012345678"],
}
OPS = (
    "insert",
    "update",
    "update",
    "update",
    "delete",
    "rekey",
    "rekey",
    "resend",
    "busy",
    "busy",
    "rotate",
    "malformed",
)
# Values no connector writes, each a dead letter: not JSON, not an object, no op, an op Debezium has not, a row
# event whose after lacks a key column.
MALFORMED = ("not JSON", "not an object", "no op", "unknown op", "after without its key")
LARGE_VALUES = ["N1 " * 40, "N2 " * 40, "long é " * 30, "x" * 300, "short"]


def _key_bytes(p: Pipeline, key: Key) -> bytes:
    return json.dumps({c.name: v for c, v in zip(p.key, key, strict=True)}, separators=(",", ":")).encode()


@dataclass
class History:
    """The model source table and the change events of its statements, in commit order."""

    pipeline: Pipeline
    home: dict[Key, int]
    rows: dict[Key, dict[str, Any]] = field(default_factory=dict)
    events: list[Record] = field(default_factory=list)
    lsn: int = SNAPSHOT_LSN
    tx: int = 700
    keys_changed_at: int = 0  # events before this index hold a key change: a re-send starts after it
    connector: str = "postgresql"  # or "mysql": the source block holds a binlog position
    binlog: int = 1  # mysql: the current binlog file's number
    rotated_at: int = SNAPSHOT_LSN - 9_000_000  # mysql: the LSN (the model's clock) the file starts at

    def rotate(self) -> None:
        """MySQL's ``FLUSH LOGS``: the next event is near the start of a new binlog file."""
        self.binlog += 1
        self.rotated_at = self.lsn

    def _source(self, ts: int, lsn: int, snapshot: str) -> dict[str, Any]:
        if self.connector == "mysql":  # a position in the binlog file: small again after a rotation
            return {"version": "3.3.1.Final", "connector": "mysql", "name": "adv", "ts_ms": ts, "snapshot": snapshot,
                    "db": "src", "sequence": None, "table": "t", "server_id": 223344, "gtid": None,
                    "file": f"binlog.{self.binlog:06d}", "pos": BINLOG_START + lsn - self.rotated_at, "row": 0,
                    "thread": None if snapshot != "false" else 7, "query": None}  # fmt: skip
        return {"version": "3.3.1.Final", "connector": "postgresql", "name": "adv", "ts_ms": ts,
                "snapshot": snapshot, "db": "src", "sequence": json.dumps([None, str(lsn)]), "schema": "public",
                "table": "t", "txId": self.tx, "lsn": lsn, "xmin": None}  # fmt: skip

    def _value(self, key: Key, op: str, after: dict[str, Any] | None, lsn: int, snapshot: str = "false") -> bytes:
        p = self.pipeline
        before = None
        if op == "d" and self.connector == "mysql":  # binlog_row_image=FULL: the whole row
            before = self._after(key, False)
        elif op == "d":  # REPLICA IDENTITY DEFAULT: the key alone
            before = {c.name: None for c in p.columns if c.name in self._source_columns()}
            before.update({c.name: v for c, v in zip(p.key, key, strict=True)})
        ts = 1_790_000_000_000 + lsn // 100
        source = self._source(ts, lsn, snapshot)
        envelope = {"before": before, "after": after, "source": source, "op": op, "ts_ms": ts + 5, "transaction": None}
        return json.dumps(envelope, ensure_ascii=False, separators=(",", ":")).encode()

    def _source_columns(self) -> list[str]:
        derived = {c for c, _ in self.pipeline.paths} | {c for c, _ in self.pipeline.exprs}
        return [c.name for c in self.pipeline.columns if c.name not in derived]

    def _after(self, key: Key, left_out: bool) -> dict[str, Any]:
        row = self.rows[key]
        after = {c.name: v for c, v in zip(self.pipeline.key, key, strict=True)}
        for name in self._source_columns():
            if name in after:
                continue
            v = row[name]
            after[name] = PLACEHOLDER if left_out and name in self.pipeline.large and v is not None else v
        return after

    def emit(
        self,
        key: Key,
        op: str,
        lsn: int | None = None,
        snapshot: str = "false",
        left_out: frozenset[str] = frozenset(),
        headers: tuple[tuple[str, str], ...] = (),
        note: str = "",
    ) -> None:
        """One event of ``key``; ``left_out``: the large columns it sends as the placeholder."""
        if lsn is None:
            self.lsn += 100
            lsn = self.lsn
        after = None
        if op != "d":
            after = self._after(key, False)
            if self.connector == "postgresql":  # MySQL's full row images leave nothing out
                after.update({c: PLACEHOLDER for c in left_out if after.get(c) is not None})
        value = self._value(key, op, after, lsn, snapshot)
        self.events.append(Record(self.home[key], _key_bytes(self.pipeline, key), value, note or op, headers))

    def malformed(self, key: Key, how: str) -> None:
        """A record on ``key``'s partition that is no change event (a producer's or a proxy's fault)."""
        envelope = json.loads(self._value(key, "u" if key in self.rows else "c", None, self.lsn))
        envelope["after"] = self._after(key, False) if key in self.rows else {"x": 1}
        if how == "no op":
            del envelope["op"]
        elif how == "unknown op":
            envelope["op"] = "x"
        elif how == "after without its key":
            envelope["after"] = {c: v for c, v in envelope["after"].items() if c != self.pipeline.key[0].name}
        value = {"not JSON": b"not json {", "not an object": b"[1]"}.get(how, json.dumps(envelope).encode())
        self.events.append(Record(self.home[key], _key_bytes(self.pipeline, key), value, f"malformed: {how}"))

    def tombstone(self, key: Key) -> None:
        self.events.append(Record(self.home[key], _key_bytes(self.pipeline, key), None, "tombstone"))


@st.composite
def _row(draw: st.DrawFn, p: Pipeline) -> dict[str, Any]:
    row: dict[str, Any] = {}
    derived = {c for c, _ in p.paths} | {c for c, _ in p.exprs}
    for c in p.columns[len(p.key) :]:
        if c.name in derived:
            continue
        pool = LARGE_VALUES if c.name in p.large else VALUES[c.type]
        row[c.name] = None if not c.required and draw(st.integers(0, 5)) == 0 else draw(st.sampled_from(pool))
    return row


@st.composite
def debezium_scenarios(
    draw: st.DrawFn, max_events: int = 30, max_steps: int = 4, connectors: tuple[str, ...] = CONNECTORS
) -> Scenario:
    """A source table's random life as change events, and the steps run over them; ``connectors``: the
    connectors drawn from (``make fuzz``'s FUZZ_CONNECTORS)."""
    key = tuple(draw(columns(f"k{i}", KEY_TYPES, True)) for i in range(draw(st.integers(1, 2))))
    values = [draw(columns(f"c{i}", VALUE_TYPES, draw(st.booleans()))) for i in range(draw(st.integers(1, 3)))]
    large = [Column(f"l{i}", "text", False) for i in range(draw(st.integers(1, 2)))]
    connector = draw(st.sampled_from(connectors))
    paths, exprs, derived = [], [], []
    if draw(st.booleans()):  # the source position as a column: $source.lsn, or MySQL's $source.pos
        paths.append(POSITION[connector])
        derived.append(Column(POSITION[connector][0], "bigint", False))
    if draw(st.booleans()):
        exprs.append(("l0_len", "length(l0)"))  # reads a left-out value only: resolved with it
        derived.append(Column("l0_len", "integer", False))
    partitions = draw(st.sampled_from([2, 3, 4, 2, 3, 4, 1]))  # mostly several: key changes cross them
    p = Pipeline(key, (*key, *values, *large, *derived), None, "delete", partitions, "debezium",
                 tuple(c.name for c in large), tuple(paths), tuple(exprs))  # fmt: skip
    pools = [KEYS[c.type] for c in key]
    keys = draw(st.lists(st.tuples(*(st.sampled_from(x) for x in pools)), min_size=2, max_size=6, unique=True))
    spread = draw(st.permutations(range(len(keys))))  # keys spread over the partitions: key changes cross them
    h = History(p, {k: spread[i] % partitions for i, k in enumerate(keys)}, connector=connector)

    snapshot = draw(st.lists(st.sampled_from(keys), unique=True, max_size=len(keys)))
    for k in snapshot:
        h.rows[k] = draw(_row(p))
    for i, k in enumerate(snapshot):
        h.emit(k, "r", SNAPSHOT_LSN, "last" if i == len(snapshot) - 1 else "true")
    h.lsn = SNAPSHOT_LSN + 1_000
    if snapshot and connector == "postgresql" and draw(st.booleans()):  # open across the snapshot: after it
        k = draw(st.sampled_from(snapshot))
        h.rows[k].update(draw(_row(p)))
        h.tx += 1
        h.emit(k, "u", SNAPSHOT_LSN - 500, note="u of a transaction open across the snapshot, at a lower LSN")
    for _ in range(draw(st.integers(1, max_events))):
        op = draw(st.sampled_from(OPS))
        k = draw(st.sampled_from(keys))
        h.tx += 1
        if op == "busy" and k in h.rows:  # review V #2's shape: a backlog on k's partition, then k moves away
            busy = [x for x in h.rows if h.home[x] == h.home[k]]
            for _ in range(draw(st.integers(2, 6))):
                x = draw(st.sampled_from(busy))
                h.rows[x].update({c: v for c, v in draw(_row(p)).items() if c not in p.large})
                h.emit(x, "u", left_out=frozenset(p.large), note="u of a backlog")
                h.tx += 1
            op = "rekey"
        if op == "rotate":
            if connector == "mysql":
                h.rotate()
        elif op == "malformed":
            h.malformed(k, draw(st.sampled_from(MALFORMED)))
        elif op == "resend":
            tail = draw(st.integers(1, 4))
            start = max(len(h.events) - tail, h.keys_changed_at)
            h.events += [Record(r.partition, r.key, r.value, f"re-sent {r.note}", r.headers) for r in h.events[start:]]
        elif k not in h.rows:
            if op not in ("delete", "busy"):
                h.rows[k] = draw(_row(p))
                h.emit(k, "c")
        elif op == "update":
            changed = draw(_row(p))
            kept = frozenset(c for c in p.large if draw(st.booleans()))
            h.rows[k].update({c: v for c, v in changed.items() if c not in kept})
            h.emit(k, "u", left_out=kept)
        elif op == "delete":
            h.emit(k, "d")
            del h.rows[k]
            h.tombstone(k)
        else:  # a key change, mostly onto another partition, often right after a change of the large values
            free = [x for x in keys if x not in h.rows]
            elsewhere = [x for x in free if h.home[x] != h.home[k]]
            new = draw(st.sampled_from(elsewhere or free or [k]))
            if new == k:
                continue
            if draw(st.booleans()):
                h.rows[k].update({c: draw(st.sampled_from(LARGE_VALUES)) for c in p.large})
                h.emit(k, "u", note="u of the large values before a key change")
                h.tx += 1
            h.lsn += 100
            h.emit(
                k, "d", h.lsn, headers=(("__debezium.newkey", _key_bytes(p, new).decode()),), note="d of a key change"
            )
            h.tombstone(k)
            h.rows[new] = h.rows.pop(k)
            h.emit(new, "c", h.lsn, left_out=frozenset(p.large),
                   headers=(("__debezium.oldkey", _key_bytes(p, k).decode()),), note="c of a key change")  # fmt: skip
            h.keys_changed_at = len(h.events)
    if not h.events:
        h.rows[keys[0]] = draw(_row(p))
        h.emit(keys[0], "c")
    lost = draw(st.sampled_from([0] * 4 + [1, 2, 3]))  # the log's first events gone (retention)
    records = h.events[lost:] if lost < len(h.events) else h.events
    if lost and records is not h.events:
        records = [Record(r.partition, r.key, r.value, r.note + " (after the lost prefix)" * (i == 0), r.headers)
                   for i, r in enumerate(records)]  # fmt: skip
    chosen = draw(steps(records, partitions, max_steps))
    if partitions > 1:  # the first backfill at a point in time: every partition up to the g-th event
        g = draw(st.integers(0, len(records)))
        ends = [sum(1 for r in records if r.partition == q) for q in range(partitions)]
        upto = [sum(1 for r in records[:g] if r.partition == q) for q in range(partitions)]
        first = replace(chosen[0], cut=tuple(u / e if e else 0.0 for u, e in zip(upto, ends, strict=True)))
        rest = max(e - u for e, u in zip(ends, upto, strict=True))  # the next run's batches: of what is left
        size = draw(st.integers(max(1, math.ceil(rest / 3)), max(1, rest))) if chosen[1].batch_size else None
        chosen = (first, replace(chosen[1], batch_size=size), *chosen[2:])
    return Scenario(p, tuple(records), chosen)


def _key_of(p: Pipeline, obj: dict[str, Any]) -> Key:
    return tuple(from_json(c, obj[c.name]) for c in p.key)


@dataclass
class DebeziumOracle(Oracle):
    """The table after the read events: the model's rows as Debezium's events give them."""

    def state(self) -> dict[Key, dict[str, Any]]:
        p = self.pipeline
        rows: dict[Key, dict[str, Any]] = {}
        moved: dict[tuple[bytes, bytes], dict[str, Any]] = {}  # (old key, new key) → the large values moved
        paths, exprs = dict(p.paths), dict(p.exprs)
        for x in self.read():
            r = x.record
            if r.value is None:
                rows.pop(_key_of(p, parse_object(r.key or b"{}")), None)
                continue
            env = change_event(p, r.value)
            if env is None:
                continue  # a dead letter
            headers = dict(r.headers)
            if env["op"] == "d":
                key = _key_of(p, env["before"])
                if "__debezium.newkey" in headers and key in rows:
                    moved[(r.key or b"", headers["__debezium.newkey"].encode())] = {c: rows[key][c] for c in p.large}
                elif "__debezium.newkey" in headers:
                    moved[(r.key or b"", headers["__debezium.newkey"].encode())] = dict.fromkeys(p.large, UNKNOWN)
                rows.pop(key, None)
                continue
            after = env["after"]
            key = _key_of(p, after)
            before = rows.get(key)
            link = (headers.get("__debezium.oldkey", "").encode(), r.key or b"")
            row: dict[str, Any] = {}
            for c in p.columns:
                if c.name in paths:  # $source.<field>
                    row[c.name] = from_json(c, env["source"][paths[c.name].removeprefix("$source.")])
                elif c.name in exprs:
                    continue
                elif after.get(c.name) == PLACEHOLDER:
                    if "__debezium.oldkey" in headers:
                        row[c.name] = moved.get(link, {}).get(c.name, UNKNOWN)
                    else:
                        row[c.name] = before[c.name] if before is not None else UNKNOWN
                else:
                    row[c.name] = None if after.get(c.name) is None else from_json(c, after[c.name])
            for name in exprs:  # length(l0): characters
                l0 = row["l0"]
                row[name] = l0 if l0 is UNKNOWN or l0 is None else ("int", len(l0))
            rows[key] = row
        return rows

    def rows(self) -> dict[Key, dict[str, Any]]:
        return {k: {c: None if v is UNKNOWN else v for c, v in row.items()} for k, row in self.state().items()}

    def incomplete(self) -> set[tuple[Key, str]]:
        return {(k, c) for k, row in self.state().items() for c, v in row.items() if v is UNKNOWN}

    def dead_letters(self) -> set[tuple[int, int]]:
        p = self.pipeline
        return {
            (x.partition, x.offset) for x in self.read() if x.record.value and change_event(p, x.record.value) is None
        }


def change_event(p: Pipeline, value: bytes) -> dict[str, Any] | None:
    """The change event ``value`` holds, or None for a dead letter (docs/formats/debezium.md): not a JSON
    object, no ``op`` or one Debezium does not write, a row event whose ``after`` lacks a key column."""
    try:
        env = parse_object(value)
    except Invalid:
        return None
    op = env.get("op")
    if op not in ("c", "r", "u", "d"):
        return None
    after = env.get("after")
    if op != "d" and (not isinstance(after, dict) or any(after.get(c.name) is None for c in p.key)):
        return None
    return env


def interpret_key(p: Pipeline, stored: dict[str, Any]) -> Key:
    """An ``incomplete_values`` key (jsonb, as the driver reads it) → the oracle's key."""
    try:
        return tuple(from_json(c, str(stored[c.name]) if c.type != "text" else stored[c.name]) for c in p.key)
    except (Invalid, KeyError) as exc:
        raise AssertionError(f"an incomplete value's key {stored!r}: {exc}") from exc
