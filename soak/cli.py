"""``python -m soak [--minutes N]`` (``make soak SOAK_MINUTES=N``): set up, load and break for N
minutes, stop the load, let the pipelines catch up, check against the oracle, print the table.
Exit 0 when every check passed."""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from devstack import debezium, kafka_connect
from devstack.process import state_dir
from reprocess.core.names import pipeline_dag_id
from soak import cdc_load, json_load, monitor, oracle
from soak.chaos import Chaos
from soak.json_load import JsonProducer
from soak.report import Figures, render
from soak.scheduler import Airflow
from soak.specs import Names, write_specs

MARKER_ID = 999_999_999  # the source's last row: once the target has it, the connector streamed everything


@dataclass
class Setup:
    names: Names
    folder: Path
    bootstrap: str
    app_dsn: str
    airflow_dsn: str
    source_dsn: str

    @property
    def dag_ids(self) -> list[str]:
        return [pipeline_dag_id(p, k) for p in self.names.pipelines for k in ("incremental", "reconcile")]

    def log(self, pipeline: str) -> Path:
        return self.folder / f"{pipeline}.produced.jsonl"


def prepare(tag: str) -> tuple[Setup, dict[str, str]]:
    """Topics, the source table and its connector, the specs; returns the connector's config too."""
    names = Names.of(tag)
    folder = state_dir() / "soak" / tag
    write_specs(folder / "pipelines", names)
    setup = Setup(
        names, folder, f"127.0.0.1:{os.environ['REPROCESS_KAFKA_PORT']}", os.environ["AIRFLOW_CONN_REPROCESS_DB"],
        os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].replace("+psycopg2", ""), debezium.source_dsn(),
    )  # fmt: skip
    json_load.create_topic(setup.bootstrap, names.orders, 4)
    json_load.create_topic(setup.bootstrap, names.payments, 2)
    kafka_connect.start()
    debezium.ensure_source()
    cdc_load.create_table(setup.source_dsn, f"public.{names.customers}")
    config = debezium.connector_config(names.connector, [f"public.{names.customers}"], tag,
                                       **{"decimal.handling.mode": "string"})  # fmt: skip
    debezium.start(names.connector, config)
    return setup, config


def catch_up(setup: Setup, lags: monitor.LagMonitor, minutes: float) -> float:
    """Seconds until every pipeline's lag is 0, the source's marker row is in the target and no run is open."""
    started = time.monotonic()
    deadline = started + minutes * 60
    table = f"public.{setup.names.customers}"
    conn = monitor.connect_retrying(setup.source_dsn)
    with conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (%s, 'end of soak', 0, 'basic', NULL)", (MARKER_ID,))
    conn.close()
    while time.monotonic() < deadline:
        now = lags.sample()
        if now is not None and not any(now.values()):
            app = monitor.connect_retrying(setup.app_dsn)
            try:
                with app.cursor() as cur:
                    cur.execute(f"SELECT count(*) FROM public.{setup.names.customers} WHERE id = %s", (MARKER_ID,))
                    marker = cur.fetchone()[0]
                if marker and not oracle.open_runs(app, list(setup.names.pipelines)):
                    return time.monotonic() - started
            except Exception as exc:  # the target may not exist yet
                print(f"soak: catching up ({exc!s:.200})", flush=True)
            finally:
                app.close()
        print(f"soak: catching up, lag {now}", flush=True)
        time.sleep(10)
    return time.monotonic() - started


