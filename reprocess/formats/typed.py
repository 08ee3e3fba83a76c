"""A field's text → the value a column of the spec's type stages, in Spark SQL, for every format.

Each decoder reads a field as text first (JSON's text, an Avro value made text by
:func:`reprocess.formats.avro_schema.field`, a Debezium envelope's field) and types it here:
the result is NULL when the text is not a value of the type, which the decoder reports as a type
error naming the column (:func:`reprocess.formats.json.decode.column_cases`). A type Spark holds exactly
is a Spark value; any other is text in PostgreSQL's input syntax, cast at the COPY
(:mod:`reprocess.core.column_types`). The rules:

- ``numeric``: the exact text PostgreSQL reads (never a double in between); ``numeric(p,s)`` also
  fits its precision (checked here: by Spark's decimal up to 38 digits, by the text's digits beyond). A Debezium
  ``precise`` decimal is base64 of the unscaled two's-complement bytes (up to 38 digits), scaled by
  the column's ``s``; a ``VariableScaleDecimal`` (``{"scale": 2, "value": "<base64>"}``) by its own.
- ``date``, ``timestamp``, ``time``: ISO text; under Debezium's JSON converter also the integer
  its semantic types send (``io.debezium.time.Date``: days since 1970-01-01; ``MicroTimestamp``:
  microseconds since the epoch; ``MicroTime``: microseconds since midnight). Years 1-9999.
- ``uuid``: 32 hex digits (hyphens and braces as PostgreSQL takes them), staged canonical.
- ``bytea``: base64 (what Kafka Connect's JSON converter writes for bytes), staged as ``\\x`` hex.
- ``text[]``, ``bigint[]``: a JSON array (NULL elements kept), staged as PostgreSQL's array literal.
- ``json``, ``jsonb``: the JSON text, checked before the dedupe as PostgreSQL's input reads it
  (:func:`reprocess.formats.contract.unstorable_error_sql`: ``jsonb`` also refuses ``\\u0000``).
"""

from __future__ import annotations

import base64
import json
from typing import Final

from reprocess.core.column_types import ColumnType
from reprocess.core.spec import ColumnSpec, PipelineSpec
from reprocess.formats.contract import sql_string

# What PostgreSQL's numeric input reads, bounded well inside its limits (131072 digits before the
# point, 16383 after): at most 1000 characters and a three-digit exponent.
NUMERIC_TEXT: Final = "^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]{1,3})?$"
NUMERIC_CHARS: Final = 1000
# Every part that handles a timestamp holds the years 1-9999 (Python's datetime, Spark's formats,
# what the stage's CSV writes and PostgreSQL reads back: year 0 and BC years fail the COPY).
TIMESTAMP_YEARS: Final = (1, 9999)
# Days since 1970-01-01 of 0001-01-01 and 9999-12-31: the dates every part holds.
_DAYS: Final = (-719162, 2932896)
_MICROS_PER_DAY: Final = 86_400_000_000
_INTEGER: Final = "^[+-]?[0-9]{1,19}$"
_TIME_TEXT: Final = r"^(([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9]([.][0-9]{1,6})?)?|24:00(:00([.]0{1,6})?)?)$"
_DATE_TEXT: Final = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
# The spark precision a decimal check reads exactly; numeric(p,s) beyond it is left to PostgreSQL.
_SPARK_DIGITS: Final = 38


