"""``reprocess status [PIPELINE]``: coverage and lag per partition, as ``kafka-consumer-groups
--describe`` prints a group's lag. Reads Postgres only: the page's own queries."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Final

from reprocess.cli.common import EXIT_FOUND, EXIT_OK, app_engine
from reprocess.cli.output import pipeline_status_text
from reprocess.operations import coverage

NAME: Final = "status"
SUMMARY: Final = "coverage and lag per partition (like kafka-consumer-groups --describe)"
DESCRIPTION: Final = (
    "Per pipeline and partition: log start, ledger, log end (latest snapshot), lag, the run that last moved "
    "the ledger and the latest reconciliation verdict. Reads Postgres only."
)


def configure(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("pipeline", nargs="?", help="one pipeline (default: all)")
    cmd.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    """Per pipeline and partition: log start, ledger, log end (latest snapshot), lag, the run that
    last moved the ledger and the latest reconciliation verdict; then the calendar's gaps and healed
    windows."""
    pipeline = args.pipeline
    engine = app_engine()
    with engine.connect() as conn:
        known = coverage.pipeline_names(conn)
        if pipeline is not None and pipeline not in known:
            known_text = ", ".join(known) or "none"
            print(f"reprocess status: no pipeline named {pipeline!r} has run; known: {known_text}", file=sys.stderr)
            return EXIT_FOUND
        pipelines = coverage.overview(conn, [pipeline] if pipeline else known)
        calendars = {p.name: coverage.calendar(conn, p.name) for p in pipelines}
    engine.dispose()
    if args.json:
        out = [
            {**p.as_dict(), "partitions": [x.as_dict() for x in p.partitions],
             "calendar": [c.as_dict() for c in calendars[p.name]]}
            for p in pipelines
        ]  # fmt: skip
        print(json.dumps(out, indent=2))
        return EXIT_OK
    if pipelines:
        print("\n\n".join(pipeline_status_text(p, calendars[p.name]) for p in pipelines))
    return EXIT_OK
