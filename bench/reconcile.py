"""Reconciliation of a window holding every record of a dataset, against the target a product case
loaded from it: the Spark part (the window's read, parse and newest per key into a check stage,
``reprocess.spark.job.stage_window``) and the Postgres part (the anti-join against the target and
the ledger, ``reprocess.operations.reconcile.record_verdicts``), timed apart. The scale model
(``docs/scale.md``) takes its per-record cost from the 10 M case. The same window checked for
lineage only (no value comparison, the check before issue 38) is the baseline the value check's
cost is measured against in the same run, on the same Spark stage.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

from psycopg2 import sql

from bench.context import Bench, Result
from bench.data import T0, Dataset
from reprocess.core import names


def reconcile_window(bench: Bench, ds: Dataset, label: str) -> tuple[Result, Result]:
    """Check the window ``[T0, T0 + records ms)`` (record ``i``'s timestamp is ``T0 + i`` ms) of the
    pipeline the product case ``label`` committed, with values and lineage only; every partition
    must come out ok both ways.

    The Spark part runs once: it is the same code for both checks (``compare_values`` reaches only
    PostgreSQL), so timing it twice would measure the machine's load between the two, not the value
    check (one loaded run put 222 s and 355 s on the same stage). Its stage is copied (untimed) and
    each check's PostgreSQL part runs on its own copy, the value check first, on the colder cache.
    Returns (with values, lineage only), each with the shared plan and Spark times."""
    from devstack import connect as server
    from reprocess.operations.reconcile import record_verdicts, snapshot_window
    from reprocess.postgres.db import make_engine, pg_cursor
    from reprocess.postgres.stage import stage_identifier
    from reprocess.spark.connect import client_env, shared_session
    from reprocess.spark.job import stage_window

    spec = bench.spec(label, ds.topic)  # the same spec file the product case wrote
    start, end = T0, T0 + timedelta(milliseconds=ds.records)
    nonce = uuid.uuid4().hex[:8]  # the same window's two checks (values, lineage only) under one nonce
    check_id, lineage_id = names.check_id("bench", label, nonce), names.check_id("bench", label, f"{nonce}/lineage")
    engine = make_engine(bench.db_url)
    try:
        t0 = time.monotonic()
        ranges = snapshot_window(engine, bench.kafka, spec, start, end).ranges
        t1 = time.monotonic()
        with client_env(), shared_session(server.url()) as spark:
            staged = stage_window(spark, spec, check_id, ranges, bench.db_url, bench.kafka)
        t2 = time.monotonic()
        with engine.begin() as conn:
            cur = pg_cursor(conn)
            copy, original = stage_identifier(spec, lineage_id), stage_identifier(spec, check_id)
            cur.execute(sql.SQL("CREATE UNLOGGED TABLE {} (LIKE {})").format(copy, original))
            cur.execute(sql.SQL("INSERT INTO {} SELECT * FROM {}").format(copy, original))
        timed: dict[bool, tuple[float, list[Any]]] = {}
        for values, stage_of in ((True, check_id), (False, lineage_id)):
            t3 = time.monotonic()
            verdicts = record_verdicts(engine, spec, ranges, start, end, stage_of, compare_values=values)
            timed[values] = (time.monotonic() - t3, verdicts)
    finally:
        # record_verdicts drops the stage it checked in its own transaction; a check that raised
        # rolled that back, and the other copy was never checked: drop what is left either way.
        with engine.begin() as conn:
            cur = pg_cursor(conn)
            for stage_of in (check_id, lineage_id):
                cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(stage_identifier(spec, stage_of)))
        engine.dispose()
    window = sum(r.width for r in ranges)
    for _, verdicts in timed.values():
        if window != ds.records or not all(v.ok for v in verdicts):
            raise RuntimeError(f"{spec.name}: window of {window} records, verdicts {[v.detail() for v in verdicts]}")

    def result(values: bool) -> Result:
        seconds, verdicts = timed[values]
        return Result(
            f"reconciliation of the window of all {ds.records:,} records ({label}){'' if values else ', lineage only'}",
            ds.records,
            t2 - t0 + seconds,
            {
                "plan window": t1 - t0,
                "Spark: read, parse, newest per key (one stage for both)": t2 - t1,
                "Postgres: verdicts": seconds,
            },
            {"rows_staged": staged, "partitions_ok": len(verdicts)},
        )

    return result(True), result(False)
