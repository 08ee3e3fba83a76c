"""``reprocess reset PIPELINE --to-…``: move a pipeline's ledger (dry run unless ``--execute``)."""

from __future__ import annotations

import argparse
import getpass
import json
from dataclasses import asdict
from typing import Any, Final

from reprocess.cli.common import EXIT_OK, app_engine, kafka_config
from reprocess.operations.reset import ResetMode

NAME: Final = "reset"
SUMMARY: Final = "move a pipeline's ledger (dry run unless --execute), like kafka-consumer-groups --reset-offsets"
DESCRIPTION: Final = (
    "Move a pipeline's ledger (dry run unless --execute), like kafka-consumer-groups "
    "--reset-offsets. Prints current -> new per partition and what the next incremental run would read."
)
EXAMPLES: Final = (
    (
        "dry run: current -> new per partition to re-read from a time",
        "reprocess reset orders --to-datetime 2026-11-01T00:00:00Z",
    ),
    (
        "re-read the last 1000 offsets of partitions 0 and 2: applied, recorded, mirrored to the group",
        "reprocess reset orders --shift-by -1000 --partitions 0,2 --execute --reason 'replay after the producer fix'",
    ),
    ("skip everything unread", "reprocess reset orders --to-latest --execute --reason 'topic refilled by hand'"),
)


# The ``--to-…`` options, one per mode, named as the mode (kafka-consumer-groups' names).
_TO: Final[dict[ResetMode, dict[str, Any]]] = {
    ResetMode.EARLIEST: {"help": "the log start of each partition"},
    ResetMode.LATEST: {"help": "the log end (skips everything unread)"},
    ResetMode.OFFSET: {"type": int, "metavar": "N", "help": "offset N on every selected partition (clamped)"},
    ResetMode.DATETIME: {"metavar": "TS", "help": "first record at/after an RFC 3339 time, e.g. 2026-11-01T00:00Z"},
    ResetMode.SHIFT_BY: {"type": int, "metavar": "N", "help": "move each position by N (negative: re-read N offsets)"},
}


def configure(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("pipeline", help="pipeline name (the spec's name)")
    to = cmd.add_mutually_exclusive_group(required=True)
    for mode in ResetMode:  # a mode with no value moves to an end of the log: a flag
        flag: dict[str, Any] = {} if mode.takes_value else {"action": "store_true", "default": None}
        to.add_argument(f"--{mode.value}", **flag, **_TO[mode])
    cmd.add_argument("--topic", action="append", help="only this topic (repeatable); default: all of the pipeline's")
    cmd.add_argument("--partitions", type=lambda v: [int(p) for p in v.split(",")], help="e.g. 0,2; default: all")
    run = cmd.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="print the plan, change nothing (the default)")
    run.add_argument("--execute", action="store_true", help="apply under the pipeline's lock and record it")
    cmd.add_argument("--reason", help="why (required with --execute; stored in reprocess.ledger_resets)")
    cmd.add_argument("--by", default=getpass.getuser(), help="who asks (default: the OS user)")
    cmd.add_argument("--json", action="store_true", help="machine-readable output (one object per partition)")


def run(args: argparse.Namespace) -> int:
    """Dry run by default: print current → new per partition; ``--execute`` applies and audits."""
    from reprocess.airflow.settings import pipelines_dir
    from reprocess.formats.specs import find_spec
    from reprocess.operations.reset import ResetRequest, execute_reset, format_reset, plan_reset

    spec = find_spec(args.pipeline, pipelines_dir())
    mode, value = next((m, v) for m in ResetMode if (v := getattr(args, m.value.replace("-", "_"))) is not None)
    request = ResetRequest(
        mode, None if isinstance(value, bool) else str(value), tuple(args.topic or ()), tuple(args.partitions or ())
    )
    engine = app_engine()
    kafka = kafka_config()
    if args.execute:
        rows = execute_reset(engine, kafka, spec, request, reason=args.reason or "", requested_by=args.by)
    else:
        rows = plan_reset(engine, kafka, spec, request)
    if args.json:
        print(json.dumps({"executed": args.execute, "pipeline": spec.name, "mode": request.mode.value,
                          "value": request.value, "partitions": [asdict(r) for r in rows]}, indent=2))  # fmt: skip
    else:
        print(format_reset(spec, request, rows, executed=args.execute))
    return EXIT_OK
