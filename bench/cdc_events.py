"""Debezium change events of a model source table, as the PostgreSQL connector writes them with the
JSON converter and ``schemas.enable=true`` (what Debezium's JDBC sink needs, and the product reads):
the bench's order events (:func:`bench.data.event`) as the changes of a table ``orders`` with one
large column, ``body``.

The model: key ``n``'s first record is its insert (``op: c``), each later one an update (``op: u``),
and the tombstone of one key in 20 its delete (``op: d``, ``before`` holding the key alone:
REPLICA IDENTITY DEFAULT). ``body`` is stored out of line in the model table, so an update that
leaves it unchanged does not carry it: every third update of a key (its 3rd, 6th and 9th record)
leaves it unchanged (updates ``u`` with ``(n + u) % 3 == 0``: 3 of each key's 9, so a key's last
change leaves it out for a third of the keys), and the event holds Debezium's placeholder in its
place; the other updates change it. The late older version (:mod:`bench.data`) is an update like
any other here, in commit order. ``source.lsn`` is the record's number. Deterministic, like
:mod:`bench.data`: the oracle rebuilds the model table's final state (:func:`model_states`) from
the record numbers alone.

Imports nothing of the product.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from bench.data import Dataset, event
from bench.oracle import State

PLACEHOLDER: Final = "__debezium_unavailable_value"  # the connector's unavailable.value.placeholder
LEFT_OUT_EVERY: Final = 3  # key n's updates u with (n + u) % 3 == 0 leave body unchanged: a third of them
BODY_CHARS: Final = 512
ROW: Final = ("order_id", "customer_id", "status", "amount", "currency", "items", "updated_at", "body")
_TYPES: Final = {"items": "int32"}
_ROW_SCHEMA: Final = [{"field": c, "type": _TYPES.get(c, "string"), "optional": c != "order_id"} for c in ROW]
_ENVELOPE: Final = json.dumps(
    {
        "type": "struct",
        "name": "bench.public.orders.Envelope",
        "optional": False,
        "fields": [
            {"field": "before", "type": "struct", "name": "bench.public.orders.Value", "optional": True,
             "fields": _ROW_SCHEMA},
            {"field": "after", "type": "struct", "name": "bench.public.orders.Value", "optional": True,
             "fields": _ROW_SCHEMA},
            {"field": "source", "type": "struct", "name": "io.debezium.connector.postgresql.Source",
             "optional": False, "fields": [{"field": "connector", "type": "string", "optional": False},
                                           {"field": "lsn", "type": "int64", "optional": True}]},
            {"field": "op", "type": "string", "optional": False},
            {"field": "ts_ms", "type": "int64", "optional": True},
        ],
    },
    separators=(",", ":"),
)  # fmt: skip


def body_text(n: int, u: int) -> str:
    """The large value key ``n`` holds after its update ``u`` changed it (:data:`BODY_CHARS` long)."""
    seed = hashlib.sha256(f"{n}/{u}".encode()).hexdigest()
    return (f"body {n}.{u} " + seed * (BODY_CHARS // len(seed) + 1))[:BODY_CHARS]


def _left_out(n: int, u: int) -> bool:
    """Never two updates in a row: the value before a left-out one is the one its update sent."""
    return u > 0 and (n + u) % LEFT_OUT_EVERY == 0


def change(i: int, orders: int) -> tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]:
    """Record ``i`` as (op, key, before, after); ``after["body"]`` is the placeholder where the
    update left it unchanged."""
    _part, key, ev = event(i, orders)
    n, u = i % orders, i // orders
    if ev is None:
        return "d", key, {c: (key if c == "order_id" else None) for c in ROW}, None
    row = {c: ev[c] for c in ROW[:-1]}
    row["body"] = PLACEHOLDER if _left_out(n, u) else body_text(n, u)
    return ("c" if u == 0 else "u"), key, None, row


def envelope(i: int, _key: str, body: dict[str, Any] | None, *, orders: int) -> bytes:
    """Record ``i``'s change event in the JSON converter's envelope with its schema (an
    :data:`bench.data.Encoder` once ``orders`` is bound); ``body`` (the plain event) is not used:
    :func:`change` rebuilds it with the large column."""
    op, _k, before, after = change(i, orders)
    payload = {"before": before, "after": after, "source": {"connector": "postgresql", "lsn": 1_000 + i},
               "op": op, "ts_ms": 0}  # fmt: skip
    return f'{{"schema":{_ENVELOPE},"payload":{json.dumps(payload, separators=(",", ":"))}}}'.encode()


def model_states(ds: Dataset) -> dict[str, State]:
    """The model source table after all of ``ds``: key → (updated_at, status, amount, body), None
    for a deleted key. ``body`` is the value of the key's last update that changed it."""
    out: dict[str, State] = {}
    for i in range(ds.records):
        _op, key, _before, after = change(i, ds.orders)
        if after is None:
            out[key] = None
            continue
        n, u = i % ds.orders, i // ds.orders
        body = body_text(n, u - 1 if _left_out(n, u) else u)
        out[key] = (after["updated_at"], after["status"], after["amount"], body)
    return out
