"""The Airflow UI in a real headless Chromium: login, DAG list, the backfill trigger form, a run.

The UI is started by ``scripts/airflow_ui.py`` (what ``make up`` runs) with this test process's
environment, so it reads the same AIRFLOW_HOME and metadata DB as ``dag.test()`` here and shows
the run this test made. Screenshots go to ``tests/screenshots/`` (git-ignored).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.core.names import DAG_KINDS
from reprocess.core.runs import EndMode, RunKind, RunRequest, StartMode
from reprocess.kafka import demo_data
from reprocess.postgres.store import ensure_pipeline
from reprocess.runner.start import snapshot_and_migrate
from tests.support import airflow_http
from tests.support.browser import Browser, ensure_chromium
from tests.support.helpers import orders_spec, run_dag

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow")]

REPO = Path(__file__).resolve().parents[3]
SCREENSHOTS = REPO / "tests" / "screenshots"
UI_SCRIPT = REPO / "scripts" / "airflow_ui.py"
# A dead letter that is HTML: the page must show it as text, never run it.
XSS = b'<img src=x onerror="window.__xss=1">'
NAV_ENTRY = "Coverage"
DAY1, DAY2, DAY3 = (datetime(2026, 11, d, tzinfo=UTC) for d in (1, 2, 3))
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
    """`scripts/airflow_ui.py up` on free ports with this process's env; `down` afterwards.

    One at a time across the xdist workers (a file lock): the UI's run dir (pid file, password, log) is
    shared, and two tests starting it at once (test_plan_view and test_ui_browser, fresh clone at f73c512)
    stopped each other's standalone and read each other's password."""
    lock_path = Path(os.environ["REPROCESS_STATE_DIR"]) / "airflow-ui-test.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with _airflow_ui_alone() as info:
            yield info


@contextmanager
def _airflow_ui_alone() -> Iterator[dict[str, str]]:
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
    status, body = airflow_http.get(url, path, airflow_http.token(url, "admin", password))
    assert status == 200, (path, status, body[:500])
    return json.loads(body)


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


def test_ui_shows_dags_trigger_form_run_and_coverage_page(
    chromium, kafka_config, engine, unique_name, tmp_path, monkeypatch
):
    started = time.monotonic()
    # A private spec folder for dag.test() and the UI's dag-processor alike: another pytest
    # session starting meanwhile empties the shared .state/test_pipelines.
    monkeypatch.setenv("REPROCESS_PIPELINES_DIR", str(tmp_path))
    spec = orders_spec(unique_name, unique_name, max_dead_letter_ratio=0.2)  # one more bad message: the XSS one
    demo_data.create_topic(kafka_config, unique_name, 2)
    malformed = (*demo_data.MALFORMED, XSS)
    demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(60, 3, seed=21), malformed=malformed)
    run = run_dag(spec, "backfill")
    assert run.state == "success"
    backfill = spec.dag_id("backfill")
    dag_ids = [spec.dag_id(kind) for kind in (*DAG_KINDS, "reset")]
    print(f"\nbackfill via dag.test(): {time.monotonic() - started:.1f} s")
    _coverage_data(engine, kafka_config, spec)
    # A second pipeline the viewer may read (registered, never run).
    allowed = orders_spec(f"allowed_{unique_name[-6:]}", f"allowed_{unique_name[-6:]}")
    ensure_pipeline(engine, allowed)
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,viewer:viewer")

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

            # (a) The DAG list shows this test's generated DAGs (and other reprocess_* ones).
            browser.goto(f"{ui['url']}/dags?name_pattern=reprocess_{unique_name}")  # a name prefix
            text = browser.wait_for_text(*dag_ids, f"{len(dag_ids)} Dags")
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
            assert note, "the run-note listener (reprocess.plugins.listener) wrote no note"
            browser.wait_for_text(_note_fragment(note))
            print(f"run note shown: {_note_fragment(note)!r}")
            screenshot("run")

            # (d) The coverage page from the nav: the overview lists this pipeline.
            browser.goto(f"{ui['url']}/")
            browser.click("a", NAV_ENTRY)
            _wait_in_frame(browser, f"d.body.innerText.includes({json.dumps(spec.name)})", "the overview")
            screenshot("coverage_nav")
            # (e) ... and as the tab of the pipeline's DAG: the pipeline's own page.
            browser.goto(f"{ui['url']}/dags/{backfill}")
            browser.click("a[href*='/plugin/reprocess-coverage']")
            _wait_in_frame(browser, "d.body.innerText.includes('Coverage per partition')", "the DAG tab")
            _wait_in_frame(browser, "d.querySelector('#coverage-chart .main-svg')", "the chart in the tab")
            screenshot("coverage_dag_tab")

            # (f) The page itself: bars, calendar and dead letters against Postgres.
            browser.goto(f"{ui['url']}/reprocess/pipelines/{spec.name}")
            browser.wait_for("document.querySelector('#calendar-chart .main-svg')", "the charts")
            _check_coverage_page(browser, engine, spec)
            for width in (1280, 800):
                browser.send(
                    "Emulation.setDeviceMetricsOverride", width=width, height=1000, deviceScaleFactor=1, mobile=False
                )
                browser.wait_for(f"window.innerWidth === {width}", f"{width} px")
                time.sleep(0.5)  # Plotly's responsive relayout
                overflow = browser.eval("document.documentElement.scrollWidth - document.documentElement.clientWidth")
                assert overflow <= 0, f"the page is {overflow} px wider than {width} px"
                shot += 1
                browser.screenshot(SCREENSHOTS / f"ui_{shot:02d}_coverage_{width}.png", full_page=True)
        except Exception:
            browser.screenshot(SCREENSHOTS / "ui_failure.png")
            raise
        finally:
            browser.close()
        _check_access(ui, spec.name, allowed.name)
    _check_dag_filter(monkeypatch, spec.name, allowed.name)
    print(f"total: {time.monotonic() - started:.1f} s")


def _coverage_data(engine: Any, kafka: dict[str, Any], spec: Any) -> None:
    """A reconciled day (ok), a later day whose records a ledger reset skipped (a gap) and a dry run
    that snapshots the new log ends (the lag), all through the product's own DAG and functions on the
    real broker. Records past the ledger are the incremental's lag (not yet stable), never a gap: the
    gap is records the ledger passed without a commit."""
    from reprocess.operations.reset import ResetMode, ResetRequest, execute_reset

    assert _reconcile(spec, DAY2).state == "success"  # checks [DAY1, DAY2)
    demo_data.produce(kafka, spec.topics[0], 2, demo_data.order_events(10, 1, seed=22), malformed=(), base_time=DAY2)
    execute_reset(engine, kafka, spec, ResetRequest(ResetMode.LATEST), reason="skip day 2", requested_by="test")
    assert _reconcile(spec, DAY3).state == "failed"  # [DAY2, DAY3): skipped by the reset, a gap
    demo_data.produce(kafka, spec.topics[0], 2, demo_data.order_events(10, 1, seed=23), malformed=(), base_time=DAY3)
    request = RunRequest(RunKind.BACKFILL, StartMode.LEDGER, EndMode.LATEST, dry_run=True)
    run_id = f"{spec.dag_id('backfill')}/dry_run_snapshot"
    snapshot_and_migrate(
        engine,
        kafka,
        spec,
        request,
        run_id,
        dag_id=spec.dag_id("backfill"),
        dag_run_id="dry_run_snapshot",
        params={"dry_run": True},
    )


def _reconcile(spec: Any, day: datetime) -> Any:
    """The reconcile DAG through ``dag.test()`` for the interval that ends at ``day`` (no retries)."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).dags[spec.dag_id("reconcile")]
    for task in dag.tasks:
        task.retries = 0
    return dag.test(logical_date=day)