def typed_sql(text: str, c: ColumnSpec, *, debezium: bool = False, precise: bool = False) -> str:
    """The staged value of a field's ``text`` for column ``c``, NULL when ``text`` is not one.

    ``debezium``: an integer is the count Debezium's temporal types send (the JSON converter;
    Avro's text is already ISO). ``precise``: a numeric is Debezium's ``precise`` base64.
    """
    kind = c.type
    if kind is ColumnType.NUMERIC:
        return numeric_fit(_numeric(text, c, precise), c)
    if kind in (ColumnType.DOUBLE, ColumnType.REAL):
        return _floating(text, c.type.spark_type)
    if kind is ColumnType.TIMESTAMPTZ:
        cast = f"try_cast({text} AS timestamp)"
        dated = f"try_cast({text} AS timestamp_ntz) IS NOT NULL"
        return f"CASE WHEN {dated} AND {_in_years(cast)} THEN {cast} END"
    if kind is ColumnType.TIMESTAMP:
        cast = f"try_cast({text} AS timestamp_ntz)"
        if debezium:
            micros = f"timestampadd(MICROSECOND, try_cast({text} AS BIGINT), TIMESTAMP_NTZ'1970-01-01 00:00:00')"
            cast = f"CASE WHEN {_is_integer(text)} THEN {micros} ELSE {cast} END"
        return f"CASE WHEN {_in_years(cast)} THEN {cast} END"
    if kind is ColumnType.DATE:
        iso = f"CASE WHEN trim({text}) RLIKE {sql_string(_DATE_TEXT)} THEN try_cast(trim({text}) AS date) END"
        if debezium:
            days = f"try_cast({text} AS INT)"
            epoch = f"CASE WHEN {days} BETWEEN {_DAYS[0]} AND {_DAYS[1]} THEN date_add(DATE'1970-01-01', {days}) END"
            iso = f"CASE WHEN {_is_integer(text)} THEN {epoch} ELSE {iso} END"
        return f"CASE WHEN {_in_years(iso)} THEN {iso} END"
    if kind is ColumnType.TIME:
        iso = f"CASE WHEN trim({text}) RLIKE {sql_string(_TIME_TEXT)} THEN trim({text}) END"
        if debezium:
            return f"CASE WHEN {_is_integer(text)} THEN {time_of_micros(f'try_cast({text} AS BIGINT)')} ELSE {iso} END"
        return iso
    if kind is ColumnType.UUID:
        digits = f"regexp_replace(lower(trim({text})), '[{{}}-]', '')"
        groups = ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))
        parts = ", ".join(f"substr({digits}, {start}, {n})" for start, n in groups)
        return f"CASE WHEN {digits} RLIKE '^[0-9a-f]{{32}}$' THEN concat_ws('-', {parts}) END"
    if kind is ColumnType.BYTEA:
        return hex_bytea(f"try_to_binary({text}, 'base64')")
    if kind.array_element is not None:
        literal = _array_literal(f"from_json({text}, 'array<string>')", kind)
        return f"CASE WHEN {_text_elements(text)} THEN {literal} END" if kind is ColumnType.TEXT_ARRAY else literal
    if kind in (ColumnType.JSON, ColumnType.JSONB, ColumnType.TEXT):
        return text
    return f"try_cast({text} AS {kind.spark_type})"


def typed_value_sql(value: str, c: ColumnSpec) -> str:
    """The staged value of a Spark value of any type (an ``expr``'s result, a transform's column),
    NULL when it does not convert: an array column takes an array, ``bytea`` the bytes of a binary
    (or of a text's UTF-8), the types Spark holds a cast, the others their text as
    :func:`typed_sql` reads it."""
    kind = c.type
    if kind is ColumnType.NUMERIC:
        return numeric_fit(numeric_text(value), c)
    if kind.array_element is not None:
        return _array_literal(f"from_json(to_json({value}), 'array<string>')", kind)
    if kind is ColumnType.BYTEA:
        return hex_bytea(value)
    if kind.staged_as_text:
        return typed_sql(f"CAST({value} AS STRING)", c)
    return f"try_cast({value} AS {kind.spark_type})"


def ordering_sql(spec: PipelineSpec) -> list[str]:
    """The pipeline's ordering fields (:attr:`~reprocess.core.ordering.Ordering.fields`, most
    significant first) as Spark SQL over the stage's columns, ordered as PostgreSQL orders them: the
    ordering column by its :func:`sort_key_sql`, the lineage (topic, partition, offset) as it is."""
    columns = {c.name: c for c in spec.columns}
    return [sort_key_sql(f"`{f}`", columns[f]) if f in columns else f"`{f}`" for f in spec.ordering.fields]


