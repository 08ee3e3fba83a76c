"""The Airflow UI in a real headless Chromium: login, DAG list, the backfill trigger form, a run.

The UI is started by ``scripts/airflow_ui.py`` (what ``make up`` runs) with this test process's
environment, so it reads the same AIRFLOW_HOME and metadata DB as ``dag.test()`` here and shows
the run this test made. Screenshots go to ``tests/screenshots/`` (git-ignored).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from reprocess import demo_data
from tests.integration.browser import Browser, ensure_chromium
from tests.integration.helpers import orders_spec, run_dag

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow")]

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "tests" / "screenshots"
UI_SCRIPT = REPO / "scripts" / "airflow_ui.py"
SECTIONS = {
    "What": ["Topics", "Partitions"],
    "Range": ["Start from", "Start value", "End at (exclusive)", "End value"],
    "Safety": ["Allow data loss", "Batch size", "Dry run"],
}


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@contextmanager
def airflow_ui() -> Iterator[dict[str, str]]:
    """`scripts/airflow_ui.py up` on free ports with this process's env; `down` afterwards."""
    port, worker, trigger = _free_ports(3)
    args = [
        "--port", str(port), "--worker-log-port", str(worker), "--trigger-log-port", str(trigger),
        "--run-dir", str(Path(os.environ["REPROCESS_STATE_DIR"]) / "airflow-ui-test"),
    ]  # fmt: skip
    down = [sys.executable, str(UI_SCRIPT), "down", *args]
    # No scheduled runs: the standalone scheduler must not start incremental runs of other tests' DAGs.
    up = subprocess.run(
        [sys.executable, str(UI_SCRIPT), "up", "--no-schedule", *args], capture_output=True, text=True, timeout=300
    )
    try:
        assert up.returncode == 0, f"airflow_ui.py up failed:\n{up.stdout}\n{up.stderr}"
        url = re.search(r"^Airflow UI: (\S+)", up.stdout, re.M)
        password = re.search(r"^\s+password: (\S+)", up.stdout, re.M)
        assert url and password, up.stdout
        assert url.group(1) == f"http://localhost:{port}"
        info = {"url": url.group(1), "password": password.group(1)}
        # A second `up` reports the running UI (idempotent) and prints the same.
        again = subprocess.run([sys.executable, str(UI_SCRIPT), "up", *args], capture_output=True, text=True)
        assert again.returncode == 0 and "already running" in again.stdout, again.stdout + again.stderr
        assert f"password: {info['password']}" in again.stdout
        yield info
    finally:
        stopped = subprocess.run(down, capture_output=True, text=True, timeout=120)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def _api(url: str, password: str, path: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}/auth/token",
        data=json.dumps({"username": "admin", "password": password}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        token = json.load(resp)["access_token"]
    request = urllib.request.Request(f"{url}{path}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.load(resp)


def _open_section(browser: Browser, name: str) -> None:
    """Expand a Params section of the trigger form (an accordion item) and wait until it is open."""
    trigger = (
        "[...document.querySelectorAll('button[data-part=item-trigger]')]"
        f".find(e => e.innerText.trim() === {json.dumps(name)})"
    )
    for _ in range(5):
        browser.click("button[data-part=item-trigger]", name)
        try:
            browser.wait_for(f"{trigger}.getAttribute('aria-expanded') === 'true'", f"section {name} open", 4)
            browser.settle()
            browser.eval(f"{trigger}.scrollIntoView({{block: 'start'}})")  # the section fills the screenshot
            return
        except AssertionError:
            continue
    raise AssertionError(f"the trigger form's section {name!r} did not open")


def _note_fragment(note: str) -> str:
    """The start of a run note as the UI renders it (markdown emphasis removed)."""
    first = note.strip().splitlines()[0]
    return re.sub(r"\s+", " ", re.sub(r"[*_`#>]", "", first)).strip()[:30]


@pytest.fixture(scope="module")
def chromium() -> None:
    ensure_chromium()  # installs Debian's chromium as root, else fails with the command


def test_ui_shows_dags_trigger_form_and_finished_run(chromium, kafka_config, unique_name, tmp_path, monkeypatch):
    started = time.monotonic()
    # A private spec folder for dag.test() and the UI's dag-processor alike: another pytest
    # session starting meanwhile empties the shared .state/test_pipelines.
    monkeypatch.setenv("REPROCESS_PIPELINES_DIR", str(tmp_path))
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(60, 3, seed=21))
    run = run_dag(spec, "backfill")
    assert run.state == "success"
    backfill = spec.dag_id("backfill")
    dag_ids = [spec.dag_id(kind) for kind in ("backfill", "incremental", "reconcile")]
    print(f"\nbackfill via dag.test(): {time.monotonic() - started:.1f} s")

    with airflow_ui() as ui:
        print(f"UI up: {time.monotonic() - started:.1f} s")
        browser = Browser()
        shot = 0

        def screenshot(name: str) -> None:
            nonlocal shot
            shot += 1
            browser.screenshot(SCREENSHOTS / f"ui_{shot:02d}_{name}.png")

        try:
            # Log in through the Simple auth manager's form.
            browser.goto(f"{ui['url']}/")
            browser.wait_for_text("Sign in")
            browser.type_into("input[name=username]", "admin")
            browser.type_into("input[name=password]", ui["password"])
            screenshot("login")
            browser.click("button[type=submit]")
            browser.wait_for("!location.pathname.startsWith('/auth')", "the UI after login")

            # (a) The DAG list shows this test's three generated DAGs (and other reprocess_* ones).
            browser.goto(f"{ui['url']}/dags?name_pattern=reprocess_{unique_name}")  # a name prefix
            text = browser.wait_for_text(*dag_ids, "3 Dags")
            assert "backfill, orders, reprocess" in text  # the tags
            screenshot("dags_list")

            # (b) The backfill DAG's trigger form renders its Params sections with their titles.
            browser.goto(f"{ui['url']}/dags/{backfill}")
            browser.wait_for_text(backfill, "plan_offsets")
            browser.click("button", "Trigger")
            browser.wait_for_text(f"Trigger Dag - {backfill}", *SECTIONS)
            for section, titles in SECTIONS.items():
                _open_section(browser, section)
                browser.wait_for_text(*titles, timeout=10)
                screenshot(f"trigger_form_{section.lower()}")
            browser.send("Input.dispatchKeyEvent", type="keyDown", key="Escape", code="Escape")

            # (c) The finished run's page renders: its state, its tasks and its note (if any).
            run_path = f"/dags/{backfill}/runs/{urllib.parse.quote(run.run_id, safe='')}"
            browser.goto(ui["url"] + run_path)
            expected = [run.run_id, "Success", "plan_offsets", "spark_read_stage", "commit_transaction", "report"]
            browser.wait_for_text(*expected)
            note = _api(ui["url"], ui["password"], f"/api/v2{run_path.replace('/runs/', '/dagRuns/')}").get("note")
            assert note, "the run-note listener (plugins/reprocess_plugin.py) wrote no note"
            browser.wait_for_text(_note_fragment(note))
            print(f"run note shown: {_note_fragment(note)!r}")
            screenshot("run")
        except Exception:
            browser.screenshot(SCREENSHOTS / "ui_failure.png")
            raise
        finally:
            browser.close()
    print(f"total: {time.monotonic() - started:.1f} s")
