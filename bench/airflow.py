"""The product through a running Airflow: trigger over the REST API → committed.

``scripts/airflow_ui.py up`` (what ``make up`` runs: ``airflow standalone``, so a real
scheduler, DAG processor and LocalExecutor) is started for the case with only the case's spec
in ``REPROCESS_PIPELINES_DIR`` and the bench database as the app DB, and stopped afterwards.
The clock runs from the ``POST .../dagRuns`` to the moment the run's row in
``reprocess.runs`` reads ``committed``; the task instances' own start/end times split it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.context import REPO, Bench, Result
from bench.data import Dataset
from reprocess.core import names

log = logging.getLogger(__name__)

UI_SCRIPT = REPO / "scripts" / "airflow_ui.py"
ORDER = ("plan_offsets", "has_work", "spark_read_stage", "commit_transaction", "mirror_group_offsets", "report")


@dataclass
class Api:
    """A logged-in client of the Airflow REST API (``/auth/token`` of the simple auth manager)."""

    url: str
    token: str

    @classmethod
    def login(cls, url: str, password: str) -> Api:
        body = json.dumps({"username": "admin", "password": password}).encode()
        request = urllib.request.Request(f"{url}/auth/token", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as resp:
            return cls(url, json.load(resp)["access_token"])

    def call(self, path: str, body: dict[str, Any] | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}/api/v2{path}", data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.load(resp)


@contextlib.contextmanager
def running_airflow(bench: Bench, pipelines: str) -> Iterator[Api]:
    """``airflow_ui.py up`` with the bench's pipelines and database; ``down`` on exit."""
    from reprocess.postgres.db import libpq_url

    run_dir = bench.out / "airflow-ui"
    env = {**os.environ, "REPROCESS_PIPELINES_DIR": pipelines, "AIRFLOW_CONN_REPROCESS_DB": libpq_url(bench.db_url)}
    base = [sys.executable, str(UI_SCRIPT)]
    up = subprocess.run([*base, "up", "--run-dir", str(run_dir), "--no-schedule"], env=env, cwd=REPO,
                        capture_output=True, text=True, timeout=600)  # fmt: skip
    try:
        if up.returncode != 0 or "already running" in up.stdout:
            raise RuntimeError(
                f"the bench starts its own Airflow (its own specs and database); `make down` a running one first."
                f"\n{up.stdout}{up.stderr}"
            )
        url = re.search(r"Airflow UI: (\S+)", up.stdout)
        password = re.search(r"password: (\S+)", up.stdout)
        if not (url and password):
            raise RuntimeError(f"could not read the UI's URL and password from:\n{up.stdout}")
        yield Api.login(url.group(1), password.group(1))
    finally:
        subprocess.run([*base, "down", "--run-dir", str(run_dir)], env=env, cwd=REPO, capture_output=True, timeout=120)


def _when(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def breakdown(triggered: datetime, committed: datetime, tis: list[dict[str, Any]]) -> dict[str, float]:
    """trigger → committed split into each task's run time and the waits before it (the
    scheduler's loop, queueing, the task process's start), in DAG order.

    Examples
    --------
    >>> t = datetime(2026, 1, 1, tzinfo=UTC)
    >>> iso = lambda s: (t + timedelta(seconds=s)).isoformat()
    >>> tis = [{"task_id": "plan_offsets", "start_date": iso(2), "end_date": iso(3)},
    ...        {"task_id": "commit_transaction", "start_date": iso(4), "end_date": iso(6)}]
    >>> breakdown(t, t + timedelta(seconds=5), tis)
    {'wait before plan_offsets': 2.0, 'task plan_offsets': 1.0, 'wait before commit_transaction': 1.0, \
'task commit_transaction (until committed)': 1.0}
    """
    by_id = {ti["task_id"]: ti for ti in tis}
    out: dict[str, float] = {}
    previous = triggered
    for task_id in ORDER:
        ti = by_id.get(task_id)
        start, end = (_when(ti.get("start_date")), _when(ti.get("end_date"))) if ti else (None, None)
        if start is None or end is None:
            continue
        out[f"wait before {task_id}"] = (start - previous).total_seconds()
        if task_id == "commit_transaction":
            out[f"task {task_id} (until committed)"] = (committed - start).total_seconds()
            break
        out[f"task {task_id}"] = (end - start).total_seconds()
        previous = end
    return out


@dataclass
class Triggered:
    """One backfill run triggered and waited for: trigger → committed seconds, its task instances."""

    seconds: float
    phases: dict[str, float]
    dag_run_id: str


def trigger_and_wait(bench: Bench, api: Api, dag_id: str, deadline: float) -> Triggered:
    """``POST .../dagRuns`` with the trigger form's defaults (earliest → latest), then poll the
    run's row in ``reprocess.runs`` every 0.1 s until it reads ``committed``."""
    from reprocess.core.runs import RunState

    while True:  # the DAG processor parses the new spec's DAG file after start-up
        try:
            api.call(f"/dags/{dag_id}")
            break
        except urllib.error.HTTPError as exc:
            if exc.code != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    triggered = datetime.now(UTC)
    started = time.monotonic()
    run = api.call(f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": {}})
    run_path = f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}"
    run_key = names.run_key(dag_id, run["dag_run_id"])
    conn = bench.connect()
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for polls in itertools.count():
                cur.execute("SELECT state FROM reprocess.runs WHERE run_id = %s", (run_key,))
                row = cur.fetchone()
                if row and row[0] == RunState.COMMITTED:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{run_key} not committed in time (state {row})")
                # every 2 s, whether the run failed (then it will never commit)
                if polls % 20 == 19 and api.call(run_path)["state"] == "failed":
                    raise RuntimeError(f"{run_key} failed; see its task logs in the Airflow UI's log folder")
                time.sleep(0.1)
    finally:
        conn.close()
    seconds = time.monotonic() - started
    while api.call(run_path)["state"] not in ("success", "failed") and time.monotonic() < deadline:
        time.sleep(0.5)
    tis = api.call(f"{run_path}/taskInstances")["task_instances"]
    return Triggered(seconds, breakdown(triggered, triggered + timedelta(seconds=seconds), tis), run["dag_run_id"])


def product_airflow(bench: Bench, ds: Dataset, label: str = "airflow_1k", timeout: float = 900) -> Result:
    """A 1,000-record backfill through ``make up``'s Airflow, triggered over the REST API the
    way the UI's trigger button does. A first run (another spec on the same data) warms the
    freshly started Airflow (its first task process pays a one-off ~10 s start); the second is
    the measured one, a run on an Airflow that has been up for a while."""
    folder = bench.out / f"{label}_pipelines"
    first_spec = bench.spec(f"{label}_first", ds.topic, folder)
    spec = bench.spec(label, ds.topic, folder)
    with running_airflow(bench, str(folder)) as api:
        deadline = time.monotonic() + timeout
        first = trigger_and_wait(bench, api, first_spec.dag_id("backfill"), deadline)
        run = trigger_and_wait(bench, api, spec.dag_id("backfill"), deadline)
    return Result(
        f"product through a running Airflow: trigger → committed ({label})",
        ds.records,
        run.seconds,
        run.phases,
        {"dag_run_id": run.dag_run_id, "first_run_after_start_s": round(first.seconds, 2),
         "first_run_phases": first.phases, **bench.fingerprint(spec)},
    )  # fmt: skip
