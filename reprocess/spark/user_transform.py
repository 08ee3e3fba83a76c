"""The spec's ``transform:``: the user's own ``DataFrame → DataFrame``, applied to the decoded good
records before ordering and dedupe (:func:`reprocess.spark.transform.to_stage`).

The function is imported where the Spark client runs (the Airflow task over Spark Connect, the
spark-submit driver) and builds a plan; only Python UDFs inside it run on executors, which
then need its module too (docs/concepts/transforms.md, "transform:"). What it returns is checked before anything is
read: the spec's columns and the lineage columns must be there (a SpecError naming the file and
the missing columns). Each row it returns is cast to the spec's types; a non-null ``_error``, a
value that does not cast, a required column left NULL or (under ``transform_derives``) a changed
key or ordering column makes the row a dead letter.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, cast

from reprocess.core.errors import SpecError
from reprocess.core.spec import ColumnSpec, ColumnType, PipelineSpec
from reprocess.core.stage_rows import DEAD, LINEAGE, LINKS, ROW, UNCHANGED
from reprocess.formats import json_udf
from reprocess.formats.contract import oversized_key_error_sql, unstorable_error_sql
from reprocess.formats.typed import typed_value_sql

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# What the function is given besides the spec's columns: the lineage, ``_error`` (NULL) and the
# record's raw ``key`` and ``value`` (binary; kept, they are a dead letter's raw bytes).
RAW: tuple[str, ...] = ("key", "value")
# Under ``transform_derives``, a copy of each key column and of the ordering column as given: the
# function must return them unchanged (a changed one would re-key or re-order rows the declaration
# let re-derive in place), which each returned row is checked for.
GIVEN: Final = "_reprocess_given_"


def load(spec: PipelineSpec) -> Callable[[DataFrame], DataFrame]:
    """The spec's function, imported; an error names the spec file and what to fix."""
    assert spec.transform is not None
    where = f"{spec.source_file}: field 'transform': {spec.transform.function!r}"
    try:
        module = importlib.import_module(spec.transform.module)
    except ImportError as exc:
        # A worker started before the install may not see it (an editable install's .pth is read at
        # start-up; a module imported earlier stays the old one): hence the restart.
        raise SpecError(
            f"{where}: cannot import {spec.transform.module!r} ({exc}); it must be importable by {sys.executable}, "
            "the Python that runs the Spark client: the Airflow worker's (with LocalExecutor or `airflow standalone`, "
            "the scheduler's, which starts the workers) for Spark Connect, the driver's for spark-submit (or ship it "
            "with --py-files). Install it there, then restart a running worker and scheduler after installing it"
        ) from exc
    function = getattr(module, spec.transform.attribute, None)
    if not callable(function):
        raise SpecError(f"{where}: {spec.transform.module} has no function {spec.transform.attribute!r}")
    return cast("Callable[[DataFrame], DataFrame]", function)


def apply(rows: DataFrame, spec: PipelineSpec) -> DataFrame:
    """``rows`` (to_stage's shape, with the raw ``key``/``value``) with its good rows replaced by
    what the function makes of them; dead letters, tombstones and filtered records pass by."""
    from pyspark.sql import functions as F

    if spec.transform is None:
        return rows
    names = [c.name for c in spec.columns]
    # The columns a Debezium event left out stay listed, with their links, whatever the function returns.
    kept = [UNCHANGED, *LINKS] if spec.unchanged_columns else []
    given = [GIVEN + c for c in _kept_as_given(spec)]
    good = rows.where(F.col("_kind") == ROW).select(
        *names, *LINEAGE, "_error", *RAW, *kept, *(F.col(c.removeprefix(GIVEN)).alias(c) for c in given)
    )
    out = load(spec)(good)
    missing = [c for c in (*names, *LINEAGE, *given) if c not in out.columns]
    if missing:
        copies = f" and, under transform_derives, the copies {given} it is given" if given else ""
        raise SpecError(
            f"{spec.source_file}: field 'transform': {spec.transform.function!r} returned a DataFrame without "
            f"{missing}; it must keep every spec column and the lineage columns {list(LINEAGE)}{copies} (add or "
            "replace columns, never drop them; mark a row it rejects with a non-null _error)"
        )
    # An array column is given to the function as its staged literal (text); returned as text, it is that literal.
    literals = {f.name for f in out.schema.fields if f.dataType.typeName() == "string"}
    error = _error(spec, out, literals)
    ok = error.isNull()
    carried = [
        F.when(ok, F.lit(ROW)).otherwise(F.lit(DEAD)).alias("_kind"),
        *(F.when(ok, F.expr(_typed(c, literals))).alias(c.name) for c in spec.columns),
        *(F.col(c).alias(c) for c in LINEAGE),
        error.alias("_error"),
        *(F.when(~ok, F.hex(c) if c in out.columns else F.lit(None)).alias(f"_raw_{c}") for c in RAW),
        # As to_stage's: under offset ordering the newest record is kept per key AND partition.
        (F.when(ok, F.col("_kafka_partition")) if spec.ordering.column is None else F.lit(None))
        .cast("int")
        .alias("_key_partition"),
        F.when(~ok, F.col("_kafka_topic")).alias("_record_topic"),
        F.when(~ok, F.col("_kafka_partition")).alias("_record_partition"),
        F.when(~ok, F.col("_kafka_offset")).alias("_record_offset"),
        *(F.when(ok, F.col(c) if c in out.columns else _absent(c)).alias(c) for c in kept),
    ]
    rest = rows.where(F.col("_kind") != ROW).drop(*RAW)
    return rest.unionByName(out.select(*carried))