def _frame(expression: str) -> str:
    """JS that evaluates ``expression`` with ``d`` = the document of the plugin page in the UI's iframe."""
    return f"(d => !!(d && d.body && ({expression})))(document.querySelector('iframe')?.contentDocument)"


def _wait_in_frame(browser: Browser, expression: str, what: str) -> None:
    browser.wait_for(_frame(expression), f"{what} in the plugin's iframe", 60)


def _expected_coverage(engine: Any, spec: Any) -> dict[str, dict[str, Any]]:
    """Per partition label, from the bookkeeping tables directly (not from the coverage module):
    the latest snapshot, the ledger and the union of the committed ranges."""
    with engine.connect() as conn:
        snaps = conn.execute(
            text(
                "SELECT DISTINCT ON (s.partition) s.partition, s.log_start, s.log_end "
                "FROM reprocess.offset_snapshots s JOIN reprocess.runs r ON r.run_id = s.run_id "
                "WHERE r.pipeline = :p ORDER BY s.partition, s.taken_at DESC"
            ),
            {"p": spec.name},
        ).all()
        ledger = dict(
            conn.execute(
                text("SELECT partition, next_offset FROM reprocess.consumer_offsets WHERE pipeline = :p"),
                {"p": spec.name},
            ).all()
        )
        ranges = conn.execute(
            text(
                "SELECT partition, start_offset, end_offset FROM reprocess.committed_ranges WHERE pipeline = :p "
                "ORDER BY partition, start_offset"
            ),
            {"p": spec.name},
        ).all()
    out = {}
    for partition, lo, hi in snaps:
        merged: list[list[int]] = []
        for _, a, b in (r for r in ranges if r.partition == partition):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        out[f"{spec.topics[0]}[{partition}]"] = {"lo": lo, "hi": hi, "ledger": ledger[partition], "committed": merged}
    return out


