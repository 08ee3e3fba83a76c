"""Micro-benchmark: the Spark parse/validate/dedupe step alone, current vs a proposed rewrite.

Evidence for a library proposal (see docs/benchmarks.md): ``reprocess.transform.to_stage`` as it
is, against a variant that extracts each field's variant and typed value ONCE (its CASE refers
to those columns instead of repeating ``try_variant_get`` up to three times per column) and
checks "is an object" on the first character of valid JSON instead of ``schema_of_variant``.
Both write to Spark's ``noop`` sink from the same cached input (no Kafka, no Postgres), in one
SparkSession (local[2], shuffle partitions 4, as the DAG runs it), each timed after a warm-up.

Usage: python bench/transform_variants.py --records 1000000
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

HERE = Path(__file__).resolve().parent


def _bench_run() -> Any:
    spec = importlib.util.spec_from_file_location("bench_run", HERE / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_run"] = module
    spec.loader.exec_module(module)
    return module


def to_stage_once(records: DataFrame, spec: Any) -> DataFrame:
    """Proposed ``to_stage``: every ``try_variant_get`` evaluated once per column and record."""
    from pyspark.sql import functions as F

    from reprocess.transform import DEAD, ROW, _newest_first, _sql_str, stage_columns

    raw = {c.name: f"_r_{i}" for i, c in enumerate(spec.columns)}
    typed = {c.name: f"_t_{i}" for i, c in enumerate(spec.columns)}
    parsed = records.selectExpr("*", "CAST(value AS STRING) AS _str").selectExpr("*", "try_parse_json(_str) AS _v")
    parsed = parsed.selectExpr(
        "*",
        *(f"try_variant_get(_v, {_sql_str(c.json_path)}) AS {raw[c.name]}" for c in spec.columns),
        *(
            f"try_variant_get(_v, {_sql_str(c.json_path)}, {_sql_str(c.type.spark_type)}) AS {typed[c.name]}"
            for c in spec.columns
        ),
    )
    cases = [
        "WHEN value IS NULL OR length(value) = 0 THEN 'empty value'",
        f"WHEN length(value) > {spec.max_record_bytes} THEN concat('oversized value: ', length(value), "
        f"' bytes > max_record_bytes {spec.max_record_bytes}')",
        "WHEN NOT is_valid_utf8(_str) THEN 'value is not valid UTF-8'",
        "WHEN _v IS NULL THEN concat('malformed JSON: ', left(_str, 80))",
        "WHEN NOT startswith(ltrim(_str), '{') THEN concat('JSON value is not an object: ', left(_str, 80))",
    ]
    for c in spec.columns:
        r, t = raw[c.name], typed[c.name]
        if c.required:
            missing = _sql_str("missing required field " + c.path)
            cases.append(f"WHEN {r} IS NULL OR is_variant_null({r}) THEN {missing}")
        cases.append(
            f"WHEN {r} IS NOT NULL AND NOT is_variant_null({r}) AND {t} IS NULL THEN "
            f"concat({_sql_str(f'type error: field {c.path} is not {c.type.value}: ')}, left(to_json({r}), 80))"
        )
    parsed = parsed.withColumn("_error", F.expr("CASE " + " ".join(cases) + " END"))
    ok = F.col("_error").isNull()
    rows = parsed.select(
        F.when(ok, F.lit(ROW)).otherwise(F.lit(DEAD)).alias("_kind"),
        *(F.when(ok, F.col(typed[c.name])).alias(c.name) for c in spec.columns),
        F.col("topic").alias("_kafka_topic"),
        F.col("partition").alias("_kafka_partition"),
        F.col("offset").alias("_kafka_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        "_error",
        F.when(~ok, F.lower(F.hex("key"))).alias("_raw_key"),
        F.when(~ok, F.lower(F.hex("value"))).alias("_raw_value"),
        F.when(~ok, F.col("partition")).alias("_dead_partition"),
        F.when(~ok, F.col("offset")).alias("_dead_offset"),
        F.when(~ok, F.col("topic")).alias("_dead_topic"),
    )
    carried = [c for c in stage_columns(spec) if c not in spec.key and c not in ("_kind", "_records")]
    newest = rows.groupBy("_kind", *spec.key, "_dead_topic", "_dead_partition", "_dead_offset").agg(
        F.max_by(F.struct(*carried), F.struct(*_newest_first(spec))).alias("_newest"),
        F.count(F.lit(1)).alias("_records"),
    )
    return newest.select(
        *(
            F.col(c) if c in spec.key or c in ("_kind", "_records") else F.col(f"_newest.{c}").alias(c)
            for c in stage_columns(spec)
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2, help="timed runs per variant (best is reported)")
    args = parser.parse_args(argv)

    import pandas as pd
    from pyspark.sql import SparkSession

    from reprocess.spec import PipelineSpec
    from reprocess.transform import to_stage

    run = _bench_run()
    spec = PipelineSpec.from_file(run.ORDERS_SPEC)
    orders = max(1, args.records // run.UPDATES_PER_KEY)
    rows = []
    for i in range(args.records):
        part, key, ev = run._event(i, orders)
        rows.append((key.encode(), run.json.dumps(ev, separators=(",", ":")).encode(), "t", part, i, i, 0))
    pdf = pd.DataFrame(rows, columns=["key", "value", "topic", "partition", "offset", "ts", "timestampType"])
    pdf["timestamp"] = pd.to_datetime(pdf["ts"], unit="ms", utc=True)
    pdf = pdf.drop(columns="ts")
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    try:
        df = spark.createDataFrame(pdf).repartition(4).cache()
        df.count()
        results: dict[str, float] = {}
        for name, fn in (("current to_stage", to_stage), ("proposed to_stage_once", to_stage_once)):
            fn(df, spec).write.format("noop").mode("overwrite").save()  # warm-up (codegen, JIT)
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.monotonic()
                fn(df, spec).write.format("noop").mode("overwrite").save()
                best = min(best, time.monotonic() - t0)
            results[name] = best
        same = to_stage(df, spec).exceptAll(to_stage_once(df, spec)).count() == 0
    finally:
        spark.stop()
    print(f"| variant | seconds (best of {args.repeat}) | records/s |\n|---|---:|---:|")
    for name, s in results.items():
        print(f"| {name} | {s:.1f} | {args.records / s:,.0f} |")
    print(f"same output rows: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