def sort_key_sql(value: str, c: ColumnSpec) -> str:
    """A staged value of column ``c`` as Spark must order it to agree with PostgreSQL's order of the
    column (DESIGN "One comparison rule on both engines"): a type Spark holds, or text it compares
    byte-wise as PostgreSQL does under ``COLLATE "C"`` (``text``, a canonical ``uuid``, ``bytea``'s
    hex), is itself; a ``numeric`` is ordered by value, not by its text (``"9" > "10"``); a ``time``
    by its microseconds, whatever its written form (``10:00`` = ``10:00:00.000000``). NULL (the
    lowest) for text that is not a value of the type. :mod:`reprocess.core.ordering` refuses the
    types no key orders alike."""
    if c.type is ColumnType.NUMERIC:
        if c.numeric is not None:  # at most 38 digits, rounded to the scale as PostgreSQL's COPY rounds
            return f"try_cast({value} AS DECIMAL({c.numeric[0]},{c.numeric[1]}))"
        return _numeric_sort_key(value)
    if c.type is ColumnType.TIME:
        part = "try_cast(substr({v}, {at}, 2) AS BIGINT)"
        hours, minutes = part.format(v=value, at=1), part.format(v=value, at=4)
        seconds = f"coalesce({part.format(v=value, at=7)}, 0)"
        micros = f"try_cast(rpad(regexp_extract({value}, '[.]([0-9]+)$', 1), 6, '0') AS BIGINT)"
        return f"((({hours} * 60 + {minutes}) * 60 + {seconds}) * 1000000 + {micros})"
    return value


def _numeric_sort_key(value: str) -> str:
    """An exact order of numeric text of any length (no decimal in between): ``(sign, exponent,
    digits)`` of ``0.<digits> × 10^exponent`` with the digits' leading and trailing zeros dropped, so
    ``1.50e2`` and ``150`` are one key. A negative value negates the exponent and complements its
    digits (ended by ``:``, after every digit), so a larger magnitude sorts lower."""
    body = f"regexp_replace({value}, '^[+-]', '')"
    mantissa = f"regexp_replace({body}, '[eE].*$', '')"
    whole = f"regexp_extract({mantissa}, '^([0-9]*)', 1)"
    every = f"regexp_replace({mantissa}, '[.]', '')"
    significant = f"regexp_replace({every}, '^0+', '')"
    digits = f"regexp_replace({significant}, '0+$', '')"
    exponent = (
        f"(length({whole}) + coalesce(try_cast(regexp_extract({body}, '[eE]([+-]?[0-9]+)$', 1) AS INT), 0) "
        f"- (length({every}) - length({significant})))"
    )
    negative = f"startswith({value}, '-')"
    complement = f"concat(translate({digits}, '0123456789', '9876543210'), ':')"
    return (
        f"CASE WHEN NOT {value} RLIKE {sql_string(NUMERIC_TEXT)} THEN NULL "
        f"WHEN {digits} = '' THEN named_struct('sign', 0, 'exponent', 0, 'digits', '') "
        f"WHEN {negative} THEN named_struct('sign', -1, 'exponent', -{exponent}, 'digits', {complement}) "
        f"ELSE named_struct('sign', 1, 'exponent', {exponent}, 'digits', {digits}) END"
    )


def type_text(c: ColumnSpec) -> str:
    """The type a type error names: a timestamp says which years it holds."""
    if c.type in (ColumnType.TIMESTAMPTZ, ColumnType.TIMESTAMP, ColumnType.DATE):
        return f"{c.sql_type} (years {TIMESTAMP_YEARS[0]}-{TIMESTAMP_YEARS[1]})"
    return c.sql_type


def numeric_text(sql: str) -> str:
    """``sql``'s text when PostgreSQL's numeric input reads it (else NULL: a type error)."""
    text = f"trim(CAST({sql} AS STRING))"
    return f"CASE WHEN {text} RLIKE {sql_string(NUMERIC_TEXT)} AND length({text}) <= {NUMERIC_CHARS} THEN {text} END"


def numeric_fit(exact: str, c: ColumnSpec) -> str:
    """``exact`` (a numeric's text) when ``numeric(p,s)`` holds it once rounded to ``s`` places, as
    PostgreSQL rounds; NULL (a type error, before the dedupe) when it has more digits before the
    point than ``p - s``: up to 38 digits by Spark's decimal, beyond by the text's digits
    (:func:`_fits_digits`), never left to the COPY, whose refusal would hide the key's older record."""
    if c.numeric is None:
        return exact
    precision, scale = c.numeric
    if precision > _SPARK_DIGITS:
        return f"try_element_at(filter(array({exact}), x -> {_fits_digits(precision, scale)}), 1)"
    return f"CASE WHEN try_cast({exact} AS DECIMAL({precision},{scale})) IS NOT NULL THEN {exact} END"