def _check_coverage_page(browser: Browser, engine: Any, spec: Any) -> None:
    traces = browser.eval(
        "document.getElementById('coverage-chart').data.map(t => ({name: t.name, y: t.y, base: t.base, x: t.x}))"
    )
    drawn: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for t in traces:
        for y, base, width in zip(t["y"], t["base"], t["x"], strict=True):
            drawn.setdefault(t["name"], {}).setdefault(y, []).append((base, base + width))
    expected = _expected_coverage(engine, spec)
    assert set(drawn["committed"]) == set(expected)
    for label, e in expected.items():

        def pct(offset: int, e: dict[str, Any] = e) -> float:
            return (min(max(offset, e["lo"]), e["hi"]) - e["lo"]) / (e["hi"] - e["lo"]) * 100

        committed = [pct(o) for a, b in e["committed"] for o in (a, b)]
        assert [v for seg in drawn["committed"][label] for v in seg] == pytest.approx(committed), label
        assert list(drawn["not read yet (lag)"][label][0]) == pytest.approx([pct(e["ledger"]), 100.0]), label
        assert e["hi"] > e["ledger"], "the dry run's snapshot should see the second day's records"

    # Calendar: one cell per (day, partition), 1 = ok / 0 = gap, as in reprocess.reconciliations.
    with engine.connect() as conn:
        verdicts = {
            (f"{r.topic}[{r.partition}]", r.window_start.date().isoformat()): r.verdict
            for r in conn.execute(
                text(
                    "SELECT topic, partition, window_start, verdict FROM reprocess.reconciliations WHERE pipeline = :p"
                ),
                {"p": spec.name},
            )
        }
        dead = {
            (r.partition, r.offset)
            for r in conn.execute(
                text('SELECT partition, "offset" FROM reprocess.dead_letters WHERE pipeline = :p'), {"p": spec.name}
            )
        }
    heat = browser.eval(
        "(g => ({x: g.data[0].x, y: g.data[0].y, z: g.data[0].z}))(document.getElementById('calendar-chart'))"
    )
    shown = {
        (y, x): z for y, row in zip(heat["y"], heat["z"], strict=True) for x, z in zip(heat["x"], row, strict=True)
    }
    assert {k: ("ok" if v == 1 else "gap") for k, v in shown.items() if v is not None} == verdicts
    assert set(verdicts.values()) == {"ok", "gap"}
    # A real click on a gap cell shows its detail and the backfill conf that closes it.
    label, day = next(k for k, v in verdicts.items() if v == "gap")
    browser.eval("document.getElementById('calendar-chart').scrollIntoView({block: 'center'})")
    x, y = browser.eval(
        "(g => { const l = g._fullLayout, xa = l.xaxis, ya = l.yaxis, r = g.getBoundingClientRect();"
        f" return [r.left + xa._offset + xa.d2p({json.dumps(day)}), r.top + ya._offset + ya.d2p({json.dumps(label)})];"
        " })(document.getElementById('calendar-chart'))"
    )
    for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
        browser.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
    browser.wait_for("document.getElementById('cell-detail').textContent.includes('Backfill conf')", "the gap's conf")
    detail = browser.eval("document.getElementById('cell-detail').textContent")
    assert label in detail and '"start_mode": "offsets"' in detail, detail

    # Dead letters: the table's (partition, offset) are the table's rows; the HTML one is text.
    rows = browser.eval(
        "[...document.querySelectorAll('#dead-letters-table tbody tr[data-offset]')]"
        ".map(r => [Number(r.dataset.partition), Number(r.dataset.offset)])"
    )
    assert {tuple(r) for r in rows} == dead and len(rows) == len(dead)
    assert browser.eval("window.__xss === undefined && !document.querySelector('#dead-letters-table img')")
    assert XSS.decode() in browser.eval("document.getElementById('dead-letters-table').innerText")


