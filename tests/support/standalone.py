"""An ``airflow standalone`` of a test's own (``scripts/airflow_ui.py up``, scheduling on: scheduler,
triggerer, DAG processor and api-server) over a DAG folder of the test's, and its REST API.

Every DAG of the folder is paused at creation; a test unpauses only the DAGs it means to run. On the
way out, runs left queued or running are failed (the next scheduler on this metadata DB would resume
them) and the standalone is stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import pytest

from devstack.process import free_port
from tests.support import airflow_http

REPO: Final = Path(__file__).resolve().parents[2]
UI_SCRIPT: Final = REPO / "scripts" / "airflow_ui.py"
RUN_TIMEOUT_S: Final = 240
POLL_S: Final = 0.5  # a wait's look interval: a run's state, a parse, a trigger event are seen within it
GET_ATTEMPTS: Final = 3
PIPELINES_DAG: Final = "from reprocess.airflow.factory import dags_from_specs\n\nglobals().update(dags_from_specs())\n"


class Api:
    def __init__(self, url: str, password: str, log: Path) -> None:
        self.url, self.log = url, log
        self.token = airflow_http.token(url, "admin", password)

    def call(self, method: str, path: str, payload: Any = None, ok: tuple[int, ...] = (200, 201)) -> Any:
        for attempt in range(GET_ATTEMPTS if method == "GET" else 1):  # a GET again when a loaded machine's
            try:  # api-server did not answer in time
                status, body, _ = airflow_http.response(self.url, path, self.token, method, payload)
                break
            except (TimeoutError, urllib.error.URLError):
                if attempt == GET_ATTEMPTS - 1 or method != "GET":
                    raise
        assert status in ok, (method, path, status, body[:1000])
        return json.loads(body) if status in (200, 201) else None

    def wait(self, done: Any, what: str, timeout: float = RUN_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
                pytest.fail(f"{what}: not within {timeout:.0f} s; airflow standalone's log ends:\n{tail}")
            time.sleep(POLL_S)

    def unpause(self, dag_id: str) -> None:
        """Once the DAG processor has parsed it."""
        path = f"/api/v2/dags/{dag_id}"
        self.wait(lambda: self.call("GET", path, ok=(200, 404)) is not None, f"{dag_id} parsed")
        self.call("PATCH", path, {"is_paused": False})

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns")["dag_runs"])

    def finished_run(self, dag_id: str, conf: dict[str, Any]) -> dict[str, Any]:
        run = self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
        path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run['dag_run_id'], safe='')}"
        self.wait(lambda: self.call("GET", path)["state"] in ("success", "failed"), f"{dag_id} {conf}")
        return dict(self.call("GET", path))

    def asset(self, uri: str) -> dict[str, Any]:
        assets = self.call("GET", "/api/v2/assets?" + urllib.parse.urlencode({"uri_pattern": uri}))["assets"]
        return dict(next(a for a in assets if a["uri"] == uri))

    def asset_events(self, uri: str) -> list[dict[str, Any]]:
        asset_id = self.asset(uri)["id"]
        return list(self.call("GET", f"/api/v2/assets/events?asset_id={asset_id}")["asset_events"])

    def fail_unfinished(self) -> None:
        """Fail every run left queued or running."""
        for dag in self.call("GET", "/api/v2/dags?limit=1000")["dags"]:
            for left in (r for r in self.runs(dag["dag_id"]) if r["state"] in ("queued", "running")):
                run_id = urllib.parse.quote(left["dag_run_id"], safe="")
                self.call("PATCH", f"/api/v2/dags/{dag['dag_id']}/dagRuns/{run_id}", {"state": "failed"})


@contextlib.contextmanager
def standalone(dags: Path, run_dir: Path, env: Mapping[str, str] | None = None) -> Iterator[Api]:
    """The standalone over ``dags`` (its files in ``run_dir``), ``env`` added to this process's."""
    full_env = {
        **os.environ,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",  # nothing of this folder runs unless unpaused
        **(env or {}),
    }
    ports: set[int] = set()
    while len(ports) < 3:
        ports.add(free_port())
    port, worker_log, trigger_log = (str(p) for p in sorted(ports))
    # --no-prepare: the session has prepared this metadata DB and the spark pool (conftest's
    # pytest_sessionstart), and `airflow standalone` checks its migrations itself; preparing again
    # re-imported Airflow and re-checked every migration before each standalone started.
    args = [
        "--no-prepare",
        "--port",
        port,
        "--worker-log-port",
        worker_log,
        "--trigger-log-port",
        trigger_log,
        "--run-dir",
        str(run_dir),
    ]
    up = subprocess.run(
        [sys.executable, str(UI_SCRIPT), "up", *args], env=full_env, capture_output=True, text=True, timeout=300
    )
    api: Api | None = None
    try:
        assert up.returncode == 0, f"airflow_ui.py up failed:\n{up.stdout}\n{up.stderr}"
        password = re.search(r"^\s+password: (\S+)", up.stdout, re.M)
        assert password, up.stdout
        api = Api(f"http://127.0.0.1:{port}", password.group(1), run_dir / "standalone.log")
        yield api
    finally:
        if api is not None:
            with contextlib.suppress(Exception):
                api.fail_unfinished()
        down = subprocess.run(
            [sys.executable, str(UI_SCRIPT), "down", *args], env=full_env, capture_output=True, text=True
        )
        assert down.returncode == 0, down.stdout + down.stderr
