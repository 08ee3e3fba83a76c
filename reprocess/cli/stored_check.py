"""``reprocess audit --stored PIPELINE``: the tamper check, one PostgreSQL scan, no Kafka, no Spark
(:mod:`reprocess.operations.tamper`). The audit command (:mod:`reprocess.cli.audit`) hands its
``--stored`` here; the exit codes are the audit's: 0 ok, 1 found something, 2 could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Final

from sqlalchemy.exc import OperationalError

from reprocess.core.errors import ReprocessError

STORED_HELP: Final = (
    "the tamper check: has any row been changed, removed or inserted outside the product since it was "
    "written? one PostgreSQL scan, no Kafka"
)
EXIT_OK: Final = 0
EXIT_FOUND: Final = 1
EXIT_NOT_RUN: Final = 2


def run_stored(args: argparse.Namespace) -> int:
    """``args.pipeline`` and ``args.json``: print the verdict, return the audit's exit code."""
    from reprocess.airflow.settings import pipelines_dir
    from reprocess.cli.common import app_engine
    from reprocess.formats.specs import find_spec
    from reprocess.operations.tamper import NotGuarded, check_stored, format_stored

    try:
        spec = find_spec(args.pipeline, pipelines_dir())
        engine = app_engine()
        try:
            check = check_stored(engine, spec)
        finally:
            engine.dispose()
    except (ReprocessError, NotGuarded, OperationalError) as exc:
        print(f"reprocess audit --stored: could not run: {exc}", file=sys.stderr)
        if args.json:
            print(json.dumps({"error": {"kind": type(exc).__name__, "message": str(exc), "exit_code": EXIT_NOT_RUN}}))
        return EXIT_NOT_RUN
    print(json.dumps(check.as_dict(), indent=2) if args.json else format_stored(check))
    return EXIT_OK if check.ok else EXIT_FOUND
