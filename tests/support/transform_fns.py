"""The user's own transform functions for test_transforms: ``transform: tests.support.transform_fns:v1``.

v1 copies ``amount`` into ``net`` and rejects negative amounts (a dead letter through ``_error``);
v2 adds 20 % VAT to ``net`` for the ``eu`` region: only those rows derive differently.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def _amount() -> Column:
    """Numeric columns reach the function as their exact text: cast to compute."""
    return F.col("amount").cast("decimal(20,2)")


def v1(df: DataFrame) -> DataFrame:
    return df.withColumn("net", _amount()).withColumn("_error", F.when(_amount() < 0, F.lit("negative amount")))


def v2(df: DataFrame) -> DataFrame:
    vat = F.when(F.col("region") == "eu", _amount() * F.lit(1.2).cast("decimal(2,1)")).otherwise(_amount())
    return v1(df).withColumn("net", vat)


def drops_lineage(df: DataFrame) -> DataFrame:
    """A function that loses the lineage columns: the job refuses it before reading."""
    return df.select("id", "region", "status", "amount", "label", "net")


def nul_in_text(df: DataFrame) -> DataFrame:
    """Appends a NUL character to ``t`` when it starts with ``bad``: output no Spark check covers,
    which PostgreSQL's text refuses at the COPY (test_stage_refusals)."""
    return df.withColumn(
        "t", F.when(F.col("t").startswith("bad"), F.concat("t", F.expr("char(0)"))).otherwise(F.col("t"))
    )


def drops_drafts(df: DataFrame) -> DataFrame:
    """A transform that filters: draft records are not returned at all (test_rebuild_decoding)."""
    return df.where(F.col("status") != "draft")


def refused_values(df: DataFrame) -> DataFrame:
    """Sets column ``c`` to a value PostgreSQL's COPY refuses when ``t`` is ``bad-<c>``: output the
    decoder's checks never see, which the transform's check must catch before the dedupe
    (test_refused_newest_record)."""
    refused = {
        "doc": F.lit('{"a": "x\\u0000"}'),
        "raw": F.lit('{"a": 1} x'),
        "js": F.lit('"\\ud800"'),
        "tags": F.concat(F.lit('{"c'), F.expr("char(0)"), F.lit('"}')),  # the function gets the array's literal
        "amount": F.lit("1" * 39),
        "big": F.lit("9" * 40 + ".999995"),
    }
    for column, value in refused.items():
        df = df.withColumn(column, F.when(F.col("t") == f"bad-{column}", value).otherwise(F.col(column)))
    return df


def v2_moving_one_version(df: DataFrame) -> DataFrame:
    """v2, and it also raises ``version`` of key ``inv-1``: a change of the ordering column, which a
    spec declaring ``transform_derives: [net]`` does not allow (those records become dead letters)."""
    moved = F.when(F.col("id") == "inv-1", F.col("version") + 100).otherwise(F.col("version"))
    return v2(df).withColumn("version", moved)
