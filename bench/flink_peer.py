"""The Flink peer (``bench/flink_peer_job.py``) as a case: its own table, a load, a replay, an older-slice replay.

The job runs with the Python of the bench's Flink venv (``scripts/bootstrap.sh`` makes it from
``bench/flink-requirements.txt``) and the connector jars of the ``flink`` jar set. Each run is timed
from the process's start to its end (JVM and mini-cluster start included, as the Spark job's
spark-submit is), bounded to the offsets it is given.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from bench.context import REPO, Bench, Result
from bench.data import Dataset
from bench.oracle import Table, counted_replays
from bench.product import spark_submit
from bench.slices import flink_offsets, older_slice
from bench.spark_peer import create_table

JOB = REPO / "bench" / "flink_peer_job.py"
_JOB_SECONDS = re.compile(r"flink job seconds=([0-9.]+)")


def flink_python() -> Path:
    """The Flink venv's Python; fails with the fix when the install has not made it."""
    from devstack.process import state_dir

    python = state_dir() / "flink-venv" / "bin" / "python"
    if not (python.parent.parent / ".installed").exists():
        raise RuntimeError(f"the Flink venv is missing ({python}): run scripts/flink_venv.sh (make bench does)")
    return python


def _run(
    bench: Bench, ds: Dataset, table: Table, ends: dict[int, int], label: str
) -> tuple[float, float, dict[str, float]]:
    """Run the job over ``[0, ends)``: wall seconds, the job's own seconds (from its log), peak memory."""
    from devstack import jvm

    jars = ",".join(str(j) for j in jvm.jars("flink"))
    cmd = [str(flink_python()), str(JOB), "--bootstrap", bench.kafka["bootstrap.servers"], "--topic", ds.topic,
           "--table", f"{table.schema}.{table.name}", "--jars", jars, "--bounded", flink_offsets(ends)]  # fmt: skip
    log_path = bench.out / f"{table.schema}.{label}.log"
    started = time.monotonic()
    peak_mb = spark_submit(bench, cmd, log_path, "the Flink job")  # any job command: the bench's DB and Kafka
    seconds = time.monotonic() - started
    m = _JOB_SECONDS.search(log_path.read_text(errors="replace"))
    return seconds, float(m.group(1)) if m else float("nan"), peak_mb


def flink_job(bench: Bench, ds: Dataset) -> Result:
    """The job over the whole range into an empty table, the same range again, then the older
    slice (:func:`bench.slices.older_slice`) into the loaded table; the oracle counts after each."""
    table = Table(f"{bench.tag}_flink_job", "orders")
    create_table(bench, table)
    seconds, job_seconds, peak = _run(bench, ds, table, ds.ends, "first")
    conn = bench.connect()
    try:
        counts = counted_replays(conn, ds, table, lambda: _run(bench, ds, table, ds.ends, "replay")[0],
                                 lambda: _run(bench, ds, table, older_slice(ds.ends), "older_slice"))  # fmt: skip
    finally:
        conn.close()
    return Result(
        "Flink job (upsert-kafka bounded, streaming mode, parallelism 2 → JDBC upsert)",
        ds.records,
        seconds,
        detail={**counts, "job_seconds_without_jvm_start_stop": job_seconds, "peak_rss_mb": peak},
    )