def checks(setup: Setup, lags: monitor.LagMonitor) -> list[oracle.Check]:
    """Every target against its oracle, runs left open, stuck DAG runs, lag, dead letters."""
    n = setup.names
    app, af, src = (monitor.connect_retrying(d) for d in (setup.app_dsn, setup.airflow_dsn, setup.source_dsn))
    try:
        out: list[oracle.Check] = []
        got, count = oracle.rows(app, f"public.{n.orders}", "order_id", ["status", "amount", "seq"])
        out += oracle.compare(n.orders, oracle.expected_orders(setup.log(n.orders)), got, count)
        got, count = oracle.rows(app, f"public.{n.payments}", "payment_id", ["status", "amount", "version"])
        out += oracle.compare(n.payments, oracle.expected_payments(setup.log(n.payments)), got, count)
        got, count = oracle.rows(app, f"public.{n.customers}", "id", ["name", "balance", "tier", "notes", "tier_label"])
        out += oracle.compare(n.customers, oracle.source_rows(src, f"public.{n.customers}"), got, count)
        for p in (n.orders, n.payments):
            bad, letters = oracle.malformed(setup.log(p)), oracle.dead_letters(app, p)
            out.append(oracle.Check(f"{p}: dead letters = malformed records", bad == letters, f"{letters} != {bad}"))
        letters = oracle.dead_letters(app, n.customers)
        out.append(oracle.Check(f"{n.customers}: 0 dead letters", letters == 0, f"{letters} dead letters"))
        left = oracle.open_runs(app, list(n.pipelines))
        out.append(oracle.Check("no run left planned/staged", not left, str(left[:5])))
        stuck = oracle.stuck_dag_runs(af, setup.dag_ids, 10)
        out.append(oracle.Check("no DAG run queued/running for 10+ minutes", not stuck, str(stuck[:5])))
        now = lags.sample()
        out.append(oracle.Check("lag back to 0", now is not None and not any(now.values()), str(now)))
        return out
    finally:
        for c in (app, af, src):
            c.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=30, help="minutes of load and faults (30)")
    parser.add_argument("--per-minute", type=int, default=3_000, help="records a minute per topic (3000)")
    parser.add_argument("--catch-up", type=float, default=20, help="minutes allowed to catch up afterwards (20)")
    parser.add_argument("--gap", type=float, nargs=2, default=(30.0, 90.0), metavar=("MIN", "MAX"),
                        help="seconds between faults, drawn uniformly (30 90)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=int(time.time()), help="the random choices' seed")
    args = parser.parse_args(argv)
    tag = "s" + datetime.now(UTC).strftime("%m%d%H%M")
    print(f"soak {tag}: {args.minutes:g} minutes, seed {args.seed}", flush=True)
    setup, config = prepare(tag)
    os.environ["REPROCESS_PIPELINES_DIR"] = str(setup.folder / "pipelines")
    airflow = Airflow(setup.folder / "airflow", int(os.environ.get("REPROCESS_UI_PORT", 18080)),
                      int(os.environ.get("REPROCESS_UI_WORKER_LOG_PORT", 18081)),
                      int(os.environ.get("REPROCESS_UI_TRIGGER_LOG_PORT", 18082)))  # fmt: skip
    n = setup.names
    producers = [
        JsonProducer(setup.bootstrap, n.orders, "orders", args.per_minute, setup.log(n.orders), args.seed),
        JsonProducer(setup.bootstrap, n.payments, "payments", args.per_minute, setup.log(n.payments), args.seed + 1),
    ]
    workload = cdc_load.CdcWorkload(setup.source_dsn, f"public.{n.customers}", args.per_minute, args.seed + 2)
    lags = monitor.LagMonitor(setup.app_dsn, setup.bootstrap, {p: n.topic(p) for p in n.pipelines})
    chaos = Chaos(airflow, n.connector, config, (args.gap[0], args.gap[1]), args.seed + 3)
    try:
        airflow.up()
        started = time.monotonic()
        for thread in (*producers, workload, lags, chaos):
            thread.start()
        while time.monotonic() - started < args.minutes * 60:
            time.sleep(5)
        print("soak: load and faults end; catching up", flush=True)
        chaos.stop()
        for producer in producers:
            producer.stop()
        workload.stop()
        caught = catch_up(setup, lags, args.catch_up)
        lags.stop()
        results = checks(setup, lags)
        app, af = monitor.connect_retrying(setup.app_dsn), monitor.connect_retrying(setup.airflow_dsn)
        runs = monitor.commits(app, list(n.pipelines))
        figures = Figures(
            minutes=args.minutes, pipelines=list(n.pipelines), runs=monitor.runs_by_state(app, list(n.pipelines)),
            dag_runs=monitor.dag_runs_by_state(af, setup.dag_ids),
            records={n.orders: producers[0].acked, n.payments: producers[1].acked, n.customers: workload.changes},
            dead_letters={p: oracle.dead_letters(app, p) for p in n.pipelines}, longest_lag=lags.longest,
            faults=chaos.faults, recoveries=[monitor.recovery_s(f.at, runs) for f in chaos.faults],
            mended=chaos.mended, catch_up_s=caught, checks=results,
            verdicts=monitor.reconcile_verdicts(app, list(n.pipelines)),
        )  # fmt: skip
        app.close()
        af.close()
    finally:
        airflow.down()
        debezium.remove(n.connector)  # its replication slot would keep the source's WAL forever
    table = render(figures)
    print(table)
    (setup.folder / "report.txt").write_text(table + "\n")
    return 0 if figures.passed else 1
