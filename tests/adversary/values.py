"""Column types as the oracle knows them, written out independently of the product.

For each type: what a JSON field's value becomes (the README's "Column types" table and its JSON
rules), the form PostgreSQL prints it in (``::text``) read back into the same comparable value, and
the order PostgreSQL sorts it in (numeric by value, text byte-wise as under ``COLLATE "C"``, float8's
NaN above every number, a time by its microseconds). A value is a plain Python value tagged so that
``true`` never equals ``1``: :func:`from_json` and :func:`from_pg_text` must give equal values for a
stored row to match.

Nothing here imports the product.
"""

from __future__ import annotations

import json
import math
import re
import struct
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any

from tests.adversary.pg_text import array_of_pg_text, bigint_element, bytea_of_base64, bytea_of_pg_text, key_too_long

INT_BOUNDS = {"bigint": 63, "integer": 31, "smallint": 15}
# The types the adversary generates: every type docs/formats/index.md lists (no varchar(n)/char(n):
# the spec refuses them).
TYPES = (
    "text", "bigint", "integer", "smallint", "numeric", "numeric(p,s)", "double precision", "real",
    "boolean", "date", "time", "timestamp", "timestamptz", "uuid", "json", "jsonb", "bytea", "text[]", "bigint[]",
)  # fmt: skip
# The types an ordering column may have (the README: json, jsonb, arrays and numeric over 38 digits
# cannot be ordered alike by Spark and PostgreSQL and are refused).
UNORDERABLE = ("json", "jsonb", "text[]", "bigint[]")
ORDERABLE = tuple(t for t in TYPES if t not in UNORDERABLE)
ORDERABLE_DIGITS = 38
MICROS_PER_DAY = 86_400_000_000
_TIME = re.compile(r"^([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,6}))?)?$")
_DATE = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})$")
_TS = re.compile(
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[T ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]+))?)?)?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})?$"
)
_INT_TEXT = re.compile(r"^\s*[+-]?[0-9]+\s*$")
_NUMBER_TEXT = re.compile(r"^\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$")
# The README's spellings (true/false, t, yes, no, 1, 0) and y/n; PostgreSQL's on/off and prefixes
# ("tr") are refused by the product (a dead letter, never a wrong value): left out of the pools.
_BOOL_WORDS = {"t": True, "true": True, "yes": True, "y": True, "1": True,
               "f": False, "false": False, "no": False, "n": False, "0": False}  # fmt: skip


class Invalid(Exception):
    """The value cannot be stored in the column: the record is a dead letter."""


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # one of TYPES; "numeric(p,s)" carries its modifiers in ``numeric``
    required: bool = False
    numeric: tuple[int, int] | None = None

    @property
    def sql_type(self) -> str:
        return f"numeric({self.numeric[0]},{self.numeric[1]})" if self.numeric else self.type


class RawInt(str):
    """A JSON integer as written (its digits), so a text column keeps them exactly."""


