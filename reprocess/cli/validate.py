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
EXAMPLES: Final = (
    ("every spec of [reprocess] pipelines_dir, offline and online", "reprocess validate"),
    ("one file: schema and rules, no services", "reprocess validate pipelines/orders.yaml --offline"),
    ("decode the newest 500 records of each partition", "reprocess validate pipelines/orders.yaml --sample 500"),
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

        from reprocess.airflow.hooks import SchemaRegistryHook, spark_connect_url
        from reprocess.core.errors import RegistryError
        from reprocess.core.sample import SampleRecord, SampleResult
        from reprocess.core.spec import PipelineSpec
        from reprocess.spark.sample import decode_sample, validation_session

        engine, kafka = make_engine(app_db_url()), kafka_config()
        with ExitStack() as stack:
            sessions: list[Any] = []

            def decode(spec: PipelineSpec, records: Sequence[SampleRecord]) -> SampleResult:
                """Spark starts only when a topic has records to decode."""
                if not sessions:
                    sessions.append(stack.enter_context(validation_session(spark_connect_url())))
                try:
                    return decode_sample(sessions[0], spec, records, registry(spec))
                except RegistryError as exc:  # its words are a task's ("the task retries"): the cause's here
                    raise SchemaRegistryHook(spec.schema_registry).unreachable(str(exc.__cause__ or exc)) from exc

            for spec in report.specs:
                report.findings.extend(validate_online(spec, kafka, engine, decode, args.sample))
        engine.dispose()
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(format_findings(report))
    return EXIT_FOUND if report.errors else EXIT_OK


def registry(spec: Any) -> dict[str, Any] | None:
    """An Avro pipeline's Schema Registry config, from its connection (None: the pipeline needs none)."""
    from reprocess.airflow.hooks import SchemaRegistryHook

    return SchemaRegistryHook(spec.schema_registry).client_config() if spec.needs_registry else None
