"""The raw Spark peer (``bench/spark_peer_job.py``) as a case: its own table, its checkpoint, a replay."""

from __future__ import annotations

import shutil
import time

from psycopg2 import sql

from bench.context import REPO, Bench, Result
from bench.data import Dataset
from bench.oracle import Table, counted_replays
from bench.product import spark_submit
from bench.slices import older_slice, spark_offsets

JOB = REPO / "bench" / "spark_peer_job.py"


def _table(bench: Bench) -> Table:
    return Table(f"{bench.tag}_spark_job", "orders")


def create_table(bench: Bench, table: Table) -> None:
    """The table a team creates for the job: the columns it writes, the key as primary key."""
    conn = bench.connect()
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(table.schema)))
            cur.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {}.{} (order_id text PRIMARY KEY, customer_id text, status text, "
                        "amount numeric, currency text, items integer, updated_at timestamptz)").format(
                    sql.Identifier(table.schema), sql.Identifier(table.name))
            )  # fmt: skip
    finally:
        conn.close()


def _run(bench: Bench, ds: Dataset, table: Table, label: str, *extra: str) -> tuple[float, dict[str, float]]:
    from reprocess.spark.conf import spark_submit_command

    checkpoint = bench.out / f"{table.schema}.checkpoint"
    cmd = spark_submit_command(JOB, "--bootstrap", bench.kafka["bootstrap.servers"], "--topic", ds.topic, "--table",
                               f"{table.schema}.{table.name}", "--checkpoint", str(checkpoint), *extra)  # fmt: skip
    log_path = bench.out / f"{table.schema}.{label}.log"
    started = time.monotonic()
    peak_mb = spark_submit(bench, cmd, log_path, "the Spark AvailableNow job")
    return time.monotonic() - started, peak_mb


def spark_availablenow_job(bench: Bench, ds: Dataset) -> Result:
    """The job from the start of the topic into an empty table, then its replay: the checkpoint
    deleted (the way a team re-reads a topic) and the job run again over the same range; then the
    older slice (:func:`bench.slices.older_slice`) as one batch into the loaded table."""
    table = _table(bench)
    create_table(bench, table)
    seconds, peak = _run(bench, ds, table, "first")
    checkpoint = bench.out / f"{table.schema}.checkpoint"

    def replay() -> float:
        shutil.rmtree(checkpoint)
        return _run(bench, ds, table, "replay")[0]

    older = ("--ending-offsets", spark_offsets(ds.topic, older_slice(ds.ends)))
    conn = bench.connect()
    try:
        counts = counted_replays(conn, ds, table, replay, lambda: _run(bench, ds, table, "older_slice", *older))
    finally:
        conn.close()
    return Result(
        "Spark AvailableNow job (foreachBatch, INSERT … ON CONFLICT DO UPDATE)",
        ds.records,
        seconds,
        detail={**counts, "peak_rss_mb": peak},
    )