def _kept_as_given(spec: PipelineSpec) -> list[str]:
    """The columns a function declaring ``transform_derives`` must return as it was given them."""
    if spec.transform is None or spec.transform.derives is None:
        return []
    return [c.name for c in spec.columns if c.name in spec.key or c.name == spec.ordering.column]


def _absent(column: str) -> Column:
    """A kept column the function dropped: no value listed as left out, no link."""
    from pyspark.sql import functions as F

    return F.array().cast("array<string>") if column == UNCHANGED else F.lit(None).cast("string")


def _error(spec: PipelineSpec, out: DataFrame, literals: set[str]) -> Column:
    """The first problem of a returned row: its own ``_error``, a value the column's type cannot
    hold, a required column left NULL, a key or ordering column changed under ``transform_derives``,
    a value PostgreSQL's COPY would refuse (text or an array element holding a NUL, text
    PostgreSQL's json or jsonb input refuses), a key too long for the target's index. Each is
    found here, before the dedupe, so the key's newest good record lands (a refusal at the COPY
    would come after the dedupe and keep the key's stored row)."""
    from pyspark.sql import functions as F

    checks = [F.col("_error").cast("string")] if "_error" in out.columns else []
    if any(c.type in (ColumnType.JSON, ColumnType.JSONB) for c in spec.columns):
        json_udf.register_json_text(out.sparkSession)
    for c in spec.columns:
        value = F.col(c.name)
        checks.append(
            F.when(
                value.isNotNull() & F.expr(_typed(c, literals)).isNull(),
                F.lit(f"transform: column {c.name} is not {c.sql_type}"),
            )
        )
        if c.required:
            checks.append(F.when(value.isNull(), F.lit(f"transform: required column {c.name} is null")))
        if c.name in _kept_as_given(spec):
            was = F.expr(typed_value_sql(f"`{GIVEN}{c.name}`", c))
            checks.append(
                F.when(
                    ~F.expr(_typed(c, literals)).eqNullSafe(was),
                    F.lit(f"transform: changed column {c.name}, which transform_derives does not list"),
                )
            )
        # As a decoded value's, on the staged value: never a COPY refusal that hides the key's older record.
        unstorable = unstorable_error_sql(c.name, c.type, c.sql_type, _typed(c, literals))
        checks += [F.expr(unstorable)] if unstorable else []
    oversized = oversized_key_error_sql([(c.name, f"`{c.name}`") for c in spec.key_columns])
    checks += [F.expr(oversized)] if oversized else []
    return F.coalesce(*checks)


def _typed(c: ColumnSpec, literals: set[str]) -> str:
    """Spark SQL: a returned column as the stage holds it, by the decoders' rule for a derived value
    (:func:`reprocess.formats.typed.typed_value_sql`: a numeric as its exact text when PostgreSQL
    reads it, an array as PostgreSQL's literal…), or an array column's literal as the function was
    given it (``literals``: the returned columns that are text); NULL when it does not fit."""
    if c.type.array_element is not None and c.name in literals:
        return f"`{c.name}`"
    return typed_value_sql(f"`{c.name}`", c)
