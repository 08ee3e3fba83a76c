"""Asset events on a running scheduler: a DAG scheduled on a pipeline's table runs after a committed
backfill and reads the event's extra; a dry run emits no event and starts nothing.

One ``airflow standalone`` (``scripts/airflow_ui.py up``, scheduling on: asset-triggered runs are
created by the same scheduler loop as scheduled ones) parses a DAG folder of this test's own: the
product's two-line DAG file over one spec, and a downstream DAG written here with the table's URI
spelled from the ``reprocess_db`` connection by this test (no product code). Every DAG is paused at
creation; the test unpauses only the backfill and the downstream DAG.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from devstack.process import free_port
from reprocess.kafka import demo_data
from tests.support import airflow_http, oracle
from tests.support.helpers import orders_spec

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow")]

REPO = Path(__file__).resolve().parents[2]
UI_SCRIPT = REPO / "scripts" / "airflow_ui.py"
RUN_TIMEOUT_S = 240
PIPELINES_DAG = "from reprocess.airflow.factory import dags_from_specs\n\nglobals().update(dags_from_specs())\n"
DOWNSTREAM_DAG = '''"""Scheduled on the table's Asset: returns the extras of the events that triggered it."""
from airflow.sdk import DAG, Asset, task

with DAG(dag_id={dag_id!r}, schedule=[Asset({uri!r})], catchup=False):

    @task
    def read_extra(triggering_asset_events=None):
        return [event.extra for events in triggering_asset_events.values() for event in events]

    read_extra()