class RawFloat(str):
    """A JSON number with a fraction or an exponent, as written."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise Invalid("a key appears twice in one object")
    return dict(pairs)


def _constant(name: str) -> Any:
    raise Invalid(f"{name} is no JSON")


def parse_object(value: bytes) -> dict[str, Any]:
    """RFC 8259, one object, no key twice in any object; numbers kept as written."""
    if value == b"":
        raise Invalid("empty value")
    try:
        text = value.decode("utf-8")
        if text.startswith("\ufeff"):
            raise Invalid("byte-order mark")
        parsed = json.loads(
            text, object_pairs_hook=_no_duplicates, parse_int=RawInt, parse_float=RawFloat, parse_constant=_constant
        )
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise Invalid(str(exc)) from None
    if not isinstance(parsed, dict):
        raise Invalid("not a JSON object")
    if _has_lone_surrogate(parsed):
        raise Invalid("a lone surrogate")
    return parsed


def _has_lone_surrogate(v: Any) -> bool:
    if isinstance(v, str) and not isinstance(v, RawInt | RawFloat):
        return any(0xD800 <= ord(ch) <= 0xDFFF for ch in v)
    if isinstance(v, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(x) for k, x in v.items())
    if isinstance(v, list):
        return any(_has_lone_surrogate(x) for x in v)
    return False


def _is_string(v: Any) -> bool:
    return isinstance(v, str) and not isinstance(v, RawInt | RawFloat)


def from_json(c: Column, v: Any) -> Any:
    """A JSON field's value (not null) → the comparable value the column stores; raises Invalid."""
    kind = c.type
    if kind == "text":
        if isinstance(v, RawFloat | dict | list):
            raise Invalid(f"{c.name}: a {type(v).__name__} in text")
        if isinstance(v, bool):
            return "true" if v else "false"
        if "\x00" in v:
            raise Invalid(f"{c.name}: NUL in text")
        return str(v)
    if kind in INT_BOUNDS:
        if isinstance(v, bool) or not isinstance(v, str) or isinstance(v, RawFloat) or not _INT_TEXT.match(v):
            raise Invalid(f"{c.name}: not an integer")
        n = int(v)
        bits = INT_BOUNDS[kind]
        if not -(2**bits) <= n < 2**bits:
            raise Invalid(f"{c.name}: {n} beyond {kind}")
        return ("int", n)
    if kind in ("numeric", "numeric(p,s)"):
        return ("num", _numeric(c, v))
    if kind in ("double precision", "real"):
        return ("float", _float(c, v))
    if kind in ("json", "jsonb"):
        if kind == "jsonb" and _contains_nul(v):
            raise Invalid(f"{c.name}: \\u0000 in jsonb")
        return ("json", tagged_json(v, container=isinstance(v, dict | list)))
    if kind in ("text[]", "bigint[]"):
        return ("array", _array(c, v))
    if kind == "boolean":
        if isinstance(v, bool):
            return ("bool", v)
        if isinstance(v, str) and v.strip().lower() in _BOOL_WORDS:
            return ("bool", _BOOL_WORDS[v.strip().lower()])
        raise Invalid(f"{c.name}: not boolean")
    if kind == "bytea" and isinstance(v, RawInt):
        v = str(v)  # an integer is its digits, as a text column takes it: base64 text like any other
    if not _is_string(v):
        raise Invalid(f"{c.name}: not a string")
    if kind == "date":
        found = _DATE.match(v)
        if not found:
            raise Invalid(f"{c.name}: not a date")
        return ("date", _date(*map(int, found.groups())))
    if kind == "time":
        return ("time", _time_micros(v))
    if kind in ("timestamp", "timestamptz"):
        return ("ts", _timestamp(v, zoned=kind == "timestamptz"))
    if kind == "uuid":
        try:
            return ("uuid", str(uuid.UUID(v)))
        except ValueError:
            raise Invalid(f"{c.name}: not a uuid") from None
    if kind == "bytea":
        try:
            return ("bytes", bytea_of_base64(v))
        except ValueError as exc:
            raise Invalid(f"{c.name}: {exc}") from None
    raise AssertionError(kind)


def _array(c: Column, v: Any) -> tuple[Any, ...]:
    """A JSON array, one dimension: ``text[]`` takes strings (an integer or true/false as a text
    column takes them), ``bigint[]`` integers (or strings holding one); null elements are NULL; a
    NUL in an element is refused (no PostgreSQL text holds it)."""
    if not isinstance(v, list):
        raise Invalid(f"{c.name}: not a JSON array")
    out: list[Any] = []
    for x in v:
        if x is None:
            out.append(None)
        elif c.type == "bigint[]":
            if isinstance(x, bool | dict | list | RawFloat):
                raise Invalid(f"{c.name}: an element that is no integer")
            try:
                out.append(bigint_element(x))
            except ValueError as exc:
                raise Invalid(f"{c.name}: {exc}") from None
        else:
            out.append(from_json(Column(c.name, "text"), x))
    return tuple(out)


