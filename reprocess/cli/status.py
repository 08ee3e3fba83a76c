"""``reprocess status [PIPELINE]``: coverage and lag per partition, as ``kafka-consumer-groups
--describe`` prints a group's lag. Reads Postgres only (the page's own queries), except that
``--live`` asks the broker for the backlog of the pipelines that never ran.

Every pipeline is listed: those that ran (their rows in Postgres, a spec or not) and the specs of
the pipelines folder that never ran, each with the DAG that starts it. A spec file that does not
load hides no other pipeline: it is a finding of its own (its error and fix; exit 1), as in Airflow
its pipeline gets a placeholder DAG while the other specs keep theirs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Final

from reprocess.airflow.settings import pipelines_dir
from reprocess.cli.common import EXIT_FOUND, EXIT_OK, app_engine, kafka_config
from reprocess.cli.output import BrokenSpec, NeverRan, broken_spec_text, never_ran_text, pipeline_status_text
from reprocess.core.errors import SettingError
from reprocess.core.names import pipeline_dag_id
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import read_folder
from reprocess.operations import coverage
from reprocess.operations.audit import last_audit, last_audit_text

NAME: Final = "status"
SUMMARY: Final = "coverage and lag per partition (like kafka-consumer-groups --describe)"
DESCRIPTION: Final = (
    "Per pipeline and partition: log start, ledger, log end (latest snapshot), lag, the run that last moved "
    "the ledger and the latest reconciliation verdict. Reads Postgres only. A spec'd pipeline that never "
    "ran is listed with the DAG that starts it (with --live, its topics' backlog on the broker now). A pipeline "
    "whose newest run failed shows that run, its state and cause apart from the run that last moved the ledger "
    "(exit 1). A spec file that does not load is reported with its error and fix (exit 1); the other pipelines "
    "are still listed."
)
EXAMPLES: Final = (
    ("every pipeline: coverage and lag per partition, the newest run when it failed", "reprocess status"),
    ("one pipeline, as JSON", "reprocess status orders --json"),
    ("also the broker's backlog of the spec'd pipelines that never ran", "reprocess status --live"),
)


def configure(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("pipeline", nargs="?", help="one pipeline (default: all)")
    cmd.add_argument(
        "--live", action="store_true", help="pipelines that never ran: their topics' current backlog, from the broker"
    )
    cmd.add_argument("--json", action="store_true", help="machine-readable output")


def never_ran(spec: PipelineSpec, live: bool) -> NeverRan:
    """The DAG that starts a pipeline with no run yet; ``live``: its topics' offsets, asked of the broker now."""
    start_dag = pipeline_dag_id(spec.name, "backfill")
    if not live:
        return NeverRan(spec.name, spec.qualified_target, spec.topics, start_dag)
    from reprocess.kafka.clients import make_admin
    from reprocess.kafka.offsets import take_snapshot

    kafka = kafka_config()
    # Asked by name, a broker with auto.create.topics.enable (Kafka's default) would create a missing topic.
    existing = make_admin(kafka).list_topics(timeout=15).topics
    if missing := [t for t in spec.topics if t not in existing]:
        problem = f"not on the broker yet: {', '.join(missing)}"
        return NeverRan(spec.name, spec.qualified_target, spec.topics, start_dag, (), problem)
    return NeverRan(
        spec.name, spec.qualified_target, spec.topics, start_dag, tuple(take_snapshot(kafka, spec, spec.topics))
    )


def spec_folder() -> tuple[list[PipelineSpec], list[BrokenSpec]]:
    """The pipelines folder's specs that load, and a finding per file that does not. No folder set
    leaves them out, saying so (the runs still print)."""
    try:
        folder = read_folder(pipelines_dir())
    except SettingError as exc:
        print(f"reprocess status: specs not read, pipelines that never ran are left out ({exc})", file=sys.stderr)
        return [], []
    return folder.specs, [BrokenSpec(str(path), str(error)) for path, error in folder.broken.items()]


def run(args: argparse.Namespace) -> int:
    """Per pipeline and partition: log start, ledger, log end (latest snapshot), lag, the run that
    last moved the ledger and the latest reconciliation verdict; then the calendar's gaps and healed
    windows. A pipeline that never ran: the DAG that starts it, with ``--live`` its backlog."""
    pipeline = args.pipeline
    loaded, broken = spec_folder()
    specs = {s.name: s for s in loaded}
    if pipeline is not None:  # a broken file is this pipeline's when its name is the file's
        broken = [b for b in broken if b.name == pipeline]
    engine = app_engine()
    with engine.connect() as conn:
        ran = coverage.pipeline_names(conn)
        never = [name for name in specs if name not in ran]
        if pipeline is not None:
            if pipeline not in ran and pipeline not in specs and not broken:
                known_text = ", ".join(sorted({*ran, *specs})) or "none"
                print(f"reprocess status: no pipeline named {pipeline!r} has run or has a spec in {pipelines_dir()}; "
                      f"known: {known_text}", file=sys.stderr)  # fmt: skip
                return EXIT_FOUND
            ran, never = [p for p in ran if p == pipeline], [p for p in never if p == pipeline]
        pipelines = coverage.overview(conn, ran)
        calendars = {p.name: coverage.calendar(conn, p.name) for p in pipelines}
        audits = {p.name: last_audit(conn, p.name) for p in pipelines}
    engine.dispose()
    waiting = [never_ran(specs[name], args.live) for name in never]
    if args.json:
        out = [
            {**p.as_dict(), "never_ran": False, "partitions": [x.as_dict() for x in p.partitions],
             "calendar": [c.as_dict() for c in calendars[p.name]], "last_audit": audits[p.name]}
            for p in pipelines
        ] + [w.as_dict() for w in waiting] + [b.as_dict() for b in broken]  # fmt: skip
        print(json.dumps(sorted(out, key=lambda p: p["name"]), indent=2, default=str))
        return _exit(pipelines, broken)
    texts = [
        (p.name, pipeline_status_text(p, calendars[p.name]) + "\n" + last_audit_text(p.name, audits[p.name]))
        for p in pipelines
    ]
    texts += [(w.name, never_ran_text(w)) for w in waiting]
    findings = [broken_spec_text(b) for b in broken]
    if texts or findings:
        print("\n\n".join([*(text for _, text in sorted(texts)), *findings]))
    return _exit(pipelines, broken)


def _exit(pipelines: list[coverage.PipelineOverview], broken: list[BrokenSpec]) -> int:
    """1 when a spec does not load or a pipeline's newest run failed (a check in a script sees it), else 0."""
    return EXIT_FOUND if broken or any(p.failed for p in pipelines) else EXIT_OK
