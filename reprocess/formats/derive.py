"""The spec's ``expr`` columns and ``where`` predicate as Spark SQL over a decoder's columns,
shared by every format: a decoder says how a value field is reached (``value_ref``), this module
resolves every other name the same way for all of them (:func:`reprocess.core.derive.rewrite`).

An ``expr`` column's result is the column's raw value (``raw_name``), cast to the column's type
into its typed value (``typed_name``) as a path-mapped field is, so the decoder's own checks
(required, type error) name it as they name any column. A decoder calls :func:`with_derived`
after extracting its fields and :func:`with_keep` after its ``_error``.

A name in an expression may also be a record part or (debezium) an envelope part by its ``$``
path in backquotes, `` `$headers.event_type` `` or `` `$source.lsn` ``; ``value_ref`` resolves it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from reprocess.core.derive import RECORD_FIELDS, rewrite
from reprocess.core.spec import PipelineSpec
from reprocess.formats.contract import KEEP, typed_name
from reprocess.formats.typed import typed_value_sql

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def resolver(spec: PipelineSpec, value_ref: Callable[[str], str]) -> Callable[[tuple[str, ...]], str]:
    """Names in a spec expression → Spark SQL: a column's typed value, a record field, else the
    decoded value's field by dotted path."""
    typed = {c.name: typed_name(i) for i, c in enumerate(spec.columns)}

    def resolve(parts: tuple[str, ...]) -> str:
        if parts[0] in typed:
            return typed[parts[0]]
        if parts[0] in RECORD_FIELDS:
            return RECORD_FIELDS[parts[0]]
        return value_ref(".".join(parts))

    return resolve


def derived_fields(spec: PipelineSpec, value_ref: Callable[[str], str], raw_name: Callable[[int], str]) -> list[str]:
    """``selectExpr`` items for the ``expr`` columns: raw result, then typed value."""
    resolve = resolver(spec, value_ref)
    out = []
    for i, c in enumerate(spec.columns):
        if c.expr is not None:
            out.append(f"({rewrite(c.expr, resolve)}) AS {raw_name(i)}")
    return out


def typed_fields(spec: PipelineSpec, raw_name: Callable[[int], str]) -> list[str]:
    """The ``expr`` columns' typed values from their raw results (a second ``selectExpr``), by the
    rule every transform's value follows (:func:`reprocess.formats.typed.typed_value_sql`): a
    numeric is staged as its exact text, as a path-mapped numeric field is."""
    return [f"{typed_value_sql(raw_name(i), c)} AS {typed_name(i)}" for i, c in enumerate(spec.columns) if c.expr]


def keep_field(spec: PipelineSpec, value_ref: Callable[[str], str]) -> str:
    """The ``where`` predicate as the :data:`~reprocess.formats.contract.KEEP` column; NULL counts
    as not kept, as in SQL's WHERE."""
    if spec.where is None:
        return f"true AS {KEEP}"
    return f"coalesce(({rewrite(spec.where, resolver(spec, value_ref))}), false) AS {KEEP}"


def with_derived(
    parsed: DataFrame,
    spec: PipelineSpec,
    value_ref: Callable[[str], str],
    raw_name: Callable[[int], str],
) -> DataFrame:
    """``parsed`` plus the ``expr`` columns' raw results and typed values (unchanged without any)."""
    if not any(c.expr for c in spec.columns):
        return parsed
    parsed = parsed.selectExpr("*", *derived_fields(spec, value_ref, raw_name))
    return parsed.selectExpr("*", *typed_fields(spec, raw_name))


def with_keep(decoded: DataFrame, spec: PipelineSpec, value_ref: Callable[[str], str]) -> DataFrame:
    """A decoder's output plus the :data:`~reprocess.formats.contract.KEEP` column."""
    return decoded.selectExpr("*", keep_field(spec, value_ref))
