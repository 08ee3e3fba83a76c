"""Reconciliation of a window holding every record of a dataset, against the target a product case
loaded from it: the Spark part (the window's read, parse and newest per key into a check stage,
``reprocess.spark.job.stage_window``) and the Postgres part (the anti-join against the target and
the ledger, ``reprocess.operations.reconcile.record_verdicts``), timed apart. The scale model
(``docs/scale.md``) takes its per-record cost from the 10 M case. The same window checked for
lineage only (no value comparison, the check before issue 38) is the baseline the value check's
cost is measured against in the same run.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

from bench.context import Bench, Result
from bench.data import T0, Dataset


def reconcile_window(bench: Bench, ds: Dataset, label: str, *, values: bool = True) -> Result:
    """Check the window ``[T0, T0 + records ms)`` (record ``i``'s timestamp is ``T0 + i`` ms) of the
    pipeline the product case ``label`` committed; every partition must come out ok. ``values``
    False checks lineage only (``record_verdicts``'s ``compare_values``)."""
    from devstack import connect as server
    from reprocess.operations.reconcile import plan_window, record_verdicts
    from reprocess.postgres.db import make_engine
    from reprocess.spark.connect import client_env, shared_session
    from reprocess.spark.job import stage_window

    spec = bench.spec(label, ds.topic)  # the same spec file the product case wrote
    start, end = T0, T0 + timedelta(milliseconds=ds.records)
    check_id = f"bench/{label}/{uuid.uuid4().hex[:8]}"
    engine = make_engine(bench.db_url)
    try:
        t0 = time.monotonic()
        ranges = plan_window(engine, bench.kafka, spec, start, end).ranges
        t1 = time.monotonic()
        with client_env(), shared_session(server.url()) as spark:
            staged = stage_window(spark, spec, check_id, ranges, bench.db_url, bench.kafka)
        t2 = time.monotonic()
        verdicts = record_verdicts(engine, spec, ranges, start, end, check_id, compare_values=values)
        t3 = time.monotonic()
    finally:
        engine.dispose()
    window = sum(r.width for r in ranges)
    if window != ds.records or not all(v.ok for v in verdicts):
        raise RuntimeError(f"{spec.name}: window of {window} records, verdicts {[v.detail() for v in verdicts]}")
    return Result(
        f"reconciliation of the window of all {ds.records:,} records ({label}){'' if values else ', lineage only'}",
        ds.records,
        t3 - t0,
        {"plan window": t1 - t0, "Spark: read, parse, newest per key": t2 - t1, "Postgres: verdicts": t3 - t2},
        {"rows_staged": staged, "partitions_ok": len(verdicts)},
    )
