"""PostgreSQL's text forms the oracle reads back, and the rules of the types whose JSON input is a
container (``bytea`` as base64, ``text[]``/``bigint[]`` as a JSON array), written out from
PostgreSQL's documentation (8.4 "Binary Data Types", 8.15 "Arrays") and RFC 4648, not from the product.

Each rule raises ``ValueError`` with the reason; :mod:`tests.adversary.values` makes it a dead letter.
Nothing here imports the product.
"""

from __future__ import annotations

import base64
import binascii
import re

_BASE64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
BIGINT_BITS = 63
# PostgreSQL's btree index row limit (BTMaxItemSize, 8 kB pages): 2704 bytes, of which an 8-byte
# tuple header and per key column a varlena header and alignment (8 bytes at most) are not the value.
BTREE_ROW_LIMIT = 2704


def bytea_of_base64(text: str) -> bytes:
    """RFC 4648 base64 (its alphabet, ``+`` and ``/``); the padding may be left out (RFC 4648 3.2: the
    length says where the data ends), as the product's Spark reader takes it (docs/formats/index.md);
    whitespace inside is skipped, as the reader (Spark's base64 check, Java's ``isWhitespace``) skips it;
    a length that leaves one character over or the URL alphabet (``-``/``_``) is refused."""
    text = re.sub("[ \t\n\r\x0b\x0c\x1c-\x1f]", "", text)
    body = text.rstrip("=")
    if not _BASE64.match(text) or len(body) % 4 == 1 or (body != text and len(text) % 4):
        raise ValueError(f"{text[:40]!r} is not base64")
    try:
        return base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except binascii.Error as exc:
        raise ValueError(str(exc)) from None


def bytea_of_pg_text(text: str) -> bytes:
    """``bytea::text`` in the default ``bytea_output = hex``: ``\\x`` and two hex digits a byte."""
    if not text.startswith("\\x"):
        raise AssertionError(f"not bytea's hex output: {text[:40]!r}")
    return bytes.fromhex(text[2:])


def bigint_element(text: str) -> int:
    """A ``bigint[]`` element given as a JSON integer or a string holding one (whitespace around it
    taken, as the integer columns take it); a fraction, an exponent or a word is refused."""
    if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", text):
        raise ValueError(f"{text[:40]!r} is not an integer")
    n = int(text)
    if not -(2**BIGINT_BITS) <= n < 2**BIGINT_BITS:
        raise ValueError(f"{n} is beyond bigint")
    return n


def array_of_pg_text(text: str) -> tuple[str | None, ...]:
    """A one-dimensional array's text output: ``{}``, ``{a,"b c",NULL,"NULL"}``. An element is
    double-quoted when it is empty, ``NULL`` (any case), or holds ``{}",\\`` or whitespace; inside
    quotes ``\\`` escapes the next character. An unquoted ``NULL`` is the NULL element."""
    if not (text.startswith("{") and text.endswith("}")):
        raise AssertionError(f"not an array's output: {text[:40]!r}")
    body, i = text[1:-1], 0
    out: list[str | None] = []
    if not body:
        return ()
    while i <= len(body):
        if i < len(body) and body[i] == '"':
            i += 1
            chars = []
            while body[i] != '"':
                if body[i] == "\\":
                    i += 1
                chars.append(body[i])
                i += 1
            out.append("".join(chars))
            i += 1  # the closing quote
        else:
            end = body.find(",", i)
            end = len(body) if end < 0 else end
            word = body[i:end]
            if word.startswith("{"):
                raise AssertionError(f"a nested array in a one-dimensional column: {text[:60]!r}")
            out.append(None if word.upper() == "NULL" else word)
            i = end
        i += 1  # the comma
    return tuple(out)


def key_too_long(texts: list[str]) -> bool:
    """Whether a key whose columns' values have these texts cannot be indexed: over the btree row
    limit counting each column at its UTF-8 bytes plus 8 (random text does not compress; the pools
    keep every key either far below the limit or far above it, so the exact overhead never decides)."""
    return sum(len(t.encode("utf-8")) + 8 for t in texts) + 8 > BTREE_ROW_LIMIT
