"""A plan and its apply over the same range of a loaded target (issue 38): ``reprocess plan``'s
read and rolled-back diff, then ``reprocess apply`` of exactly that plan (a read and a commit), each
timed on the shared Spark Connect session. Their ratio is the bench line ``plan ÷ apply``.
"""

from __future__ import annotations

import time

from bench.context import Bench, Result
from bench.data import Dataset


def plan_then_apply(bench: Bench, ds: Dataset, label: str) -> Result:
    """Plan all of ``ds`` against the target the product case ``label`` committed, then apply the plan."""
    from devstack import connect as server
    from reprocess.core.runs import RunRequest
    from reprocess.operations.preview import load_report
    from reprocess.postgres.db import make_engine
    from reprocess.runner.preview import run_here, start_apply
    from reprocess.runner.start import start_run
    from reprocess.spark.connect import client_env, shared_session

    spec = bench.spec(label, ds.topic)  # the same spec file the product case wrote
    plan_id, apply_id = f"bench-plan-{label}-{time.time_ns()}", f"bench-apply-{label}-{time.time_ns()}"
    engine = make_engine(bench.db_url)
    try:
        with client_env(), shared_session(server.url()) as spark:
            t0 = time.monotonic()
            _plan, stages = start_run(engine, bench.kafka, spec, RunRequest.from_params({"preview": True}), plan_id)
            run_here(engine, bench.kafka, spec, plan_id, stages, spark, bench.db_url)
            t1 = time.monotonic()
            _plan, stages = start_apply(engine, bench.kafka, spec, plan_id, apply_id)
            result = run_here(engine, bench.kafka, spec, apply_id, stages, spark, bench.db_url)
            t2 = time.monotonic()
        with engine.connect() as conn:
            report = load_report(conn, plan_id)
    finally:
        engine.dispose()
    if report is None or result is None or result.records_read != ds.records:
        raise RuntimeError(f"{spec.name}: plan {report and report['total']}, apply {result}")
    if result.rows_upserted != report["apply"]["rows_upserted"]:
        raise RuntimeError(f"{spec.name}: the plan counted {report['apply']} but the apply wrote {result}")
    return Result(
        f"plan, then apply of the plan, of all {ds.records:,} records ({label})",
        ds.records,
        t1 - t0,
        {"plan (read, diff rolled back)": t1 - t0, "apply (read, commit)": t2 - t1},
        {"plan_over_apply": (t1 - t0) / (t2 - t1), "planned": report["total"], "applied": result.rows_upserted},
    )
