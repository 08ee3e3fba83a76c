"""Concurrency: k pipelines' runs at once on the one warm Spark Connect server (k = 1, 2, 4).

Each run is a pipeline of its own (own spec, target and ledger) over the same topic, and each
runs in a process of its own, the way Airflow's worker runs each Spark task: plan → the Spark
stage through its own Connect client → commit (:func:`bench.product.product`). The figure is the
total records/s (all runs' records ÷ the wall time from the first start to the last commit) and
each run's own time; it is what the ``spark`` pool's size is set from (``docs/performance.md``).
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

from bench.context import Bench, Result
from bench.data import Dataset
from bench.product import SparkConnect, product

LEVELS = (1, 2, 4)


def _one(bench: Bench, ds: Dataset, label: str, start_at: float) -> tuple[float, float, Result]:
    """One run, started at the wall-clock time ``start_at`` (after every process has imported
    its modules, so the runs really overlap); its (start, end) wall-clock times and result."""
    import logging

    import pyspark.sql.connect.session  # noqa: F401  (imported before the start, not timed)

    logging.basicConfig(level=logging.WARNING)
    time.sleep(max(0.0, start_at - time.time()))
    began = time.time()
    result = product(bench, ds, SparkConnect(), label=label)
    return began, time.time(), result


def concurrent_runs(bench: Bench, ds: Dataset, k: int) -> Result:
    """``k`` product runs of ``ds`` started together; ``seconds`` is the wall time of all of them."""
    with ProcessPoolExecutor(max_workers=k, mp_context=multiprocessing.get_context("spawn")) as pool:
        # Processes start and import pyspark first (a few seconds each on 2 busy cores).
        start_at = time.time() + 5 + 3 * k
        futures = [pool.submit(_one, bench, ds, f"conc{k}_{i}", start_at) for i in range(k)]
        timed = [f.result() for f in futures]
    wall = max(end for _, end, _ in timed) - min(began for began, _, _ in timed)
    runs = [r for *_, r in timed]
    return Result(
        f"product on spark-connect, {k} concurrent run(s) of {ds.records:,} records",
        k * ds.records,
        wall,
        detail={"k": k, "run_seconds": [round(r.seconds, 1) for r in runs],
                "runs_exact": all({x: r.detail[x] for x in ("rows", "checksum")} ==
                                  {x: runs[0].detail[x] for x in ("rows", "checksum")} for r in runs)},
    )  # fmt: skip
