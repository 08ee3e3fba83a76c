"""The ``reprocess`` command (``python -m reprocess.cli`` runs the same).

``reprocess demo`` produces the demo topics and runs their backfills through Airflow;
``reprocess produce`` only fills the demo topics; ``reprocess status [PIPELINE]`` prints each
partition's coverage, as ``kafka-consumer-groups --describe`` prints a group's lag;
``reprocess reset PIPELINE --to-…`` moves a pipeline's ledger deliberately (dry run unless
``--execute``); ``reprocess redrive PIPELINE`` prints the backfill confs that re-read a pipeline's
open dead letters; ``reprocess validate [SPEC…]`` checks spec files offline and against the broker,
Spark and the target table. Exit codes: see :data:`EXIT_CODES`.

The demo creates topics ``orders`` (4 partitions: order events with several updates per order,
malformed messages, transactional batches that leave marker gaps) and ``payments`` (2
partitions: versioned events, some out of order), runs both backfills through Airflow
(``airflow dags test``) and prints each run's summary from Postgres; with ``make demo`` also the
CDC pipeline ``customers``, whose topic a real Debezium connector streams (devstack/cdc_demo.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

from confluent_kafka import KafkaException
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from reprocess.core.errors import ConnectionConfigError, ReprocessError
from reprocess.core.names import pipeline_dag_id
from reprocess.core.spec_catalog import pipelines_dir
from reprocess.kafka import demo_data
from reprocess.kafka.clients import config_from_env, make_admin
from reprocess.operations import coverage, redrive
from reprocess.operations.summary import format_summary, run_summary
from reprocess.postgres.db import make_engine, migrate

log = logging.getLogger("reprocess.cli")

EXIT_OK: Final = 0
EXIT_FOUND: Final = 1  # the command ran and found a problem: a failed run, an invalid spec, an unknown pipeline
EXIT_USAGE: Final = 2  # the command line itself is wrong (argparse's own code)
EXIT_UNREACHABLE: Final = 3  # a setting is missing or a service (Postgres, Kafka, Spark) did not answer
EXIT_CODES: Final = (
    f"exit codes: {EXIT_OK} done (validate: no problem), {EXIT_FOUND} a problem was found (a failed run, an "
    f"invalid spec, an unknown pipeline, a refused reset), {EXIT_USAGE} wrong usage, {EXIT_UNREACHABLE} a setting "
    "is missing or a service did not answer"
)
APP_DB_ENV: Final = "AIRFLOW_CONN_REPROCESS_DB"
SPARK_POOL_SLOTS: Final = 2  # the default size of Airflow's ``spark`` pool: see prepare_airflow


def app_db_url() -> str:
    """The app database, from the environment form of Airflow's ``reprocess_db`` connection."""
    url = os.environ.get(APP_DB_ENV)
    if not url:
        raise ConnectionConfigError(
            f"{APP_DB_ENV} is not set: export it as the app database's URL "
            "(postgresql://USER:PASSWORD@HOST:PORT/DB, the reprocess_db connection), or `source scripts/env.sh`"
        )
    return url


def app_engine() -> Engine:
    """An engine on the migrated app database."""
    engine = make_engine(app_db_url())
    migrate(engine)
    return engine


# The demo's CDC pipeline (pipelines/customers.yaml) reads what devstack/cdc_demo.py streams.
CDC_TOPIC: Final = "demo.public.customers"


def prepare_airflow(slots: int = SPARK_POOL_SLOTS) -> None:
    """Metadata DB and the Spark pool (both idempotent), what ``airflow db migrate`` and ``airflow
    pools set`` do, in this process: each command would import Airflow again (~3 s of CPU).
    Two slots: on the one Connect server two runs at once gave 1.3× one run's records/s, four no
    more than two while each run took 2.7× as long (``make bench``, docs/performance.md)."""
    from airflow.models.pool import Pool
    from airflow.utils.db import upgradedb

    # Airflow's migration logs each of its steps at INFO; the CLI's output went to /dev/null.
    quiet = [logging.getLogger(name) for name in ("alembic", "airflow.utils.db")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.WARNING)
    try:
        upgradedb()
        Pool.create_or_update_pool("spark", slots, "Spark jobs of the reprocessing pipelines", include_deferred=False)
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)