def _fits_digits(precision: int, scale: int) -> str:
    """Spark SQL over ``x``, a numeric's text as :data:`NUMERIC_TEXT` reads it: true when ``x``
    rounded half away from zero to ``scale`` places (PostgreSQL's rounding) has at most
    ``precision - scale`` digits before the point. ``x`` is 0.d₁d₂… × 10^pos, d₁ its first
    non-zero digit: it fits when pos is below the limit, or at it unless rounding carries
    (d₁…d_p all 9 and d_{p+1} ≥ 5)."""
    unsigned = "lower(regexp_replace(trim(x), '^[+-]', ''))"
    mantissa = f"split_part({unsigned}, 'e', 1)"
    exponent = f"coalesce(try_cast(nullif(split_part({unsigned}, 'e', 2), '') AS INT), 0)"
    digits = f"replace({mantissa}, '.', '')"
    significant = f"TRIM(LEADING '0' FROM {digits})"
    pos = f"(length(split_part({mantissa}, '.', 1)) + {exponent} - length({digits}) + length({significant}))"
    limit = precision - scale
    carries = (
        f"length({significant}) > {precision} AND substr({significant}, 1, {precision}) RLIKE '^9+$' "
        f"AND substr({significant}, {precision + 1}, 1) >= '5'"
    )
    return f"(x IS NULL OR length({significant}) = 0 OR {pos} < {limit} OR ({pos} = {limit} AND NOT ({carries})))"


def hex_bytea(binary: str) -> str:
    """``bytea``'s hex input (``\\x0102``) of a Spark binary (NULL stays NULL)."""
    return f"CASE WHEN {binary} IS NOT NULL THEN concat({sql_string(chr(92) + 'x')}, lower(hex({binary}))) END"


def time_of_micros(micros: str) -> str:
    """``HH:MM:SS.ffffff`` of microseconds since midnight (0 to 24:00:00, PostgreSQL's range)."""
    return (
        f"CASE WHEN {micros} BETWEEN 0 AND {_MICROS_PER_DAY} THEN format_string('%02d:%02d:%02d.%06d', "
        f"{micros} div 3600000000, ({micros} div 60000000) % 60, ({micros} div 1000000) % 60, {micros} % 1000000) END"
    )


def decimal_of_bytes(binary: str, scale: str) -> str:
    """The text of a decimal sent as its unscaled two's-complement big-endian bytes (Kafka
    Connect's ``Decimal``, Debezium's ``precise`` mode) with ``scale`` places; NULL beyond 38
    digits (Spark's decimal) or for no bytes. Built digit by digit, never through a double."""
    h, n = f"hex({binary})", f"length({binary})"
    negative = f"(conv(substr({h}, 1, 2), 16, 10) >= 128)"
    byte = f"CAST(conv(substr({h}, 2 * i - 1, 2), 16, 10) AS INT)"
    value = f"CASE WHEN {negative} THEN 255 - {byte} ELSE {byte} END"
    step = f"CAST(try_add(try_multiply(acc, 256), {value}) AS DECIMAL(38,0))"
    magnitude = f"aggregate(sequence(1, {n}), CAST(0 AS DECIMAL(38,0)), (acc, i) -> {step})"
    digits = f"CAST(CASE WHEN {negative} THEN try_add({magnitude}, 1) ELSE {magnitude} END AS STRING)"
    padded = f"lpad({digits}, greatest(length({digits}), {scale} + 1), '0')"  # lpad cuts a longer text
    sign = f"CASE WHEN {negative} THEN '-' ELSE '' END"
    point = f"concat(left({padded}, length({padded}) - {scale}), '.', right({padded}, {scale}))"
    placed = f"CASE WHEN {scale} = 0 THEN {digits} ELSE {point} END"
    ok = f"{n} > 0 AND {scale} BETWEEN 0 AND 1000 AND {digits} IS NOT NULL"
    return f"CASE WHEN {ok} THEN concat({sign}, {placed}) END"


