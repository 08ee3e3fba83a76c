"""The column types a spec may declare: their spec spelling, the PostgreSQL type the target holds
and the Spark type a decoder stages.

A type Spark holds exactly is staged as that Spark type (``bigint``, ``date``, ``timestamp_ntz``…).
One it does not is staged as text that the decoders validated and PostgreSQL casts at the COPY
(:mod:`reprocess.postgres.stage_write`): ``numeric`` (a Spark decimal has at most 38 digits and one
scale), ``time``, ``uuid``, ``json``/``jsonb``, ``bytea`` (``\\x`` and hex digits) and the arrays
(PostgreSQL's array literal). A value PostgreSQL still refuses there is a dead letter naming the
column (:mod:`reprocess.postgres.refused`), never a failed run.

``numeric(p,s)`` is the one type with modifiers: a column holds them as ``ColumnSpec.numeric``
(precision, scale), and :func:`sql_type` spells the whole type.
"""

from __future__ import annotations

import enum
import re
from typing import Final


class ColumnType(enum.StrEnum):
    TEXT = "text"
    BIGINT = "bigint"
    INTEGER = "integer"
    SMALLINT = "smallint"
    DOUBLE = "double precision"
    REAL = "real"
    NUMERIC = "numeric"
    BOOLEAN = "boolean"
    TIMESTAMPTZ = "timestamptz"
    TIMESTAMP = "timestamp"
    DATE = "date"
    TIME = "time"
    UUID = "uuid"
    JSON = "json"
    JSONB = "jsonb"
    BYTEA = "bytea"
    TEXT_ARRAY = "text[]"
    BIGINT_ARRAY = "bigint[]"

    @property
    def spark_type(self) -> str:
        """The Spark SQL type a decoder stages the column's values as."""
        return _SPARK_TYPES[self]

    @property
    def staged_as_text(self) -> bool:
        """Whether the stage receives validated text that PostgreSQL casts (see the module docstring)."""
        return _SPARK_TYPES[self] == "string" and self is not ColumnType.TEXT

    @property
    def array_element(self) -> str | None:
        """The Spark type of an array column's elements (None for any other column)."""
        return {ColumnType.TEXT_ARRAY: "string", ColumnType.BIGINT_ARRAY: "bigint"}.get(self)


class DecimalHandling(enum.StrEnum):
    """A Debezium connector's ``decimal.handling.mode`` as a JSON-converter pipeline reads numerics."""

    STRING = "string"  # the decimal's text (a ``double`` connector's JSON number reads the same)
    PRECISE = "precise"  # base64 of the unscaled two's-complement bytes; the scale is numeric(p,s)'s


_SPARK_TYPES: Final = {
    ColumnType.TEXT: "string",
    ColumnType.BIGINT: "bigint",
    ColumnType.INTEGER: "int",
    ColumnType.SMALLINT: "smallint",
    ColumnType.DOUBLE: "double",
    ColumnType.REAL: "float",
    ColumnType.NUMERIC: "string",
    ColumnType.BOOLEAN: "boolean",
    ColumnType.TIMESTAMPTZ: "timestamp",
    ColumnType.TIMESTAMP: "timestamp_ntz",
    ColumnType.DATE: "date",
    ColumnType.TIME: "string",
    ColumnType.UUID: "string",
    ColumnType.JSON: "string",
    ColumnType.JSONB: "string",
    ColumnType.BYTEA: "string",
    ColumnType.TEXT_ARRAY: "string",
    ColumnType.BIGINT_ARRAY: "string",
}

# PostgreSQL's ``format_type`` spelling, where it differs from the spec's (the DDL reads both).
_FORMAT_TYPE: Final = {
    ColumnType.TIMESTAMPTZ: "timestamp with time zone",
    ColumnType.TIMESTAMP: "timestamp without time zone",
    ColumnType.TIME: "time without time zone",
}
# PostgreSQL's numeric holds at most 1000 digits of precision; its scale may not exceed it here.
MAX_PRECISION: Final = 1000
_NUMERIC_MODS: Final = re.compile(r"^numeric\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)$")


def parse_type(text: object) -> tuple[ColumnType, tuple[int, int] | None] | str:
    """A spec's type → (type, numeric (precision, scale) or None), or the problem and its fix.

    Examples
    --------
    >>> parse_type("numeric(20, 6)")
    (<ColumnType.NUMERIC: 'numeric'>, (20, 6))
    >>> parse_type("jsonb")
    (<ColumnType.JSONB: 'jsonb'>, None)
    >>> parse_type("numeric(3,5)")
    'numeric(3,5): the scale (5) must be at most the precision (3), as in PostgreSQL: e.g. numeric(5,5)'
    """
    if isinstance(text, str):
        found = _NUMERIC_MODS.match(text.strip().lower())
        if found:
            precision, scale = int(found.group(1)), int(found.group(2) or 0)
            if not 1 <= precision <= MAX_PRECISION:
                return f"{text}: the precision must be 1-{MAX_PRECISION} (PostgreSQL's limit), e.g. numeric(20,6)"
            if scale > precision:
                return (
                    f"{text}: the scale ({scale}) must be at most the precision ({precision}), as in PostgreSQL: "
                    f"e.g. numeric({scale},{scale})"
                )
            return ColumnType.NUMERIC, (precision, scale)
        try:
            return ColumnType(text), None
        except ValueError:
            pass
    allowed = ", ".join([*(t.value for t in ColumnType), "numeric(p,s)"])
    return f"{text!r} is not one of: {allowed}"


def sql_type(kind: ColumnType, numeric: tuple[int, int] | None) -> str:
    """The type as the DDL spells it: ``numeric(20,6)``, ``jsonb``, ``text[]``…"""
    if kind is ColumnType.NUMERIC and numeric is not None:
        return f"numeric({numeric[0]},{numeric[1]})"
    return kind.value


def format_type(kind: ColumnType, numeric: tuple[int, int] | None) -> str:
    """The type as PostgreSQL's ``format_type`` reports it (the evolution's comparison).

    Examples
    --------
    >>> format_type(ColumnType.TIME, None), format_type(ColumnType.NUMERIC, (20, 6))
    ('time without time zone', 'numeric(20,6)')
    """
    return _FORMAT_TYPE.get(kind) or sql_type(kind, numeric)