def ensure_demo_topics(orders: int, partitions: int = 4) -> dict[str, int]:
    """Create and fill ``orders`` and ``payments`` once; a second demo replays the same data."""
    kafka = config_from_env()
    existing = make_admin(kafka).list_topics(timeout=10).topics
    produced = {}
    if "orders" not in existing:
        demo_data.create_topic(kafka, "orders", partitions)
        events = demo_data.order_events(orders, 5)
        produced["orders"] = len(
            demo_data.produce(kafka, "orders", partitions, events, transactional_every=5_000).messages
        )
    if "payments" not in existing:
        demo_data.create_topic(kafka, "payments", 2)
        events = demo_data.payment_events(max(1, orders // 4))
        produced["payments"] = len(demo_data.produce(kafka, "payments", 2, events, malformed=()).messages)
    return produced


def produce(orders: int) -> None:
    """The demo topics, created and filled once (also the compose stack's demo producer)."""
    for topic, count in ensure_demo_topics(orders).items():
        print(f"produced {count} messages to topic {topic}")


def demo(orders: int) -> int:
    started = time.monotonic()
    prepare_airflow()
    engine = app_engine()
    produce(orders)
    pipelines = ["orders", "payments"]
    if CDC_TOPIC in make_admin(config_from_env()).list_topics(timeout=10).topics:
        pipelines.append("customers")
    else:
        print(f"demo: no topic {CDC_TOPIC}; `python -m devstack.cdc_demo` streams it (make demo does)")
    ok = all(run_backfill(engine, name) for name in pipelines)
    print(f"demo wall time: {time.monotonic() - started:.1f} s")
    return EXIT_OK if ok else EXIT_FOUND


def run_backfill(engine: Engine, pipeline: str) -> bool:
    """``airflow dags test`` of a pipeline's backfill, then its summary from Postgres."""
    dag_id = f"reprocess_{pipeline}_backfill"
    t0 = time.monotonic()
    result = subprocess.run(["airflow", "dags", "test", dag_id], capture_output=True, text=True)
    airflow_seconds = time.monotonic() - t0
    with engine.connect() as conn:
        run_id = conn.execute(
            text("SELECT run_id FROM reprocess.runs WHERE dag_id = :d ORDER BY created_at DESC LIMIT 1"),
            {"d": dag_id},
        ).scalar()
    if result.returncode != 0 or run_id is None:
        sys.stderr.write(result.stdout[-6000:] + result.stderr[-6000:])
        print(f"demo: airflow dags test {dag_id} failed (exit {result.returncode})", file=sys.stderr)
        return False
    summary = run_summary(engine, pipeline, run_id)
    print()
    print(format_summary(summary))
    print(f"\nairflow dags test {dag_id}: {airflow_seconds:.1f} s")
    return summary["state"] == "committed"


def reset(args: argparse.Namespace) -> int:
    """Dry run by default: print current → new per partition; ``--execute`` applies and audits."""
    from reprocess.core.spec_catalog import find_spec
    from reprocess.operations.reset import ResetMode, ResetRequest, execute_reset, format_reset, plan_reset

    spec = find_spec(args.pipeline)
    mode, value = next((m, v) for m in ResetMode if (v := getattr(args, m.value.replace("-", "_"))) is not None)
    request = ResetRequest(
        mode, None if isinstance(value, bool) else str(value), tuple(args.topic or ()), tuple(args.partitions or ())
    )
    engine = app_engine()
    kafka = config_from_env()
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


def _reset_parser(sub: Any) -> None:
    import getpass

    cmd = sub.add_parser(
        "reset",
        help="move a pipeline's ledger (dry run unless --execute), like kafka-consumer-groups --reset-offsets",
        description="Move a pipeline's ledger (dry run unless --execute), like kafka-consumer-groups "
        "--reset-offsets. Prints current -> new per partition and what the next incremental run would read.",
        epilog=EXIT_CODES,
    )
    cmd.add_argument("pipeline", help="pipeline name (the spec's name)")
    to = cmd.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", default=None, help="the log start of each partition")
    to.add_argument("--to-latest", action="store_true", default=None, help="the log end (skips everything unread)")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N on every selected partition (clamped)")
    to.add_argument(
        "--to-datetime", metavar="TS", help="first record at/after an RFC 3339 time, e.g. 2026-11-01T00:00Z"
    )
    to.add_argument("--shift-by", type=int, metavar="N", help="move each position by N (negative: re-read N offsets)")
    cmd.add_argument("--topic", action="append", help="only this topic (repeatable); default: all of the pipeline's")
    cmd.add_argument("--partitions", type=lambda v: [int(p) for p in v.split(",")], help="e.g. 0,2; default: all")
    run = cmd.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="print the plan, change nothing (the default)")
    run.add_argument("--execute", action="store_true", help="apply under the pipeline's lock and record it")
    cmd.add_argument("--reason", help="why (required with --execute; stored in reprocess.ledger_resets)")
    cmd.add_argument("--by", default=getpass.getuser(), help="who asks (default: the OS user)")
    cmd.add_argument("--json", action="store_true", help="machine-readable output (one object per partition)")


STATUS_COLUMNS = ("TOPIC", "PARTITION", "LOG-START", "LEDGER", "LOG-END", "LAG", "LAST-RUN", "RECONCILED")


def status(pipeline: str | None, as_json: bool) -> int:
    """Per pipeline and partition: log start, ledger, log end (latest snapshot), lag, the run that
    last moved the ledger and the latest reconciliation verdict; then the calendar's gaps and healed
    windows. The page's own queries."""
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
    if as_json:
        out = [
            {**p.as_dict(), "partitions": [x.as_dict() for x in p.partitions],
             "calendar": [c.as_dict() for c in calendars[p.name]]}
            for p in pipelines
        ]  # fmt: skip
        print(json.dumps(out, indent=2))
        return EXIT_OK
    for i, p in enumerate(pipelines):
        last = p.last_committed_at.isoformat(timespec="seconds") if p.last_committed_at else "never"
        print(
            ("\n" if i else "") + f"PIPELINE {p.name} (target {p.target_table}; last commit {last}; lag {p.lag}; "
            f"dead letters 24h {p.dead_letters_day}; retention {p.risk})"
        )
        if p.values_incomplete:
            print(
                f"  {p.values_incomplete} incomplete values: left out by the connector and known nowhere, NULL in the "
                "target (reprocess.incomplete_values; fix: REPLICA IDENTITY FULL on the source table, a new snapshot)"
            )
        rows = [
            (x.topic, x.partition, x.log_start, x.ledger, x.log_end, x.lag, x.ledger_run,
             f"{x.verdict} {x.verdict_window.date()}" if x.verdict and x.verdict_window else None)
            for x in p.partitions
        ]  # fmt: skip
        print(_table(STATUS_COLUMNS, rows))
        print(_calendar_text(calendars[p.name]))
    return EXIT_OK


def _calendar_text(cells: Sequence[coverage.CalendarCell]) -> str:
    """The calendar in a few lines: counts per verdict, then each gap and each healed window."""
    if not cells:
        return "RECONCILIATION: no window checked yet"
    counts = {v: sum(c.verdict == v for c in cells) for v in ("ok", "healed", "gap")}
    lines = [f"RECONCILIATION ({len({c.window_start for c in cells})} windows): "
             + ", ".join(f"{n} {v}" for v, n in counts.items())]  # fmt: skip
    for c in cells:
        where = f"  {c.window_start.date()} {c.topic}[{c.partition}]"
        if c.verdict == "gap":
            lines.append(f"{where} gap: {c.detail}")
        elif c.verdict == "healed":
            found = c.gap_checked_at.isoformat(timespec="seconds") if c.gap_checked_at else "?"
            lines.append(f"{where} healed by {c.healed_by or 'a later run'} (gap found {found}: {c.gap_detail})")
    return "\n".join(lines)


def redrive_command(pipeline: str, kind: str | None, run_id: str | None, max_gap: int, as_json: bool) -> int:
    """The backfill confs that re-read the open dead letters, and the commands that trigger them."""
    engine = app_engine()
    with engine.connect() as conn:
        plan = redrive.plan_redrive(conn, pipeline, kind, run_id, max_gap)
    engine.dispose()
    if as_json:
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


def validate_command(paths: list[str], online: bool, sample: int, as_json: bool) -> int:
    """Every problem of every spec, each with its fix; online also the broker, a decoded sample and the table."""
    from reprocess.operations.validate import format_findings, validate_offline, validate_online

    report = validate_offline([Path(p) for p in paths] or [pipelines_dir()])
    if online:
        from contextlib import ExitStack

        from reprocess.core.sample import SampleRecord, SampleResult
        from reprocess.core.spec import PipelineSpec
        from reprocess.kafka.registry import registry_from_env
        from reprocess.spark.sample import decode_sample, session_from_env

        engine, kafka = make_engine(app_db_url()), config_from_env()
        with ExitStack() as stack:
            sessions: list[Any] = []

            def decode(spec: PipelineSpec, records: Sequence[SampleRecord]) -> SampleResult:
                """Spark starts only when a topic has records to decode."""
                if not sessions:
                    sessions.append(stack.enter_context(session_from_env()))
                return decode_sample(sessions[0], spec, records, registry_from_env(spec))

            for spec in report.specs:
                report.findings.extend(validate_online(spec, kafka, engine, decode, sample))
        engine.dispose()
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(format_findings(report))
    return EXIT_FOUND if report.errors else EXIT_OK


def _table(header: tuple[str, ...], rows: Sequence[tuple[object, ...]]) -> str:
    """Left-aligned columns separated by two spaces; ``None`` prints as ``-``."""
    cells = [header, *(tuple("-" if v is None else str(v) for v in row) for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reprocess",
        description="Exactly-once Kafka -> PostgreSQL reprocessing: inspect, move and check pipelines.",
        epilog=EXIT_CODES,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, description: str = "") -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=description or summary, epilog=EXIT_CODES)

    demo_cmd = command("demo", "produce the demo topics and run their backfills through Airflow (airflow dags test)")
    demo_cmd.add_argument("--orders", type=int, default=20_000, help="distinct orders to produce (default 20000)")
    produce_cmd = command("produce", "only create and fill the demo topics (no Airflow, no Spark)")
    produce_cmd.add_argument("--orders", type=int, default=20_000, help="distinct orders to produce (default 20000)")
    status_cmd = command(
        "status",
        "coverage and lag per partition (like kafka-consumer-groups --describe)",
        "Per pipeline and partition: log start, ledger, log end (latest snapshot), lag, the run that last moved "
        "the ledger and the latest reconciliation verdict. Reads Postgres only.",
    )
    status_cmd.add_argument("pipeline", nargs="?", help="one pipeline (default: all)")
    status_cmd.add_argument("--json", action="store_true", help="machine-readable output")
    _reset_parser(sub)
    redrive_cmd = command(
        "redrive",
        "backfill confs that re-read a pipeline's open dead letters",
        "The fewest backfill confs that re-read exactly the offsets of the open dead letters, and the "
        "`airflow dags trigger` commands that run them.",
    )
    redrive_cmd.add_argument("pipeline")
    redrive_cmd.add_argument("--kind", help="only this error kind (as the page's filter shows it)")
    redrive_cmd.add_argument("--run", help="only the dead letters of this run id")
    redrive_cmd.add_argument(
        "--max-gap", type=int, default=redrive.DEFAULT_MAX_GAP, help="join ranges this close (offsets)"
    )
    redrive_cmd.add_argument("--json", action="store_true", help="machine-readable output")
    validate_cmd = command(
        "validate",
        "check spec files: schema and rules offline; topics, a decoded sample and the target table online",
        "Check pipeline specs and print every problem with its fix. Offline: the JSON Schema shipped in the "
        "package (reprocess/core/spec.schema.json, usable by editors) and the spec rules. Online (unless "
        "--offline): the topics exist (partition counts), a sample of records decodes by the Spark job's rules and "
        "carries the key and ordering fields, the target table takes the spec in place or what mode=rebuild "
        "would change.",
    )
    validate_cmd.add_argument(
        "specs", nargs="*", metavar="SPEC", help="spec files or folders (default: the pipelines folder)"
    )
    validate_cmd.add_argument("--offline", action="store_true", help="no broker, Spark or database: files only")
    validate_cmd.add_argument(
        "--sample", type=int, default=100, help="newest records per partition to decode (default 100)"
    )
    validate_cmd.add_argument("--json", action="store_true", help="machine-readable output (one object per finding)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        return _dispatch(args)
    except (ConnectionConfigError, OperationalError, KafkaException) as exc:
        print(f"reprocess {args.command}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except ReprocessError as exc:
        print(f"reprocess {args.command}: {exc}", file=sys.stderr)
        return EXIT_FOUND
        print(f"reprocess {args.command}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        return demo(args.orders)
    if args.command == "produce":
        produce(args.orders)
        return EXIT_OK
    if args.command == "reset":
        return reset(args)
    if args.command == "status":
        return status(args.pipeline, args.json)
    if args.command == "redrive":
        return redrive_command(args.pipeline, args.kind, args.run, args.max_gap, args.json)
    return validate_command(args.specs, not args.offline, args.sample, args.json)


if __name__ == "__main__":
    sys.exit(main())