def left_out_sql(raw: str, c: ColumnSpec, placeholder: str) -> str:
    """Spark SQL true when a Debezium field's text is the connector's placeholder for a value it
    left out: the text itself, or as a ``bytea`` sends it (the placeholder's bytes, base64) or an
    array (a one-element array of it)."""
    texts = [placeholder]
    if c.type is ColumnType.BYTEA:
        texts.append(base64.b64encode(placeholder.encode()).decode())
    if c.type.array_element is not None:
        texts.append(json.dumps([placeholder], separators=(",", ":")))
    return "(" + " OR ".join(f"{raw} <=> {sql_string(t)}" for t in texts) + ")"


def _numeric(text: str, c: ColumnSpec, precise: bool) -> str:
    """A numeric's exact text: a ``VariableScaleDecimal`` object by its own scale, else (``precise``)
    base64 bytes at the column's scale, else the text itself."""
    variable = f"from_json({text}, 'struct<scale:int,value:string>')"
    by_scale = decimal_of_bytes(f"try_to_binary({variable}.value, 'base64')", f"{variable}.scale")
    fixed = numeric_text(text)
    if precise:
        fixed = (
            decimal_of_bytes(f"try_to_binary({text}, 'base64')", str(c.numeric[1])) if c.numeric is not None else "NULL"
        )
    return f"CASE WHEN startswith(ltrim({text}), '{{') THEN {by_scale} ELSE {fixed} END"


def _floating(text: str, spark_type: str) -> str:
    """A double or real whose value the text says: Spark reads ``1e400`` as Infinity and ``1e-400``
    as 0, which PostgreSQL refuses as out of range; the words NaN and Infinity are values."""
    cast = f"try_cast({text} AS {spark_type})"
    word = f"lower(trim({text})) RLIKE '^[+-]?(nan|inf|infinity)$'"
    overflow = f"(isnan({cast}) OR abs({cast}) = {spark_type}('Infinity')) AND NOT {word}"
    underflow = f"{cast} = 0 AND trim({text}) RLIKE '^[^eE]*[1-9]'"
    return f"CASE WHEN NOT ({overflow}) AND NOT ({underflow}) THEN {cast} END"


def _in_years(value: str) -> str:
    low, high = TIMESTAMP_YEARS
    return f"year({value}) BETWEEN {low} AND {high}"


def _is_integer(text: str) -> str:
    return f"trim({text}) RLIKE {sql_string(_INTEGER)}"


def _text_elements(text: str) -> str:
    """Spark SQL: every element of the JSON array ``text`` is what a text column takes (a string, an
    integer, true/false, null): a number with a fraction or an exponent, an object or an array inside
    would be stored as Spark renders it (``12.50`` → ``12.5``, ``1e2`` → ``100.0``), not as written.
    A variant's integer is BIGINT, or DECIMAL(p,0) past 19 digits."""
    elements = f"try_variant_get(try_parse_json({text}), '$', 'array<variant>')"
    kind = "schema_of_variant(e)"
    integer = f"{kind} RLIKE '^DECIMAL[(][0-9]+,0[)]$'"
    return f"forall({elements}, e -> {kind} IN ('STRING', 'BOOLEAN', 'BIGINT', 'VOID') OR {integer})"


def _array_literal(elements: str, kind: ColumnType) -> str:
    """PostgreSQL's array literal of a JSON array's elements (``array<string>``, NULL elements
    kept): text quoted with ``"`` and ``\\`` escaped; bigint checked element by element (a
    fraction, a word or a nested array is a type error)."""
    quote, backslash = sql_string('"'), sql_string(chr(92))
    if kind is ColumnType.BIGINT_ARRAY:
        ok = f"forall({elements}, x -> x IS NULL OR try_cast(x AS BIGINT) IS NOT NULL)"
        items = f"transform({elements}, x -> coalesce(CAST(try_cast(x AS BIGINT) AS STRING), 'NULL'))"
    else:
        ok = "true"
        escaped = f"replace(x, {backslash}, {sql_string(chr(92) * 2)})"
        escaped = f"replace({escaped}, {quote}, {sql_string(chr(92) + chr(34))})"
        item = f"CASE WHEN x IS NULL THEN 'NULL' ELSE concat({quote}, {escaped}, {quote}) END"
        items = f"transform({elements}, x -> {item})"
    return f"CASE WHEN {elements} IS NOT NULL AND {ok} THEN concat('{{', array_join({items}, ','), '}}') END"