'''


def _table_uri(schema: str, table: str) -> str:
    """The Postgres provider's form of the table, from the connection URL (port 5432 when none)."""
    url = urllib.parse.urlsplit(os.environ["AIRFLOW_CONN_REPROCESS_DB"])
    return f"postgres://{url.hostname}:{url.port or 5432}{url.path}/{schema}/{table}"


class Api:
    def __init__(self, url: str, password: str, log: Path) -> None:
        self.url, self.log = url, log
        self.token = airflow_http.token(url, "admin", password)

    def call(self, method: str, path: str, payload: Any = None, ok: tuple[int, ...] = (200, 201)) -> Any:
        status, body, _ = airflow_http.response(self.url, path, self.token, method, payload)
        assert status in ok, (method, path, status, body[:1000])
        return json.loads(body) if status in (200, 201) else None

    def wait(self, done: Any, what: str, timeout: float = RUN_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
                pytest.fail(f"{what}: not within {timeout:.0f} s; airflow standalone's log ends:\n{tail}")
            time.sleep(2)

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns")["dag_runs"])

    def finished_run(self, dag_id: str, conf: dict[str, Any]) -> dict[str, Any]:
        run = self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
        path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run['dag_run_id'], safe='')}"
        self.wait(lambda: self.call("GET", path)["state"] in ("success", "failed"), f"{dag_id} {conf}")
        return dict(self.call("GET", path))

    def asset_events(self, uri: str) -> list[dict[str, Any]]:
        assets = self.call("GET", "/api/v2/assets?" + urllib.parse.urlencode({"uri_pattern": uri}))["assets"]
        asset = next(a for a in assets if a["uri"] == uri)
        return list(self.call("GET", f"/api/v2/assets/events?asset_id={asset['id']}")["asset_events"])


def test_a_committed_backfill_triggers_the_tables_consumers_with_its_extra_and_a_dry_run_none(
    kafka_config, unique_name, tmp_path, monkeypatch
):
    started = time.monotonic()
    dags, specs = tmp_path / "dags", tmp_path / "specs"
    dags.mkdir()
    specs.mkdir()
    monkeypatch.setenv("REPROCESS_PIPELINES_DIR", str(specs))
    spec = orders_spec(unique_name, unique_name, max_dead_letter_ratio=0.5)  # the 6 malformed messages land
    demo_data.create_topic(kafka_config, unique_name, 1)
    produced = demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(8, 2, seed=40))
    uri = _table_uri(spec.target_schema, spec.target_table)
    consumer = f"consumer_{unique_name}"
    (dags / "pipelines.py").write_text(PIPELINES_DAG)
    (dags / "downstream.py").write_text(DOWNSTREAM_DAG.format(dag_id=consumer, uri=uri))

    run_dir = Path(os.environ["REPROCESS_STATE_DIR"]) / "airflow-assets-test"
    env = {
        **os.environ,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",  # nothing of this folder runs unless unpaused here
    }
    ports = [str(p) for p in _free_ports(3)]
    args = [
        "--port", ports[0], "--worker-log-port", ports[1], "--trigger-log-port", ports[2], "--run-dir", str(run_dir),
    ]  # fmt: skip
    up = subprocess.run(
        [sys.executable, str(UI_SCRIPT), "up", *args], env=env, capture_output=True, text=True, timeout=300
    )
    try:
        assert up.returncode == 0, f"airflow_ui.py up failed:\n{up.stdout}\n{up.stderr}"
        password = re.search(r"^\s+password: (\S+)", up.stdout, re.M)
        assert password, up.stdout
        api = Api(f"http://127.0.0.1:{ports[0]}", password.group(1), run_dir / "standalone.log")
        up_seconds = time.monotonic() - started
        backfill = spec.dag_id("backfill")
        for dag_id in (backfill, consumer):
            path = f"/api/v2/dags/{dag_id}"
            api.wait(lambda p=path: api.call("GET", p, ok=(200, 404)) is not None, f"{dag_id} parsed")
            api.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        tasks = {t["task_id"]: t for t in api.call("GET", f"/api/v2/dags/{backfill}/tasks")["tasks"]}
        assert "emit_asset_event" in tasks, sorted(tasks)

        dry = api.finished_run(backfill, {"dry_run": True})
        assert dry["state"] == "success", dry
        assert api.asset_events(uri) == []  # registered at task success: none, so nothing to trigger
        dry_seconds = time.monotonic() - started

        run = api.finished_run(backfill, {})
        assert run["state"] == "success", run
        api.wait(lambda: any(r["state"] == "success" for r in api.runs(consumer)), f"{consumer} ran", 120)
        downstream = api.runs(consumer)
        assert len(downstream) == 1, downstream
        xcom = api.call(
            "GET",
            f"/api/v2/dags/{consumer}/dagRuns/{urllib.parse.quote(downstream[0]['dag_run_id'], safe='')}"
            "/taskInstances/read_extra/xcomEntries/return_value?deserialize=true",
        )
        extras = xcom["value"]
        events = api.asset_events(uri)
        assert len(events) == 1 and [events[0]["extra"]] == extras, (events, extras)
    finally:  # a run left going would be resumed by the next scheduler on this metadata DB
        for dag_id in (spec.dag_id("backfill"), consumer):
            with contextlib.suppress(Exception):
                for left in (r for r in api.runs(dag_id) if r["state"] in ("queued", "running")):
                    path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(left['dag_run_id'], safe='')}"
                    api.call("PATCH", path, {"state": "failed"})
        down = subprocess.run([sys.executable, str(UI_SCRIPT), "down", *args], env=env, capture_output=True, text=True)
        assert down.returncode == 0, down.stdout + down.stderr

    (extra,) = extras
    rows = oracle.expected_rows(produced)
    assert extra["pipeline"] == spec.name and extra["kind"] == "backfill" and extra["mode"] == "merge"
    assert extra["dag_run_id"] == run["dag_run_id"] and extra["run_id"] == f"{backfill}/{run['dag_run_id']}"
    assert extra["offsets"] == {unique_name: {"0": {"start": 0, "end": len(produced.messages)}}}
    assert extra["rows_upserted"] == len(rows) and extra["rows_deleted"] == 0
    assert extra["dead_letters"] == oracle.invalid_count(produced)
    assert isinstance(extra["spec_version"], int)
    report = Path(os.environ["REPROCESS_STATE_DIR"]) / "test-reports" / "asset-event.txt"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(
        f"asset event extra: {json.dumps(extra)}\nstandalone up after {up_seconds:.0f} s, dry run done at "
        f"{dry_seconds:.0f} s, whole test {time.monotonic() - started:.0f} s\n"
    )


def _free_ports(n: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(free_port())
    return sorted(ports)