def _numeric(c: Column, v: Any) -> Decimal:
    if isinstance(v, bool | dict | list):
        raise Invalid(f"{c.name}: not numeric")
    text = str(v)
    if not _NUMBER_TEXT.match(text):
        raise Invalid(f"{c.name}: not numeric")
    if isinstance(v, RawFloat) and re.search("[eE]", text):  # a variant reads it as a double: never exact
        raise Invalid(f"{c.name}: a JSON number with an exponent (docs/formats/index.md: send it as a string)")
    if isinstance(v, RawInt | RawFloat) and len(re.sub(r"[^0-9]", "", re.sub(r"[eE].*$", "", text)).lstrip("0")) > 38:
        raise Invalid(f"{c.name}: a JSON number of more than 38 digits")  # the README: send those as text
    try:
        n = Decimal(text.strip())
    except InvalidOperation:
        raise Invalid(f"{c.name}: not numeric") from None
    if c.numeric is None:
        return n
    precision, scale = c.numeric
    exact = Context(prec=len(text) + scale + 40)  # wide enough that rounding to the scale is exact
    rounded = n.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP, context=exact)  # half away from 0
    if rounded != 0 and rounded.adjusted() >= precision - scale:
        raise Invalid(f"{c.name}: {text} overflows numeric({precision},{scale})")
    return rounded


def _float(c: Column, v: Any) -> float:
    if isinstance(v, bool | dict | list):
        raise Invalid(f"{c.name}: not a float")
    text = str(v).strip()
    words = {"nan": math.nan, "infinity": math.inf, "-infinity": -math.inf, "inf": math.inf, "-inf": -math.inf}
    if _is_string(v) and text.lower() in words:
        x = words[text.lower()]
    else:
        if not _NUMBER_TEXT.match(text):
            raise Invalid(f"{c.name}: not a number")
        d = Decimal(text)
        x = float(d)
        if math.isinf(x) or (x == 0 and d != 0):
            raise Invalid(f"{c.name}: {text} beyond a double")
    if c.type == "real" and math.isfinite(x):
        try:
            x = struct.unpack("f", struct.pack("f", x))[0]
        except OverflowError:
            x = math.inf  # older Pythons refuse to pack it, newer ones round it to infinity
        if math.isinf(x) or (x == 0 and Decimal(text) != 0):
            raise Invalid(f"{c.name}: {text} beyond a real")
    return x


def _date(year: int, month: int, day: int) -> date:
    try:
        return date(year, month, day)  # years 1-9999, as the README says every part holds
    except ValueError:
        raise Invalid(f"{year}-{month}-{day} is no date") from None


def _time_micros(v: str) -> int:
    found = _TIME.match(v)
    if not found:
        raise Invalid(f"{v}: not a time")
    h, m, s, frac = found.groups()
    micros = ((int(h) * 60 + int(m)) * 60 + int(s or 0)) * 1_000_000 + int((frac or "").ljust(6, "0") or 0)
    if int(m) > 59 or int(s or 0) > 59 or micros > MICROS_PER_DAY:
        raise Invalid(f"{v}: not a time (up to 24:00:00)")
    return micros


def _timestamp(v: str, *, zoned: bool) -> datetime:
    found = _TS.match(v)
    if not found:
        raise Invalid(f"{v}: not a timestamp with a date")
    y, mo, d, h, mi, s, frac, zone = found.groups()
    if int(mi or 0) > 59 or int(s or 0) > 59 or int(h or 0) > 23:
        raise Invalid(f"{v}: not a time of day")
    day = _date(int(y), int(mo), int(d))
    micros = int((frac or "")[:6].ljust(6, "0"))  # digits past microseconds are dropped
    wall = datetime(day.year, day.month, day.day, int(h or 0), int(mi or 0), int(s or 0), micros)
    if not zoned or zone in (None, "Z"):
        return wall  # timestamp ignores a zone; timestamptz reads none as UTC
    sign = 1 if zone[0] == "+" else -1
    offset = timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    try:
        return wall - sign * offset
    except OverflowError:
        raise Invalid(f"{v}: beyond years 1-9999 in UTC") from None


