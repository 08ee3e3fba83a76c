"""``reprocess audit PIPELINE``: is every row of the table what the log says it should be?

The whole retained log re-derived through the live spec (Spark, as a run derives it) against every row of
the target (:mod:`reprocess.operations.audit`). Exit codes of its own, as ``diff`` has: 0 equal (or only
rows the log can no longer prove, listed), 1 differences, 2 the audit could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Final
from uuid import uuid4

import psycopg2
from confluent_kafka import KafkaException
from sqlalchemy.exc import OperationalError

from reprocess.cli.common import app_db_url, app_engine, kafka_config
from reprocess.cli.stored_check import STORED_HELP, run_stored
from reprocess.core import names
from reprocess.core.errors import ReprocessError

NAME: Final = "audit"
SUMMARY: Final = "the whole table against the whole retained log: rows that differ, missing, must not be, unprovable"
DESCRIPTION: Final = (
    "Re-derive the newest record per key from the whole retained log through the live spec (Spark, as a run "
    "does) and compare it with every row of the target, value by value, under reconciliation's rules. Counts "
    "per kind: differ (columns and examples), missing, must not be (deleted or never produced), unprovable "
    "(the log no longer holds their record). --heal rewrites exactly the differing and missing keys and "
    "deletes the rows that must not be, as a run of its own (ledger untouched); --plan shows what it would "
    "write. --stored is the tamper check instead: one PostgreSQL scan, no Kafka, finds rows changed, removed or "
    "inserted outside the product since it wrote them. Exit 0 equal (unprovable rows are listed, not counted as "
    "differences), 1 differences, 2 could not run."
)
EXAMPLES: Final = (
    ("is every row of the table what the log says?", "reprocess audit orders"),
    ("the verdict as JSON (exit 1 when something differs)", "reprocess audit orders --json"),
    ("what a heal would write, without writing", "reprocess audit orders --plan"),
    ("heal what it finds (a run of its own; a re-audit then finds nothing to heal)", "reprocess audit orders --heal"),
    (
        "the tamper check: any row changed, removed or inserted outside the product? (no Kafka)",
        "reprocess audit orders --stored",
    ),
)
EXIT_EQUAL: Final = 0
EXIT_DIFFERENCES: Final = 1
EXIT_NOT_RUN: Final = 2


def configure(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("pipeline", help="pipeline name (the spec's name)")
    what = cmd.add_mutually_exclusive_group()
    what.add_argument("--heal", action="store_true", help="rewrite the differing and missing keys, delete the rest")
    what.add_argument("--plan", action="store_true", help="show what --heal would write; write nothing")
    what.add_argument("--stored", action="store_true", help=STORED_HELP)
    cmd.add_argument("--audit-id", help="the audit's id (default: audit-<pipeline>-<time>-<random>)")
    cmd.add_argument("--json", action="store_true", help="the report as JSON")


def run(args: argparse.Namespace) -> int:
    if args.stored:  # the tamper check: no log, no Spark (reprocess.cli.stored_check)
        return run_stored(args)
    if args.json:  # stdout holds the JSON alone
        logging.getLogger().setLevel(logging.WARNING)
    try:
        report = _audit(args)
    except (ReprocessError, OperationalError, KafkaException, psycopg2.Error) as exc:
        print(f"reprocess audit: could not run: {exc}", file=sys.stderr)
        if args.json:
            print(json.dumps({"error": {"kind": type(exc).__name__, "message": str(exc), "exit_code": EXIT_NOT_RUN}}))
        return EXIT_NOT_RUN
    print(json.dumps(report, indent=2, default=str) if args.json else format_audit(report, plan=args.plan))
    return EXIT_DIFFERENCES if report["verdict"] == "differences" and not report["heal_run"] else EXIT_EQUAL


def _audit(args: argparse.Namespace) -> dict[str, Any]:
    from reprocess.airflow.hooks import spark_connect_url
    from reprocess.airflow.settings import pipelines_dir
    from reprocess.formats.specs import find_spec
    from reprocess.runner.audit import audit_here
    from reprocess.spark.job import WindowStager
    from reprocess.spark.sample import validation_session

    spec = find_spec(args.pipeline, pipelines_dir())
    audit_id = args.audit_id or names.audit_id(spec.name, datetime.now(UTC), uuid4().hex[:6])
    registry = None
    if spec.needs_registry:
        from reprocess.airflow.hooks import SchemaRegistryHook

        registry = json.dumps(SchemaRegistryHook(spec.schema_registry).client_config())
    engine, kafka = app_engine(), kafka_config()
    try:
        with contextlib.redirect_stdout(sys.stderr), validation_session(spark_connect_url()) as spark:
            stager = WindowStager(spark, app_db_url(), kafka, registry)
            _ranges, report = audit_here(engine, kafka, spec, stager, audit_id, heal=args.heal, keep=not args.plan)
    finally:
        engine.dispose()
    return report.as_dict()


def format_audit(report: dict[str, Any], *, plan: bool = False) -> str:
    """What a person reads: the verdict, keys per kind, differing columns, a few examples, what a heal
    wrote (or, with ``plan``, would write).

    >>> print(format_audit({"pipeline": "p", "audit_id": "a", "verdict": "equal", "counts": {"differ": 0},
    ...                     "columns": {}, "examples": {}, "values": [], "ranges": [], "lost": [],
    ...                     "heal_run": None, "healed": {}}))
    audit p (a): equal: every row is what the log says
    """
    counts = report["counts"]
    head = f"audit {report['pipeline']} ({report['audit_id']}): {report['verdict']}"
    if report["verdict"] == "equal":
        return f"{head}: every row is what the log says"
    lines = [head + ": " + ", ".join(f"{kind} {n}" for kind, n in counts.items() if n)]
    if report["columns"]:
        lines.append("  columns that differ: " + ", ".join(f"{c} ×{n}" for c, n in report["columns"].items()))
    for key, column, stored, derived in report["values"]:
        lines.append(f"  {key} {column}: stored {json.dumps(stored)} vs derived {json.dumps(derived)}")
    for kind, found in report["examples"].items():
        lines.append(f"  {kind}: " + ", ".join(e["key"] for e in found) + (" …" if counts[kind] > len(found) else ""))
    for lost in report["lost"]:
        where = f"{lost['topic']}[{lost['partition']}] [{lost['start']}, {lost['end']})"
        lines.append(f"  the log no longer holds {where}, which the ledger says was read")
    if report["heal_run"]:
        healed = report["healed"]
        lines.append(
            f"  healed by run {report['heal_run']}: rewrote {healed['differ']}, inserted {healed['missing']}, "
            f"deleted {healed['must not be']}; left {counts['unprovable']} unprovable"
        )
    elif plan:
        lines.append(f"  a heal would rewrite {counts['differ']} rows, insert {counts['missing']}, delete "
                     f"{counts['must not be']}, and leave {counts['unprovable']} unprovable rows alone")  # fmt: skip
    return "\n".join(lines)
