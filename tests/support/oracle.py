"""The independent oracle: what the target and the dead letters must hold, recomputed from the
produced messages (partition, offset, key, value) alone. It imports nothing of the product.

Validation follows the orders spec as documented: a required field must be present and not
null (an empty string is a value), a typed field must parse as its type, and a text field must
be text PostgreSQL can store (no NUL character).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

ORDER_REQUIRED = ("order_id", "customer_id", "status", "updated_at")
ORDER_TEXT = ("order_id", "customer_id", "status", "currency")  # the spec's text columns


class Messages(Protocol):
    messages: Sequence[tuple[int, int, bytes | None, bytes]]  # partition, offset, key, value


def is_valid_order(value: bytes) -> dict[str, Any] | None:
    """The event when the orders spec accepts it, else None (it must become a dead letter)."""
    try:
        ev = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(ev, dict):
        return None
    if any(ev.get(k) is None for k in ORDER_REQUIRED):
        return None
    if any("\x00" in str(ev[k]) for k in ORDER_TEXT if ev.get(k) is not None):
        return None
    try:
        if ev.get("amount") is not None:
            Decimal(str(ev["amount"]))
        if ev.get("items") is not None:
            int(str(ev["items"]))
        datetime.fromisoformat(str(ev["updated_at"]).replace("Z", "+00:00"))
    except (InvalidOperation, ValueError):
        return None
    return ev


def expected_rows(produced: Messages) -> dict[str, tuple[str, str, int, int]]:
    """key → (status, amount, partition, offset) of the newest valid event per key (offset order)."""
    out: dict[str, tuple[str, str, int, int]] = {}
    for partition, offset, _key, value in sorted(produced.messages):
        ev = is_valid_order(value)
        if ev is not None:
            out[ev["order_id"]] = (ev["status"], str(Decimal(ev["amount"])), partition, offset)
    return out


def invalid_count(produced: Messages) -> int:
    return sum(1 for *_, v in produced.messages if is_valid_order(v) is None)


def expected_by_version(produced: Messages, key_field: str) -> dict[str, tuple[int, int, int]]:
    """key → (version, partition, offset) of the highest version per key, ties by offset."""
    best: dict[str, tuple[int, int, int]] = {}
    for partition, offset, _key, value in sorted(produced.messages):
        try:
            ev = json.loads(value)
            version = int(ev["version"])
            key = ev[key_field]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            continue
        if key not in best or (version, offset) >= (best[key][0], best[key][2]):
            best[key] = (version, partition, offset)
    return best
