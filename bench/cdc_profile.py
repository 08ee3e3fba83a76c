"""Where a ``debezium`` run's time goes, part by part (issue 58 item 2): ``python -m bench.cdc_profile``.

On one topic of the CDC case's change events (:mod:`bench.cdc_sink`), on the warm Spark Connect
server, each part is one Spark action over the whole range, its output reduced to one hash of every
column (so no column is pruned), each part including the ones before it:

- ``read``: Spark's Kafka source alone (count and the values' length);
- ``decode``: the envelope's parse and typing (:func:`reprocess.spark.transform.decode`);
- ``record rows``: one row per record as the stage's aggregation reads it, the left-out values not
  resolved (:func:`reprocess.spark.left_out.resolve_in_range` replaced by nothing);
- ``left-out resolution``: the same with the window that resolves them (the product's record rows);
- ``newest per key``: the stage's rows (:func:`reprocess.spark.transform.to_stage`);

then the product's own run (the same stage written by COPY, and the commit's merge). A part's
cost is its time minus the part before it, in wall seconds and in the server's CPU seconds (utime +
stime of its process from ``/proc``, which other work on the machine disturbs less). ``--rounds``
repeats the whole sequence (interleaved).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final
from unittest import mock

from bench.cdc_sink import COLUMNS, cdc_dataset
from bench.context import Bench, open_bench
from bench.data import Dataset
from bench.product import SparkConnect, product

PARTS: Final = ("read", "decode", "record rows", "left-out resolution", "newest per key")


def _hashed(df: Any) -> Any:
    """One action computing a hash of every column of every row (a variant hashed as its text; a map,
    which hash refuses, left out)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType, VariantType

    fields = [f for f in df.schema.fields if not isinstance(f.dataType, MapType)]
    cols = [F.col(f"`{f.name}`").cast("string") if isinstance(f.dataType, VariantType) else F.col(f"`{f.name}`")
            for f in fields]  # fmt: skip
    return df.select(F.sum(F.hash(*cols).cast("bigint"))).first()


def _actions(spark: Any, bench: Bench, ds: Dataset, spec: Any) -> dict[str, Callable[[], Any]]:
    from pyspark.sql import functions as F

    from reprocess.core.ranges import OffsetRange
    from reprocess.formats import record_parts
    from reprocess.spark import left_out, transform
    from reprocess.spark.read import read_ranges

    ranges = [OffsetRange(ds.topic, p, 0, end) for p, end in ds.ends.items()]

    def records() -> Any:
        return read_ranges(spark, bench.kafka, ranges, headers=record_parts.reads_headers(spec))

    def unresolved() -> Any:
        with mock.patch.object(left_out, "resolve_in_range", lambda rows, _spec: rows):
            return _hashed(transform.record_rows(records(), spec))

    return {
        "read": lambda: records().agg(F.count("*"), F.sum(F.length("value"))).first(),
        "decode": lambda: _hashed(transform.decode(records(), spec)),
        "record rows": unresolved,
        "left-out resolution": lambda: _hashed(transform.record_rows(records(), spec)),
        "newest per key": lambda: _hashed(transform.to_stage(records(), spec)),
    }


def cpu_seconds(pid: int | None) -> float:
    """The process's CPU seconds so far (all its threads: utime + stime), 0 without a pid."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def profile(bench: Bench, ds: Dataset, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Each part's (wall, server CPU) seconds per round, and the product's run per round (its Spark
    action's wall seconds and the server's CPU seconds over the run, its commit's wall seconds)."""
    from devstack import connect as server
    from reprocess.spark.connect import client_env, shared_session

    spec = bench.spec("cdc_profile", ds.topic, format="debezium", extra_columns=COLUMNS)
    times: dict[str, list[tuple[float, float]]] = {p: [] for p in (*PARTS, "product: Spark action", "product: commit")}
    pid = SparkConnect().server_pid()
    for r in range(rounds):
        with client_env(), shared_session(server.url()) as spark:
            for part, action in _actions(spark, bench, ds, spec).items():
                started, cpu = time.monotonic(), cpu_seconds(pid)
                action()
                times[part].append((time.monotonic() - started, cpu_seconds(pid) - cpu))
                logging.info("round %d %s: %.1f s, CPU %.1f s (load %.1f)", r, part, *times[part][-1],
                             os.getloadavg()[0])  # fmt: skip
        cpu = cpu_seconds(pid)
        run = product(bench, ds, SparkConnect(), f"cdc_profile_{r}", format="debezium", extra_columns=COLUMNS)
        times["product: Spark action"].append((run.phases["  of which the Spark action"], cpu_seconds(pid) - cpu))
        times["product: commit"].append((run.phases["commit"], 0.0))
    return times


def main(argv: list[str] | None = None) -> int:
    from reprocess.kafka.clients import make_admin

    parser = argparse.ArgumentParser(prog="python -m bench.cdc_profile", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="change events (default 1,000,000)")
    parser.add_argument("--rounds", type=int, default=3, help="times the whole sequence runs (default 3)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    bench = open_bench()
    ds = cdc_dataset(bench, args.records)
    load = [os.getloadavg()[0]]
    try:
        times = profile(bench, ds, args.rounds)
    finally:
        admin = make_admin(bench.kafka)  # kept: its futures fail once it is collected
        for fut in admin.delete_topics([ds.topic], operation_timeout=30).values():
            fut.result()
    load.append(os.getloadavg()[0])
    print(f"{args.records:,} change events, {args.rounds} rounds, load {load[0]:.1f} → {load[1]:.1f}")
    print("| part | median s (CPU s) | each round, s (CPU s) | its own: median minus the part before, s (CPU s) |")
    print("|---|---:|---|---:|")
    before = (0.0, 0.0)
    for part, pairs in times.items():
        median = (statistics.median(w for w, _ in pairs), statistics.median(c for _, c in pairs))
        own = (median[0] - before[0], median[1] - before[1]) if part in PARTS else median
        before = median if part in PARTS else before
        each = ", ".join(f"{w:.1f} ({c:.1f})" for w, c in pairs)
        print(f"| {part} | {median[0]:.1f} ({median[1]:.1f}) | {each} | {own[0]:.1f} ({own[1]:.1f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