def _check_access(ui: dict[str, str], denied: str, allowed: str) -> None:
    """Every route needs a user; ``viewer`` cannot read the pipeline whose DAGs it may not read."""
    url = ui["url"]
    passwords = json.loads(
        (Path(os.environ["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated").read_text()
    )
    admin = airflow_http.token(url, "admin", ui["password"])
    viewer = airflow_http.token(url, "viewer", passwords["viewer"])

    def routes(name: str) -> list[str]:
        api = f"/reprocess/api/pipelines/{name}"
        return [
            f"/reprocess/pipelines/{name}",
            f"{api}/partitions",
            f"{api}/runs",
            f"{api}/calendar",
            f"{api}/dead-letters",
        ]

    every = [
        "/reprocess/",
        "/reprocess/api/pipelines",
        "/reprocess/static/plotly.min.js",
        "/reprocess/static/coverage.js",
        f"/reprocess/dag/reprocess_{denied}_backfill",
        *routes(denied),
    ]
    matrix: dict[str, dict[str, int]] = {}
    for who, token in (("anonymous", None), ("bad token", "not.a.jwt"), ("admin", admin), ("viewer", viewer)):
        matrix[who] = {path: airflow_http.get(url, path, token)[0] for path in every + routes(allowed)}
    print("access matrix:\n" + json.dumps(matrix, indent=1))
    # A page sends a logged-out browser to the login page (303); the API and files answer 401.
    pages = {path: code for path, code in matrix["anonymous"].items() if "/api/" not in path and "/static/" not in path}
    assert set(pages.values()) == {303} and set(matrix["anonymous"].values()) == {303, 401}
    assert all(code in (401, 403) for code in matrix["bad token"].values())
    assert all(code in (200, 303) for code in matrix["admin"].values())
    assert all(code in (200, 303) for code in matrix["viewer"].values())  # roles only: a viewer reads all DAGs
    # Request strings are bound values: an injection attempt is just a kind that matches nothing.
    injection = f"/reprocess/api/pipelines/{denied}/dead-letters?kind=%27%20OR%20%271%27%3D%271"
    status, body = airflow_http.get(url, injection, admin)
    assert status == 200 and json.loads(body)["dead_letters"] == []
    html = airflow_http.get(url, f"/reprocess/pipelines/{denied}", admin)[1].decode()
    assert "&lt;img src=x onerror=" in html and "<img src=x" not in html


def _check_dag_filter(monkeypatch: pytest.MonkeyPatch, denied: str, allowed: str) -> None:
    """The page's filter with a real Airflow user and an auth manager that denies ``denied``'s DAGs
    to ``viewer`` (Airflow's own get_authorized_dag_ids over this session's metadata DB)."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi import HTTPException

    from tests.support.per_dag_auth import PerDagAuthManager

    monkeypatch.setenv("REPROCESS_TEST_DENIED_DAGS", f"viewer=reprocess_{denied}_")
    from reprocess.plugins import access

    monkeypatch.setattr(access, "get_auth_manager", PerDagAuthManager)
    viewer = SimpleAuthManagerUser(username="viewer", role="viewer")
    admin = SimpleAuthManagerUser(username="admin", role="admin")
    assert access.readable_pipelines(viewer, [denied, allowed]) == [allowed]
    assert access.readable_pipelines(admin, [denied, allowed]) == [denied, allowed]
    with pytest.raises(HTTPException) as refused:
        access.require_pipeline(viewer, denied, [denied, allowed])
    assert refused.value.status_code == 403
    assert access.require_pipeline(viewer, allowed, [denied, allowed]) == allowed
