"""What makes a JSON value exactly one JSON object, beyond what Spark's ``from_json`` checks.

``from_json`` (Jackson) reads the first JSON value of a record and ignores what follows it; it
keeps the last of a key written twice, turns an escape naming half of a UTF-16 pair (``"\\ud800"``)
into ``?``, and renders a number, an object or an array read as a string field in its own way
(``12.50`` → ``12.5``). Each would store data the producer did not write, so each makes the
record a dead letter here, naming the reason (docs/formats/json.md).

The decoder's Jackson UDF (:mod:`reprocess.formats.json_udf`) tells which records break a rule in
its one parse; the reason is named here in Spark SQL for those records alone, as it was named
before (the UDF meets the rules in the record's order, the dead letter names them in this one):
``try_parse_json`` of the text inside ``[…]`` fails on a duplicate key and a lone surrogate, and
together with two bracketings it proves nothing follows the object: what follows the first
value either starts with ``,`` (a second array element), ``]`` (it closes the bracket: the same
text inside ``{"v":…}`` fails), ``}`` (fails inside ``[…]``) or anything else (fails in both).
"""

from __future__ import annotations

from typing import Final

from reprocess.formats.contract import escaped_sql, sql_string

STRICT: Final = "_js"
"""The column holding the record's text inside ``[…]`` parsed as a VARIANT, NULL when it fails."""

# An escape of a UTF-16 high surrogate not followed by a low one, or a low one not preceded by a high one.
_LONE_SURROGATE: Final = (
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F]"
)


def strict_sql(text: str) -> str:
    """Spark SQL: ``text`` inside ``[…]`` as a VARIANT, or NULL when it is no strict JSON."""
    return f"try_parse_json(concat('[', {text}, ']'))"


def record_cases(text: str, refused: str) -> list[str]:
    """The CASE branches of a record ``from_json`` read but that is not exactly one JSON object,
    each naming the reason; they follow the branch of a record ``from_json`` could not read. Each
    is asked only where ``refused`` (Spark SQL) holds: the records the UDF found breaking a rule."""
    after = (
        f"({STRICT} IS NULL AND NOT (json_array_length(concat('[', {text}, ']')) <=> 1)) "
        f"OR try_variant_get({STRICT}, '$[1]') IS NOT NULL "
        f"OR (contains({text}, ']') AND json_object_keys(concat('{{\"v\":', {text}, '}}')) IS NULL)"
    )
    return [
        f"WHEN {refused} AND ({after}) THEN concat("
        + sql_string(
            "malformed JSON: more than one JSON value, or text after the object (Spark would read the first alone): "
        )
        + f", {escaped_sql(text)})",
        f"WHEN {refused} AND {STRICT} IS NULL AND {text} RLIKE {sql_string(_LONE_SURROGATE)} THEN concat("
        + sql_string(
            "malformed JSON: a lone UTF-16 surrogate escape (half of a character pair, no character on its "
            "own; Spark would store it as '?'): "
        )
        + f", {escaped_sql(text)})",
        f"WHEN {refused} AND {STRICT} IS NULL THEN concat("
        + sql_string("malformed JSON: a key appears twice in one object (RFC 8259 leaves which one counts undefined): ")
        + f", {escaped_sql(text)})",
    ]


def text_case(path: str, raw: str, column: str, kind: str) -> str:
    """The CASE branch of a text column whose JSON value is not a string, true/false or an
    integer: an object, an array or a number with a fraction or an exponent, whose text Spark
    would rewrite (``{"a": 1.50}`` → ``{"a":1.5}``, ``1e400`` → ``"Infinity"``). ``kind`` is the
    UDF's kind of the field (``OBJECT``, ``ARRAY``, ``NUMBER`` or NULL). It names the column and says
    the fix."""
    what = (
        f"CASE {kind} WHEN 'OBJECT' THEN 'an object' WHEN 'ARRAY' THEN 'an array' "
        "ELSE 'a number with a fraction or an exponent' END"
    )
    intro = sql_string(f"type error: field {path} of text column {column} is ")
    fix = sql_string(", which Spark would rewrite; send it as a JSON string to keep it as written: ")
    return f"WHEN {raw} IS NOT NULL AND {kind} IS NOT NULL THEN concat({intro}, {what}, {fix}, {escaped_sql(raw)})"
