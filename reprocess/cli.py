"""Command line: ``python -m reprocess.cli demo`` runs the main job on the embedded default.

The demo creates topic ``orders`` (4 partitions), produces order events (several updates per
order, malformed messages, transactional batches that leave marker gaps), runs the orders
backfill through Airflow (``airflow dags test``) and prints the run's summary from Postgres.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import text

from reprocess import demo_data
from reprocess.db import make_engine, migrate
from reprocess.kafka import config_from_env, make_admin
from reprocess.spec import PipelineSpec
from reprocess.summary import format_summary, run_summary

log = logging.getLogger("reprocess.cli")
REPO = Path(__file__).resolve().parent.parent


def airflow(*args: str) -> None:
    subprocess.run(["airflow", *args], check=True, stdout=subprocess.DEVNULL)


def prepare_airflow() -> None:
    """Metadata DB and the Spark pool (both idempotent)."""
    airflow("db", "migrate")
    airflow("pools", "set", "spark", "1", "Spark jobs of the reprocessing pipelines")


def ensure_demo_topic(orders: int, partitions: int = 4) -> int:
    """Create and fill ``orders`` once; a second demo replays the same data (a no-op merge)."""
    kafka = config_from_env()
    if "orders" in make_admin(kafka).list_topics(timeout=10).topics:
        log.info("topic orders exists: replaying its data")
        return 0
    demo_data.create_topic(kafka, "orders", partitions)
    produced = demo_data.produce(
        kafka, "orders", partitions, demo_data.order_events(orders, 5), transactional_every=5_000
    )
    return len(produced.messages)


def demo(orders: int) -> int:
    started = time.monotonic()
    prepare_airflow()
    engine = make_engine(os.environ["AIRFLOW_CONN_REPROCESS_DB"])
    migrate(engine)
    produced = ensure_demo_topic(orders)
    if produced:
        print(f"produced {produced} messages to topic orders (4 partitions)")
    dag_id = "reprocess_orders_backfill"
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
        return 1
    spec = PipelineSpec.from_file(REPO / "pipelines" / "orders.yaml")
    summary = run_summary(engine, spec.name, run_id)
    print()
    print(format_summary(summary))
    print()
    print(f"airflow dags test: {airflow_seconds:.1f} s; demo wall time: {time.monotonic() - started:.1f} s")
    return 0 if summary["state"] == "committed" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reprocess.cli", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo_cmd = sub.add_parser("demo", help="produce demo data and run the orders backfill through Airflow")
    demo_cmd.add_argument("--orders", type=int, default=20_000, help="distinct orders to produce (default 20000)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.command == "demo":
        return demo(args.orders)
    return 2


if __name__ == "__main__":
    sys.exit(main())
