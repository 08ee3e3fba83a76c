"""The ceilings: what Postgres alone and Kafka alone can do with the same data."""

from __future__ import annotations

import io
import time
from datetime import UTC, datetime

from psycopg2 import sql

from bench.consume import consume_batches
from bench.context import Bench, Result
from bench.data import Dataset, parsed_rows
from reprocess.core.names import local_run_id


def ceiling_a_pg_merge(bench: Bench, ds: Dataset, label: str = "ceil_a") -> Result:
    """Ceiling A: Postgres alone. COPY the N parsed rows and tombstones (CSV, pre-built in memory)
    into the product's stage, then the product's merge and delete statements into an empty
    target (``label``'s: one per timing, and the 10 M-record ceiling beside the N one), in one transaction.
    No Kafka, no Spark, no JSON parsing."""
    from reprocess.postgres.merge import apply_tombstones_sql, drop_superseded_markers_sql, merge_sql
    from reprocess.postgres.stage import create_stage, stage_identifier

    spec = bench.spec(label, ds.topic)
    bench.create_target(spec)
    run_id = local_run_id(spec.name, "ceiling")
    buf = io.StringIO()
    for r in parsed_rows(ds):
        ts = datetime.fromtimestamp(r[10] / 1000, UTC).isoformat()
        kind = "row" if r[1] is not None else "tombstone"  # a tombstone has its key and nothing else
        cells = ",".join("" if v is None else str(v) for v in r[:10])
        buf.write(f"{kind},{cells},{ts},1\n")
    payload = buf.getvalue().encode()
    del buf
    cols = ["_kind", *(c.name for c in spec.columns), "_kafka_topic", "_kafka_partition", "_kafka_offset",
            "_kafka_timestamp", "_records"]  # fmt: skip
    conn = bench.connect()
    try:
        started = time.monotonic()
        with conn, conn.cursor() as cur:
            create_stage(conn, spec, run_id)
            stage = stage_identifier(spec, run_id)
            copy = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(
                stage, sql.SQL(", ").join(map(sql.Identifier, cols))
            )
            cur.copy_expert(copy.as_string(cur), io.BytesIO(payload), size=1 << 20)
            copied = time.monotonic()
            # spec_version: the lineage stamp the product's commit binds (any value; the target is empty)
            cur.execute(merge_sql(spec, stage), {"run_id": run_id, "spec_version": 1})
            upserted = int(cur.fetchone()[0])
            cur.execute(apply_tombstones_sql(spec, stage), {"run_id": run_id})
            deleted = int(cur.fetchone()[0])
            cur.execute(drop_superseded_markers_sql(spec, stage))
            cur.execute(sql.SQL("DROP TABLE {}").format(stage))
        done = time.monotonic()
    finally:
        conn.close()
    return Result(
        "ceiling A: COPY + merge (Postgres only)",
        ds.records,
        done - started,
        {"copy": copied - started, "merge+commit": done - copied},
        {
            "rows_upserted": upserted,
            "rows_deleted": deleted,
            "csv_mb": round(len(payload) / 1e6, 1),
            **bench.fingerprint(spec),
        },
    )


def ceiling_b_kafka_raw(bench: Bench, ds: Dataset) -> Result:
    """Ceiling B: Kafka alone. The bench's consume loop over ``[0, end)`` of every partition;
    values are touched (``len``), never parsed."""
    records = nbytes = 0
    started = time.monotonic()
    for batch in consume_batches(bench.kafka, ds):
        records += len(batch)
        nbytes += sum(len(msg.value() or b"") for msg in batch)  # a tombstone has no value
    seconds = time.monotonic() - started
    return Result("ceiling B: raw Kafka consume", records, seconds, detail={"value_mb": round(nbytes / 1e6, 1)})


def read_alone(bench: Bench, ds: Dataset) -> Result:
    """The product's Kafka read alone: ``reprocess.spark.read.read_ranges`` (Spark's Kafka source,
    the run's options) over ``[0, end)`` of every partition on the warm Connect server, reduced to
    a count and the values' total length, so nothing is parsed or written. Compare with ceiling B
    (a bare confluent-kafka consume in this process) and with the product (read + parse + COPY)."""
    from pyspark.sql import functions as F

    from devstack import connect as server
    from reprocess.core.ranges import OffsetRange
    from reprocess.spark.connect import client_env, shared_session
    from reprocess.spark.read import read_ranges

    ranges = [OffsetRange(ds.topic, p, 0, end) for p, end in ds.ends.items()]
    times, rows = [], []
    with client_env(), shared_session(server.url()) as spark:
        for _ in range(2):  # the first read also warms the server (JIT); the second is the figure
            started = time.monotonic()
            read = read_ranges(spark, bench.kafka, ranges, headers=False)  # the bench's spec reads no header
            rows.append(read.agg(F.count("*"), F.sum(F.length("value"))).first())
            times.append(time.monotonic() - started)
    count, length = rows[-1] or (0, 0)
    return Result("product's read alone (Spark's Kafka source, count + sum(length(value)))", int(count), times[-1],
                  detail={"value_mb": round(int(length) / 1e6, 1), "first_read_s": round(times[0], 1)})  # fmt: skip
