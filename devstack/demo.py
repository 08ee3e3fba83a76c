"""``reprocess demo``: produce the demo topics and run their backfills through Airflow (``airflow dags test``).

The topics are those of ``reprocess produce`` (devstack/produce.py); each backfill's summary is
printed from Postgres. With ``make demo`` also the CDC pipeline ``customers``, whose topic a real
Debezium connector streams (devstack/cdc_demo.py). Registered with the ``reprocess`` command
through the ``reprocess.commands`` entry point group (pyproject.toml).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from typing import Final

from sqlalchemy import Engine, text

from devstack.produce import add_orders_argument, produce
from reprocess.cli.common import EXIT_FOUND, EXIT_OK, app_engine, kafka_config
from reprocess.core.names import pipeline_dag_id
from reprocess.kafka.clients import make_admin

NAME: Final = "demo"
SUMMARY: Final = "produce the demo topics and run their backfills through Airflow (airflow dags test)"
DESCRIPTION: Final = ""
EXAMPLES: Final = (
    ("produce the demo topics and run the orders, payments and customers backfills", "reprocess demo"),
    ("a smaller demo", "reprocess demo --orders 2000"),
)


def configure(cmd: argparse.ArgumentParser) -> None:
    add_orders_argument(cmd)


def run(args: argparse.Namespace) -> int:
    return EXIT_OK if demo(args.orders) else EXIT_FOUND


def demo(orders: int) -> bool:
    """The demo topics, then each pipeline's backfill and summary; whether every run committed."""
    from devstack.airflow_db import prepare_airflow
    from devstack.cdc_demo import TOPIC as CDC_TOPIC

    started = time.monotonic()
    prepare_airflow()
    engine = app_engine()
    produce(orders)
    pipelines = ["orders", "payments"]
    if CDC_TOPIC in make_admin(kafka_config()).list_topics(timeout=10).topics:
        pipelines.append("customers")
    else:
        print(f"demo: no topic {CDC_TOPIC}; `python -m devstack.cdc_demo` streams it (make demo does)")
    ok = all(run_backfill(engine, name) for name in pipelines)
    print(f"demo wall time: {time.monotonic() - started:.1f} s")
    return ok


def run_backfill(engine: Engine, pipeline: str) -> bool:
    """``airflow dags test`` of a pipeline's backfill, then its summary from Postgres."""
    from reprocess.operations.summary import format_summary, run_summary

    dag_id = pipeline_dag_id(pipeline, "backfill")
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
