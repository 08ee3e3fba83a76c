"""A plan and its apply over the same range of a loaded target (issue 38): ``reprocess plan``'s
read and rolled-back diff, then ``reprocess apply`` of exactly that plan (a read and a commit), each
timed on the shared Spark Connect session. Their ratio is the bench line ``plan ÷ apply``. Both
go through the runner as the CLI's do: the start, the Spark task's entry (``read_job``), then
``evaluate`` of the stages after Spark (the diff, or the commit).

The phases split each side into its read and its diff or commit: the two reads are the same work
over the same records, so what the plan adds is the diff minus the commit (docs/performance.md).
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime

from bench.context import Bench, Result
from bench.data import Dataset
from reprocess.core import names


def plan_then_apply(bench: Bench, ds: Dataset, label: str) -> Result:
    """Plan all of ``ds`` against the target the product case ``label`` committed, then apply the plan."""
    from devstack import connect as server
    from reprocess.core.runs import RunRequest
    from reprocess.core.stages import for_task
    from reprocess.core.tasks import Task
    from reprocess.operations.preview import load_report
    from reprocess.postgres.db import libpq_url, make_engine
    from reprocess.runner.evaluate import RunContext, evaluate
    from reprocess.runner.preview import start_apply
    from reprocess.runner.spark_run import read_job
    from reprocess.runner.start import start_run
    from reprocess.spark.connect import client_env, shared_session

    spec = bench.spec(label, ds.topic)  # the same spec file the product case wrote
    plan_id = names.plan_id(spec.name, datetime.now(UTC), uuid.uuid4().hex[:6])
    apply_id = names.apply_run_id(plan_id, datetime.now(UTC))
    engine = make_engine(bench.db_url)
    t: list[float] = []
    try:
        with client_env(), shared_session(server.url()) as spark:
            for run_id, start in ((plan_id, None), (apply_id, plan_id)):
                t.append(time.monotonic())
                if start is None:
                    request = RunRequest.from_params({"preview": True})
                    _plan, stages = start_run(engine, bench.kafka, spec, request, run_id)
                else:
                    _plan, stages = start_apply(engine, bench.kafka, spec, start, run_id)
                t.append(time.monotonic())
                read_job(spark, spec=str(spec.source_file), run_id=run_id, db_url=libpq_url(bench.db_url),
                         kafka_config=json.dumps(bench.kafka))  # fmt: skip
                t.append(time.monotonic())
                result = evaluate(for_task(stages, Task.COMMIT), RunContext(engine, spec))
                t.append(time.monotonic())
        with engine.connect() as conn:
            report = load_report(conn, plan_id)
    finally:
        engine.dispose()
    if report is None or result is None or result.records_read != ds.records:
        raise RuntimeError(f"{spec.name}: plan {report and report['total']}, apply {result}")
    if result.rows_upserted != report["apply"]["rows_upserted"]:
        raise RuntimeError(f"{spec.name}: the plan counted {report['apply']} but the apply wrote {result}")
    planned, applied = t[3] - t[0], t[7] - t[4]
    phases = {
        "plan (read, diff rolled back)": planned,
        "  of which the plan's read": t[2] - t[1],
        "  of which the diff": t[3] - t[2],
        "apply (read, commit)": applied,
        "  of which the apply's read": t[6] - t[5],
        "  of which the commit": t[7] - t[6],
    }
    return Result(
        f"plan, then apply of the plan, of all {ds.records:,} records ({label})",
        ds.records,
        planned,
        phases,
        {"plan_over_apply": planned / applied, "planned": report["total"], "applied": result.rows_upserted},
    )
