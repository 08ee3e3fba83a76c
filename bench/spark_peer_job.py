"""The raw Spark peer: the job a team writes to load a keyed Kafka topic into PostgreSQL.

Run by ``bench.spark_peer`` with ``spark-submit`` (local[2], the product's spark-submit settings);
it imports nothing of the product. Spark's Kafka source as a stream with ``Trigger.AvailableNow``
(everything up to the log end at the start, then stop), offsets in Spark's checkpoint, and
``foreachBatch``: parse the JSON, keep the last record per key within the batch (a window by
offset: ``INSERT … ON CONFLICT DO UPDATE`` refuses a key twice in one statement, and
``dropDuplicates`` would keep an arbitrary record), then a plain upsert from every partition with
psycopg2's ``execute_values``. There is no ordering guard (the upsert overwrites whatever the
table holds) and tombstones are dropped: a plain upsert has nothing to write for them.

Usage: ``spark-submit bench/spark_peer_job.py --bootstrap H:P --topic T --table schema.table
--checkpoint DIR [--max-offsets-per-trigger N] [--ending-offsets JSON]``; the database URL (libpq) is
``$REPROCESS_DB_URL``. With ``--ending-offsets`` (Spark's ``endingOffsets``) the job replays a slice
instead: one batch read from the earliest offsets to those, through the same ``foreachBatch`` function.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from typing import Any

COLUMNS = ("order_id", "customer_id", "status", "amount", "currency", "items", "updated_at")
SCHEMA = (
    "order_id STRING, customer_id STRING, status STRING, amount STRING, currency STRING, items INT, updated_at STRING"
)


def writer(db_url: str, table: str) -> Any:
    """The function every partition of a batch runs: one connection, pages of 1,000 rows."""

    def write(rows: Iterator[Any]) -> None:
        import psycopg2
        import psycopg2.extras

        schema, name = table.split(".")
        cols = ", ".join(COLUMNS)
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS[1:])
        upsert = f'INSERT INTO "{schema}"."{name}" ({cols}) VALUES %s ON CONFLICT (order_id) DO UPDATE SET {sets}'
        conn = psycopg2.connect(db_url)
        try:
            with conn, conn.cursor() as cur:
                psycopg2.extras.execute_values(cur, upsert, (tuple(r) for r in rows), page_size=1000)
        finally:
            conn.close()

    return write


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=250_000)
    parser.add_argument("--ending-offsets", help="replay [earliest, these) as one batch (Spark's endingOffsets JSON)")
    args = parser.parse_args()

    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    spark = SparkSession.builder.appName("orders-to-postgres").getOrCreate()
    write = writer(os.environ["REPROCESS_DB_URL"], args.table)

    def upsert(batch: Any, _batch_id: int) -> None:
        events = batch.where("value IS NOT NULL").select(
            F.from_json(F.col("value").cast("string"), SCHEMA).alias("e"), "offset"
        )
        newest = Window.partitionBy("e.order_id").orderBy(F.col("offset").desc())
        rows = (
            events.withColumn("_n", F.row_number().over(newest))
            .where("_n = 1")
            .select(*(F.col(f"e.{c}") for c in COLUMNS))
        )
        rows.foreachPartition(write)

    if args.ending_offsets:
        sliced = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("subscribe", args.topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", args.ending_offsets)
            .load()
        )
        upsert(sliced, 0)
        spark.stop()
        return
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        .load()
    )
    query = (
        stream.writeStream.foreachBatch(upsert)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