def _contains_nul(v: Any) -> bool:
    if _is_string(v):
        return "\x00" in v
    if isinstance(v, dict):
        return any("\x00" in k or _contains_nul(x) for k, x in v.items())
    if isinstance(v, list):
        return any(_contains_nul(x) for x in v)
    return False


def tagged_json(v: Any, *, container: bool = False) -> Any:
    """A JSON value as a comparable tree: numbers by value, true apart from 1, objects by key.
    ``container``: the value is inside an object or an array, which the json format reads through
    Spark's VARIANT, where a number with an exponent passes through a double (docs/formats/index.md)."""
    if isinstance(v, bool):
        return ("b", v)
    if v is None:
        return ("null",)
    if container and isinstance(v, RawFloat) and re.search("[eE]", v):
        return ("n", Decimal(repr(float(v))))
    if isinstance(v, RawInt | RawFloat | int | float | Decimal):
        return ("n", Decimal(str(v)))
    if isinstance(v, str):
        return ("s", v)
    if isinstance(v, list):
        return ("a", tuple(tagged_json(x, container=container) for x in v))
    return ("o", tuple(sorted((k, tagged_json(x, container=container)) for k, x in v.items())))


def from_pg_text(c: Column, text: str | None) -> Any:
    """What ``column::text`` printed (a timestamptz as ``AT TIME ZONE 'UTC'``) → the comparable value."""
    if text is None:
        return None
    kind = c.type
    if kind == "text":
        return text
    if kind in INT_BOUNDS:
        return ("int", int(text))
    if kind in ("numeric", "numeric(p,s)"):
        return ("num", Decimal(text))
    if kind in ("double precision", "real"):
        x = float(text)
        return ("float", struct.unpack("f", struct.pack("f", x))[0] if kind == "real" and math.isfinite(x) else x)
    if kind == "boolean":
        return ("bool", text in ("t", "true"))  # boolean::text is 'true'/'false' (the bare column prints 't')
    if kind == "date":
        return ("date", date.fromisoformat(text))
    if kind == "time":
        return ("time", _time_micros(text))
    if kind in ("timestamp", "timestamptz"):
        return ("ts", datetime.fromisoformat(text))
    if kind == "uuid":
        return ("uuid", text)
    if kind in ("json", "jsonb"):
        return ("json", tagged_json(json.loads(text, parse_int=RawInt, parse_float=RawFloat)))
    if kind == "bytea":
        return ("bytes", bytea_of_pg_text(text))
    if kind == "text[]":
        return ("array", array_of_pg_text(text))
    if kind == "bigint[]":
        return ("array", tuple(None if x is None else int(x) for x in array_of_pg_text(text)))
    raise AssertionError(kind)


def check_key(key: tuple[Column, ...], values: tuple[Any, ...]) -> None:
    """A key PostgreSQL's btree index cannot hold is a dead letter (review IV #6: otherwise the merge
    fails on every attempt); only text keys grow long, other types' texts stay short."""
    texts = [v if isinstance(v, str) else "x" * 40 for v in values]
    if key_too_long(texts):
        raise Invalid(f"key ({', '.join(c.name for c in key)}) over the btree index row limit")


def same(a: Any, b: Any) -> bool:
    """Equal as stored values (a float NaN equals NaN, as PostgreSQL's float8 does)."""
    if isinstance(a, tuple) and isinstance(b, tuple) and a[:1] == b[:1] == ("float",):
        return (math.isnan(a[1]) and math.isnan(b[1])) or a[1] == b[1]
    return bool(a == b)


def sort_key(value: Any) -> Any:
    """PostgreSQL's order of a stored ordering value: float8 NaN above every number, -0 = 0, text
    by its UTF-8 bytes (``COLLATE "C"``), everything else by its own value."""
    if isinstance(value, str):
        return value.encode("utf-8")
    tag, x = value
    if tag == "float":
        return (1, 0.0) if math.isnan(x) else (0, x)
    if tag == "ts" and x.tzinfo is not None:
        return x.astimezone(UTC).replace(tzinfo=None)
    return x
