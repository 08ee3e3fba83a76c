"""``reprocess redrive PIPELINE``: the backfill confs that re-read a pipeline's open dead letters."""

from __future__ import annotations

import argparse
import json
from typing import Final

from reprocess.cli.common import EXIT_OK, app_engine
from reprocess.core.names import pipeline_dag_id
from reprocess.operations import redrive

NAME: Final = "redrive"
SUMMARY: Final = "backfill confs that re-read a pipeline's open dead letters"
DESCRIPTION: Final = (
    "The fewest backfill confs that re-read exactly the offsets of the open dead letters, and the "
    "`airflow dags trigger` commands that run them."
)
EXAMPLES: Final = (
    ("the backfill confs that re-read every open dead letter", "reprocess redrive orders"),
    ("one error kind only, as JSON", "reprocess redrive orders --kind 'missing required field amount' --json"),
)


def configure(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("pipeline")
    cmd.add_argument("--kind", help="only this error kind (as the page's filter shows it)")
    cmd.add_argument("--run", help="only the dead letters of this run id")
    cmd.add_argument("--max-gap", type=int, default=redrive.DEFAULT_MAX_GAP, help="join ranges this close (offsets)")
    cmd.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    """The backfill confs that re-read the open dead letters, and the commands that trigger them."""
    pipeline, kind, run_id = args.pipeline, args.kind, args.run
    engine = app_engine()
    with engine.connect() as conn:
        plan = redrive.plan_redrive(conn, pipeline, kind, run_id, args.max_gap)
    engine.dispose()
    if args.json:
        print(json.dumps(plan.as_dict(), indent=2))
        return EXIT_OK
    what = "".join([f" of kind {kind!r}" if kind else "", f" of run {run_id}" if run_id else ""])
    if not plan.confs:
        print(f"redrive {pipeline}: no open dead letters{what}; nothing to redrive")
        return EXIT_OK
    print(f"redrive {pipeline}: {plan.dead_letters} open dead letters{what} in {len(plan.ranges)} ranges "
          f"-> {len(plan.confs)} backfill run(s):")  # fmt: skip
    for conf in plan.confs:
        print(f"airflow dags trigger {pipeline_dag_id(pipeline, 'backfill')} --conf '{json.dumps(conf)}'")
    return EXIT_OK
