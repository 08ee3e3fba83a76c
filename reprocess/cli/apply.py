"""``reprocess apply PLAN_ID``: apply exactly what a plan showed, or refuse it when stale."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Final

from reprocess.cli.common import EXIT_FOUND, EXIT_OK, app_engine, kafka_config
from reprocess.core.errors import ReprocessError
from reprocess.core.names import apply_run_id

NAME: Final = "apply"
SUMMARY: Final = "apply exactly a stored plan's ranges (refused when its spec, ledger or log start changed)"
DESCRIPTION: Final = (
    "Run the backfill of exactly the ranges a `reprocess plan` stored. Refused, saying what changed, when "
    "the spec's fingerprint, the ledger (for a range that starts at it) or a partition's log start moved "
    "since the plan, or when the plan was applied already."
)
EXAMPLES: Final = (
    ("apply what the plan showed (refused, saying what changed, when it is stale)", "reprocess apply fix-amounts"),
)


def configure(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("plan_id", help="the plan's id (`reprocess plan` prints it)")


def run(args: argparse.Namespace) -> int:
    from reprocess.airflow.settings import pipelines_dir
    from reprocess.cli.plan import run_stages
    from reprocess.formats.specs import find_spec
    from reprocess.operations.plan_report import reads
    from reprocess.operations.preview import load_report
    from reprocess.operations.summary import format_summary, run_summary
    from reprocess.runner.preview import start_apply

    engine, kafka = app_engine(), kafka_config()
    with engine.connect() as conn:
        report = load_report(conn, args.plan_id)
    if report is None:
        raise ReprocessError(f"no plan {args.plan_id!r}; make one with `reprocess plan PIPELINE`")
    spec = find_spec(report["pipeline"], pipelines_dir())
    run_id = apply_run_id(args.plan_id, datetime.now(UTC))
    _plan, stages = start_apply(engine, kafka, spec, args.plan_id, run_id)
    run_stages(engine, kafka, spec, run_id, stages)
    summary = run_summary(engine, spec.name, run_id, spec=spec, applied_plan=args.plan_id)
    if not reads(report):
        print(f"plan {args.plan_id} reads nothing: applied as an empty run, no row changed")
    print(format_summary(summary))
    return EXIT_OK if summary["state"] == "committed" else EXIT_FOUND
