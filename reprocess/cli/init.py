"""``reprocess init``: first-run setup of the Airflow that runs the pipelines, idempotent."""

from __future__ import annotations

import argparse
import json
from typing import Final

from reprocess.cli.common import EXIT_FOUND, EXIT_OK

NAME: Final = "init"
SUMMARY: Final = "first-run setup: the spark pool, each connection checked by connecting, the app database migrated"
DESCRIPTION: Final = (
    "Creates Airflow's `spark` pool when it is missing (an existing one is left as is), connects to the app "
    "database (reprocess_db) and applies its migrations, lists Kafka's topics (kafka_default), reads the "
    "writer schemas of the specs that need a Schema Registry, and checks the Spark launcher (spark_default: "
    "the Connect server answers and holds this library, or spark-submit and Java are found). Prints each "
    "finding with its fix; safe to run again."
)
EXAMPLES: Final = (
    ("create the spark pool, check each connection by connecting, migrate the app database", "reprocess init"),
    ("the same findings as JSON, for a deploy script", "reprocess init --json"),
)

SPEC_FIX: Final = "`reprocess validate` lists every problem of the specs"


def configure(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--json", action="store_true", help="machine-readable output (one object per finding)")


def run(args: argparse.Namespace) -> int:
    """Every setup step, each as a finding with its fix; a problem exits 1."""
    from reprocess.airflow.first_run import init
    from reprocess.airflow.settings import pipelines_dir
    from reprocess.core.errors import SettingError
    from reprocess.formats.specs import read_folder
    from reprocess.operations.findings import Finding, Severity
    from reprocess.operations.validate import Report, format_findings

    report = Report()
    try:
        folder = read_folder(pipelines_dir())
    except SettingError as exc:
        problem = f"specs not read, so no Schema Registry is checked: {exc}"
        report.findings.append(Finding("pipelines", "spec", Severity.WARNING, problem, SPEC_FIX))
    else:
        report.specs = folder.specs
        report.findings.extend(Finding(str(path), "spec", Severity.WARNING, f"not read: {error}", SPEC_FIX)
                               for path, error in folder.broken.items())  # fmt: skip
    report.findings.extend(init(report.specs))
    print(json.dumps(report.as_dict(), indent=2) if args.json else format_findings(report))
    return EXIT_FOUND if report.errors else EXIT_OK
