"""What makes a JSON value exactly one JSON object, beyond what Spark's ``from_json`` checks.

``from_json`` (Jackson) reads the first JSON value of a record and ignores what follows it; it
keeps the last of a key written twice, turns an escape naming half of a UTF-16 pair (``"\\ud800"``)
into ``?``, and renders a number, an object or an array read as a string field in its own way
(``12.50`` → ``12.5``). Each would store data the producer did not write, so each makes the
record a dead letter here, naming the reason (README, "The JSON format").

The checks are Spark SQL over the record's text ``_str``. One extra parse per record,
``try_parse_json`` of the text inside ``[…]``: it fails on a duplicate key and a lone surrogate,
and together with two bracketings it proves nothing follows the object: what follows the first
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


def record_cases(text: str) -> list[str]:
    """The CASE branches of a record ``from_json`` read but that is not exactly one JSON object,
    each naming the reason; they follow the branch of a record ``from_json`` could not read."""
    after = (
        f"({STRICT} IS NULL AND NOT (json_array_length(concat('[', {text}, ']')) <=> 1)) "
        f"OR try_variant_get({STRICT}, '$[1]') IS NOT NULL "
        f"OR (contains({text}, ']') AND json_object_keys(concat('{{\"v\":', {text}, '}}')) IS NULL)"
    )
    return [
        f"WHEN {after} THEN concat("
        + sql_string(
            "malformed JSON: more than one JSON value, or text after the object (Spark would read the first alone): "
        )
        + f", {escaped_sql(text)})",
        f"WHEN {STRICT} IS NULL AND {text} RLIKE {sql_string(_LONE_SURROGATE)} THEN concat("
        + sql_string(
            "malformed JSON: a lone UTF-16 surrogate escape (half of a character pair, no character on its "
            "own; Spark would store it as '?'): "
        )
        + f", {escaped_sql(text)})",
        f"WHEN {STRICT} IS NULL THEN concat("
        + sql_string("malformed JSON: a key appears twice in one object (RFC 8259 leaves which one counts undefined): ")
        + f", {escaped_sql(text)})",
    ]


def _kind(path: str) -> str:
    """The JSON kind of the value at a dotted ``path`` (``STRING``, ``BIGINT``, ``OBJECT<…>``…); a
    spec's paths are word characters and dots (core.spec), so they are variant paths as they are."""
    return f"schema_of_variant(try_variant_get({STRICT}, '$[0].{path}'))"


# The first characters of Spark's text of a JSON value that is not a string or a boolean; a number
# beyond a double (`1e400`) it renders as the JSON string `"Infinity"`, quotes included.
_NON_STRING_STARTS: Final = ", ".join(sql_string(c) for c in '{[-0123456789"')


def text_case(path: str, raw: str, column: str) -> str:
    """The CASE branch of a text column whose JSON value is not a string, true/false or an
    integer: an object, an array or a number with a fraction or an exponent, whose text Spark
    would rewrite (``{"a": 1.50}`` → ``{"a":1.5}``). It names the column and says the fix."""
    kind = _kind(path)
    # A number counts by its text as Spark's reader renders it: an integer keeps its digits, any
    # other is rendered through a double (the variant's kind says DECIMAL(16,0) for 9333303126185904.0,
    # whose text Spark gives as 9.333303126185904E15). Spark renders an object as `{…}`, an array as
    # `[…]`, a number from `-`, a digit or (out of a double's range) `"`, so a text starting
    # otherwise is a JSON string or a boolean: the kind (a variant lookup, 11% of a 1 M record job's
    # CPU when asked of every record) is asked only of the others; an integer's digits never need it.
    exact = (
        f"left({raw}, 1) NOT IN ({_NON_STRING_STARTS}) OR {raw} RLIKE '^-?[0-9]+$' OR {kind} IN ('STRING', 'BOOLEAN')"
    )
    what = (
        f"CASE WHEN {kind} LIKE 'OBJECT%' THEN 'an object' WHEN {kind} LIKE 'ARRAY%' THEN 'an array' "
        "ELSE 'a number with a fraction or an exponent' END"
    )
    intro = sql_string(f"type error: field {path} of text column {column} is ")
    fix = sql_string(", which Spark would rewrite; send it as a JSON string to keep it as written: ")
    return f"WHEN {raw} IS NOT NULL AND NOT ({exact}) THEN concat({intro}, {what}, {fix}, {escaped_sql(raw)})"
