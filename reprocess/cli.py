"""Command line: ``python -m reprocess.cli demo`` runs the main job on the embedded default;
``python -m reprocess.cli produce`` only fills the demo topics;
``python -m reprocess.cli reset PIPELINE --to-… [--execute]`` moves a pipeline's ledger deliberately;
``status [PIPELINE] [--json]`` prints each partition's coverage, as ``kafka-consumer-groups
--describe`` prints a group's lag; ``redrive PIPELINE [--kind K] [--run R]`` prints the backfill
confs that re-read a pipeline's open dead letters.

The demo creates topics ``orders`` (4 partitions: order events with several updates per order,
malformed messages, transactional batches that leave marker gaps) and ``payments`` (2
partitions: versioned events, some out of order), runs both backfills through Airflow
(``airflow dags test``) and prints each run's summary from Postgres.
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
from typing import Any

from sqlalchemy import Engine, text

from reprocess.core.errors import ReprocessError
from reprocess.core.spec import pipeline_dag_id
from reprocess.kafka import demo_data
from reprocess.kafka.clients import config_from_env, make_admin
from reprocess.operations import coverage, redrive
from reprocess.operations.summary import format_summary, run_summary
from reprocess.postgres.db import make_engine, migrate

log = logging.getLogger("reprocess.cli")


def airflow(*args: str) -> None:
    subprocess.run(["airflow", *args], check=True, stdout=subprocess.DEVNULL)


def prepare_airflow() -> None:
    """Metadata DB and the Spark pool (both idempotent)."""
    airflow("db", "migrate")
    airflow("pools", "set", "spark", "1", "Spark jobs of the reprocessing pipelines")


PAYMENT_TAIL = {"payment_id": "{key}", "order_id": "o-tail", "status": "authorized", "amount": "1.00", "version": 1}


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
        produced["payments"] = len(
            demo_data.produce(kafka, "payments", 2, events, malformed=(), tail_event=PAYMENT_TAIL).messages
        )
    return produced


def produce(orders: int) -> None:
    """The demo topics, created and filled once (also the compose stack's demo producer)."""
    for topic, count in ensure_demo_topics(orders).items():
        print(f"produced {count} messages to topic {topic}")


def demo(orders: int) -> int:
    started = time.monotonic()
    prepare_airflow()
    engine = make_engine(os.environ["AIRFLOW_CONN_REPROCESS_DB"])
    migrate(engine)
    produce(orders)
    ok = all(run_backfill(engine, name) for name in ("orders", "payments"))
    print(f"demo wall time: {time.monotonic() - started:.1f} s")
    return 0 if ok else 1


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
    from reprocess.core.spec import find_spec
    from reprocess.operations.reset import ResetMode, ResetRequest, execute_reset, format_reset, plan_reset

    spec = find_spec(args.pipeline)
    mode, value = next((m, v) for m in ResetMode if (v := getattr(args, m.value.replace("-", "_"))) is not None)
    request = ResetRequest(
        mode, None if isinstance(value, bool) else str(value), tuple(args.topic or ()), tuple(args.partitions or ())
    )
    engine = make_engine(os.environ["AIRFLOW_CONN_REPROCESS_DB"])
    migrate(engine)
    kafka = config_from_env()
    if args.execute:
        rows = execute_reset(engine, kafka, spec, request, reason=args.reason or "", requested_by=args.by)
    else:
        rows = plan_reset(engine, kafka, spec, request)
    print(format_reset(spec, request, rows, executed=args.execute))
    return 0


def _reset_parser(sub: Any) -> None:
    import getpass

    cmd = sub.add_parser(
        "reset",
        help="move a pipeline's ledger (dry run unless --execute), like kafka-consumer-groups --reset-offsets",
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


STATUS_COLUMNS = ("TOPIC", "PARTITION", "LOG-START", "LEDGER", "LOG-END", "LAG", "LAST-RUN", "RECONCILED")


def status(pipeline: str | None, as_json: bool) -> int:
    """Per pipeline and partition: log start, ledger, log end (latest snapshot), lag, the run that
    last moved the ledger and the latest reconciliation verdict; the page's own queries."""
    engine = make_engine(os.environ["AIRFLOW_CONN_REPROCESS_DB"])
    migrate(engine)
    with engine.connect() as conn:
        known = coverage.pipeline_names(conn)
        if pipeline is not None and pipeline not in known:
            known_text = ", ".join(known) or "none"
            print(f"status: no pipeline named {pipeline!r} has run; known: {known_text}", file=sys.stderr)
            return 1
        pipelines = coverage.overview(conn, [pipeline] if pipeline else known)
    engine.dispose()
    if as_json:
        out = [{**p.as_dict(), "partitions": [x.as_dict() for x in p.partitions]} for p in pipelines]
        print(json.dumps(out, indent=2))
        return 0
    for i, p in enumerate(pipelines):
        last = p.last_committed_at.isoformat(timespec="seconds") if p.last_committed_at else "never"
        print(
            ("\n" if i else "") + f"PIPELINE {p.name} (target {p.target_table}; last commit {last}; lag {p.lag}; "
            f"dead letters 24h {p.dead_letters_day}; retention {p.risk})"
        )
        rows = [
            (x.topic, x.partition, x.log_start, x.ledger, x.log_end, x.lag, x.ledger_run,
             f"{x.verdict} {x.verdict_window.date()}" if x.verdict and x.verdict_window else None)
            for x in p.partitions
        ]  # fmt: skip
        print(_table(STATUS_COLUMNS, rows))
    return 0


def redrive_command(pipeline: str, kind: str | None, run_id: str | None, max_gap: int, as_json: bool) -> int:
    """The backfill confs that re-read the open dead letters, and the commands that trigger them."""
    engine = make_engine(os.environ["AIRFLOW_CONN_REPROCESS_DB"])
    migrate(engine)
    with engine.connect() as conn:
        plan = redrive.plan_redrive(conn, pipeline, kind, run_id, max_gap)
    engine.dispose()
    if as_json:
        print(json.dumps(plan.as_dict(), indent=2))
        return 0
    what = "".join([f" of kind {kind!r}" if kind else "", f" of run {run_id}" if run_id else ""])
    if not plan.confs:
        print(f"redrive {pipeline}: no open dead letters{what}; nothing to redrive")
        return 0
    print(f"redrive {pipeline}: {plan.dead_letters} open dead letters{what} in {len(plan.ranges)} ranges "
          f"-> {len(plan.confs)} backfill run(s):")  # fmt: skip
    for conf in plan.confs:
        print(f"airflow dags trigger {pipeline_dag_id(pipeline, 'backfill')} --conf '{json.dumps(conf)}'")
    return 0


def _table(header: tuple[str, ...], rows: Sequence[tuple[object, ...]]) -> str:
    """Left-aligned columns separated by two spaces; ``None`` prints as ``-``."""
    cells = [header, *(tuple("-" if v is None else str(v) for v in row) for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reprocess.cli", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo_cmd = sub.add_parser("demo", help="produce demo data and run the orders backfill through Airflow")
    demo_cmd.add_argument("--orders", type=int, default=20_000, help="distinct orders to produce (default 20000)")
    produce_cmd = sub.add_parser("produce", help="only create and fill the demo topics (no Airflow, no Spark)")
    produce_cmd.add_argument("--orders", type=int, default=20_000, help="distinct orders to produce (default 20000)")
    _reset_parser(sub)
    status_cmd = sub.add_parser("status", help="coverage and lag per partition (like kafka-consumer-groups)")
    status_cmd.add_argument("pipeline", nargs="?", help="one pipeline (default: all)")
    status_cmd.add_argument("--json", action="store_true", help="machine-readable output")
    redrive_cmd = sub.add_parser("redrive", help="backfill confs that re-read a pipeline's open dead letters")
    redrive_cmd.add_argument("pipeline")
    redrive_cmd.add_argument("--kind", help="only this error kind (as the page's filter shows it)")
    redrive_cmd.add_argument("--run", help="only the dead letters of this run id")
    redrive_cmd.add_argument(
        "--max-gap", type=int, default=redrive.DEFAULT_MAX_GAP, help="join ranges this close (offsets)"
    )
    redrive_cmd.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.command == "demo":
        return demo(args.orders)
    if args.command == "produce":
        produce(args.orders)
        return 0
    if args.command == "reset":
        try:
            return reset(args)
        except ReprocessError as exc:
            print(f"reset failed: {exc}", file=sys.stderr)
            return 1
    if args.command == "status":
        return status(args.pipeline, args.json)
    if args.command == "redrive":
        return redrive_command(args.pipeline, args.kind, args.run, args.max_gap, args.json)
    return 2


if __name__ == "__main__":
    sys.exit(main())
