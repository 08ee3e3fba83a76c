"""``reprocess validate [SPEC…]``: every problem of every spec, each with its fix."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from reprocess.airflow.settings import pipelines_dir
from reprocess.cli.common import EXIT_FOUND, EXIT_OK, app_db_url, kafka_config
from reprocess.postgres.db import make_engine

NAME: Final = "validate"
SUMMARY: Final = "check spec files: schema and rules offline; topics, a decoded sample and the target table online"
DESCRIPTION: Final = (
    "Check pipeline specs and print every problem with its fix. Offline: the JSON Schema shipped in the "
    "package (reprocess/core/spec.schema.json, usable by editors) and the spec rules. Online (unless "
    "--offline): the topics exist (partition counts), a sample of records decodes by the Spark job's rules and "
    "carries the key and ordering fields (a mapped path or header none of the records holds, with the closest "
    "one they do, and an optional column NULL in every row are warnings), the target table takes the spec in "
    "place or what mode=rebuild would change."
)


def configure(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("specs", nargs="*", metavar="SPEC", help="spec files or folders (default: the pipelines folder)")
    cmd.add_argument("--offline", action="store_true", help="no broker, Spark or database: files only")
    cmd.add_argument("--sample", type=int, default=100, help="newest records per partition to decode (default 100)")
    cmd.add_argument("--json", action="store_true", help="machine-readable output (one object per finding)")


def run(args: argparse.Namespace) -> int:
    """Every problem of every spec, each with its fix; online also the broker, a decoded sample and the table."""
    from reprocess.operations.validate import format_findings, validate_offline, validate_online

    report = validate_offline([Path(p) for p in args.specs] or [pipelines_dir()])
    if not args.offline:
        from contextlib import ExitStack

        from reprocess.core.sample import SampleRecord, SampleResult
        from reprocess.core.spec import PipelineSpec
        from reprocess.kafka.registry import registry_from_env
        from reprocess.spark.sample import decode_sample, session_from_env

        engine, kafka = make_engine(app_db_url()), kafka_config()
        with ExitStack() as stack:
            sessions: list[Any] = []

            def decode(spec: PipelineSpec, records: Sequence[SampleRecord]) -> SampleResult:
                """Spark starts only when a topic has records to decode."""
                if not sessions:
                    sessions.append(stack.enter_context(session_from_env()))
                return decode_sample(sessions[0], spec, records, registry_from_env(spec))

            for spec in report.specs:
                report.findings.extend(validate_online(spec, kafka, engine, decode, args.sample))
        engine.dispose()
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(format_findings(report))
    return EXIT_FOUND if report.errors else EXIT_OK
