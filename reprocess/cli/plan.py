"""``reprocess plan PIPELINE``: what a replay of a range would change, row by row, before it writes.

The range options are the backfill form's. The plan reads as a run does (Spark: read, decode,
transforms, ordering, dedupe), then diffs the stage with the live table in a transaction rolled
back (reprocess.operations.preview); ``reprocess apply PLAN_ID`` applies exactly that plan.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from uuid import uuid4

from reprocess.cli.common import EXIT_FOUND, EXIT_OK, app_db_url, app_engine, kafka_config
from reprocess.core import names
from reprocess.core.choices import listed
from reprocess.core.runs import DEFAULT_END, DEFAULT_START, EndMode, StartMode

NAME: Final = "plan"
SUMMARY: Final = "what a replay would insert, update (per column), leave, refuse or delete, before it writes"
DESCRIPTION: Final = (
    "Read a range as a backfill would (the backfill form's range options) and diff it with the live table "
    "without writing: per partition and in total the rows inserted, updated (per column), unchanged, refused "
    "as older, deleted by tombstones, the dead letters, and up to 20 sample keys per kind. The plan is "
    "stored; `reprocess apply PLAN_ID` applies exactly its ranges, or refuses it when stale."
)
EXAMPLES: Final = (
    ("what a replay of the whole log would change", "reprocess plan orders"),
    (
        "from the ledger to the log end, under a plan id of your own",
        "reprocess plan orders --start-mode ledger --plan-id fix-amounts",
    ),
    (
        "partition 0 from a time, the report also written as JSON; exit 2 when it changes something",
        "reprocess plan orders --start-mode timestamp --start-value 2026-11-01T00:00:00Z --partitions 0 "
        "--out plan.json --detailed-exitcode",
    ),
)
EXIT_CHANGES: Final = 2  # --detailed-exitcode: the plan changes something (0: nothing, 1: its apply is refused)


def configure(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("pipeline", help="pipeline name (the spec's name)")
    add_range_arguments(cmd)
    cmd.add_argument("--plan-id", help="the plan's id (default: plan-<pipeline>-<time>-<random>)")
    cmd.add_argument("--json", action="store_true", help="the report as JSON")
    cmd.add_argument("--out", type=Path, metavar="FILE", help="also write the report (JSON) to FILE")
    cmd.add_argument(
        "--detailed-exitcode",
        action="store_true",
        help=f"exit 0 when nothing changes, {EXIT_CHANGES} when it does, {EXIT_FOUND} when its apply would be refused",
    )


def add_range_arguments(cmd: argparse.ArgumentParser) -> None:
    """The backfill form's range params, as options."""
    cmd.add_argument("--start-mode", default=DEFAULT_START.value, help=listed(StartMode))
    cmd.add_argument("--start-value", help='offsets JSON {"topic": {"0": 5}} or an RFC 3339 time')
    cmd.add_argument("--end-mode", default=DEFAULT_END.value, help=listed(EndMode))
    cmd.add_argument("--end-value", help="as --start-value")
    cmd.add_argument("--topic", action="append", help="only this topic (repeatable); default: all of the pipeline's")
    cmd.add_argument("--partitions", type=lambda v: [int(p) for p in v.split(",")], help="e.g. 0,2; default: all")


def range_params(args: argparse.Namespace) -> dict[str, Any]:
    return {"start_mode": args.start_mode, "start_value": args.start_value, "end_mode": args.end_mode,
            "end_value": args.end_value, "topics": args.topic or [], "partitions": args.partitions or []}  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from reprocess.airflow.settings import pipelines_dir
    from reprocess.core.runs import RunRequest
    from reprocess.formats.specs import find_spec
    from reprocess.operations.plan_report import format_plan
    from reprocess.operations.preview import load_report
    from reprocess.runner.start import start_run

    if args.json:  # stdout holds the JSON alone: the run's log lines stay on stderr, warnings and errors only
        logging.getLogger().setLevel(logging.WARNING)
    spec = find_spec(args.pipeline, pipelines_dir())
    params = {**range_params(args), "preview": True}
    request = RunRequest.from_params(params)
    plan_id = args.plan_id or names.plan_id(spec.name, datetime.now(UTC), uuid4().hex[:6])
    engine, kafka = app_engine(), kafka_config()
    with contextlib.redirect_stdout(sys.stderr):
        _plan, stages = start_run(engine, kafka, spec, request, plan_id, params=params)
        run_stages(engine, kafka, spec, plan_id, stages)
    with engine.connect() as conn:
        report = load_report(conn, plan_id)
    engine.dispose()
    assert report is not None, plan_id  # the Diff stage stored it
    if args.out:
        args.out.write_text(json.dumps(report, indent=2, default=str))
    print(json.dumps(report, indent=2, default=str) if args.json else format_plan(report))
    return exit_code(report, detailed=args.detailed_exitcode)


def exit_code(report: dict[str, Any], *, detailed: bool) -> int:
    """Terraform's ``-detailed-exitcode``: a plan whose apply would be refused is an error (1), not
    "no changes" (its ``changes`` is 0 because the refused merge wrote nothing).

    >>> [exit_code({"refused": r, "changes": c}, detailed=True) for r, c in ((None, 0), (None, 3), ("ratio", 0))]
    [0, 2, 1]
    """
    if not detailed:
        return EXIT_OK
    if report.get("refused"):
        return EXIT_FOUND
    return EXIT_CHANGES if report["changes"] else EXIT_OK


def run_stages(engine: Any, kafka: dict[str, Any], spec: Any, run_id: str, stages: Any) -> None:
    """A started run's Spark stages on the ``spark_default`` session, then its commit or diff."""
    from reprocess.airflow.hooks import spark_connect_url
    from reprocess.runner.preview import run_here
    from reprocess.spark.sample import validation_session

    registry = None
    if spec.needs_registry:
        from reprocess.airflow.hooks import SchemaRegistryHook

        registry = json.dumps(SchemaRegistryHook(spec.schema_registry).client_config())
    with validation_session(spark_connect_url()) as spark:
        run_here(engine, kafka, spec, run_id, stages, spark, app_db_url(), registry)
