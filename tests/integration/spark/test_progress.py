"""Live progress of a long backfill: the task log reports records read of planned, rate and ETA at a
bounded rate, the coverage page (a real api-server, a real Chromium) shows a bar that moves by
itself, and both end at the exact count the oracle expects.

The run is made long by a small batch size (several Spark actions over Spark Connect); the
reporting interval is 3 s here instead of 10 s, so three reports fit in a short run.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.runner.start import snapshot_and_migrate
from tests.support import airflow_http
from tests.support.browser import Browser, ensure_chromium
from tests.support.helpers import orders_spec, run_dag, start_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow")]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "screenshots"
INTERVAL_S = 1.0
LINE = re.compile(
    r"progress run_id=(?P<run>\S+) pipeline=\S+ records_read=(?P<approx>~?)(?P<records>\d+) of planned "
    r"(?P<planned>\d+) \(\d+%\) rate=\d+ records/s (?P<eta>eta=\S+ s|eta=\?|done)"
)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((time.monotonic(), record.getMessage()))


def _watch_page(url: str, token: str, page: str, found: dict[str, Any], stop: threading.Event) -> None:
    """Chromium on the pipeline's page (logged in by the UI's JWT cookie): records each bar it
    shows, screenshots one mid-run and the finished one."""
    browser = Browser(width=1280, height=900)
    try:
        browser.send("Network.enable")
        browser.send("Network.setCookie", name="_token", value=token, url=url, path="/")
        deadline = time.monotonic() + 600
        # The page answers once dag.test() has stored the DAGs and planning has registered the pipeline.
        while not stop.is_set() and time.monotonic() < deadline:
            browser.goto(f"{url}{page}")
            time.sleep(1)
            if browser.eval("!!document.getElementById('progress-list')"):
                break
        while not stop.is_set() and time.monotonic() < deadline:
            bars = browser.eval(
                "[...document.querySelectorAll('#progress .progress')].map(b => ({run: b.dataset.run, "
                "text: b.innerText, width: parseFloat(b.querySelector('.fill').style.width), "
                "done: b.querySelector('.fill').classList.contains('done')}))"
            )
            for bar in bars or []:
                found.setdefault("bars", []).append(bar)
                if not bar["done"] and 0 < bar["width"] < 100 and "running" not in found:
                    found["running"] = bar
                    browser.screenshot(SCREENSHOTS / "progress_01_running.png")
                if bar["done"] and "done" not in found:
                    found["done"] = bar
                    browser.screenshot(SCREENSHOTS / "progress_02_done.png")
            if "done" in found:
                return
            time.sleep(1)
    except Exception as exc:  # reported by the test's assertions
        found["error"] = repr(exc)
    finally:
        browser.close()


def test_long_backfill_reports_progress_in_the_log_and_on_the_page_and_ends_exact(
    kafka_config, engine, unique_name, monkeypatch, tmp_path
):
    ensure_chromium()
    spec = orders_spec(unique_name, unique_name, batch_size=2_000)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(10_000, 3))
    expected_records = len(produced.messages)  # no transactions: every produced record is read
    monkeypatch.setenv("REPROCESS_PROGRESS_INTERVAL_S", str(INTERVAL_S))
    lines = Lines()
    logging.getLogger("reprocess.spark.progress").addHandler(lines)
    found: dict[str, Any] = {}
    stop = threading.Event()
    airflow_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        with airflow_http.api_server(Path(sys.executable), airflow_env, tmp_path) as (url, token):
            watcher = threading.Thread(
                target=_watch_page, args=(url, token, f"/reprocess/pipelines/{spec.name}", found, stop), daemon=True
            )
            watcher.start()
            dr = run_dag(spec, "backfill")
            watcher.join(timeout=120)
            stop.set()
    finally:
        logging.getLogger("reprocess.spark.progress").removeHandler(lines)
    assert dr.state == "success"

    # The task log: at least three reports while the stage ran, at most one per interval, the count
    # never going back, then one exact final line with the oracle's count.
    parsed = [(t, LINE.search(msg)) for t, msg in lines.seen]
    assert all(m is not None for _, m in parsed), [msg for t, msg in lines.seen]
    reports = [(t, m) for t, m in parsed if m is not None]
    print("\n".join(msg for _, msg in lines.seen))
    during, final = reports[1:-1], reports[-1][1]  # the first line is the start (0 read)
    assert len(during) >= 3, [m.group(0) for _, m in reports]
    times = [t for t, _ in reports[1:-1]]
    assert all(b - a >= INTERVAL_S - 0.1 for a, b in itertools.pairwise(times)), times
    counts = [int(m["records"]) for _, m in reports]
    assert counts == [*sorted(counts[:-1]), counts[-1]] and counts[-2] <= int(final["planned"])
    assert any(m["eta"].startswith("eta=") and m["eta"] != "eta=?" for _, m in during)
    assert final["eta"] == "done" and final["approx"] == "" and int(final["records"]) == expected_records
    with engine.connect() as conn:
        run = conn.execute(
            text("SELECT run_id, records_read FROM reprocess.runs WHERE pipeline = :p AND parent_run_id IS NULL"),
            {"p": spec.name},
        ).one()
        stored = conn.execute(text("SELECT * FROM reprocess.run_progress WHERE run_id = :r"), {"r": run.run_id}).one()
    assert run.records_read == expected_records
    assert (stored.records_read, stored.exact, stored.done) == (expected_records, True, True)

    # The page: a bar part-way while the stage ran, then the finished bar with the exact count.
    print(json.dumps({k: v for k, v in found.items() if k != "bars"}, indent=1))
    assert "error" not in found, found["error"]
    assert found["running"]["run"] == run.run_id, found["running"]
    widths = [b["width"] for b in found["bars"] if b["run"] == run.run_id and not b["done"]]
    assert len(set(widths)) >= 2, widths  # it moved without a reload
    assert found["done"]["width"] == 100 and f"{expected_records:,} of " in found["done"]["text"]
    assert "done" in found["done"]["text"]


def test_spark_submit_reports_progress_from_the_status_tracker(kafka_config, engine, unique_name, monkeypatch):
    """The same job under spark-submit (a driver JVM of its own): the estimates come from the status
    tracker, the lines are the driver's output (the task log streams it), the end is exact."""
    spec = orders_spec(unique_name, unique_name)
    # Eight partitions make eight tasks an action, in waves on local mode's cores, so the tracker
    # sees stages part-done however fast the machine is; a 0.5 s interval reports what it sees.
    demo_data.create_topic(kafka_config, unique_name, 8)
    produced = demo_data.produce(kafka_config, unique_name, 8, demo_data.order_events(9_000, 3))
    snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({"batch_size": 1_000}), unique_name)
    monkeypatch.setenv("REPROCESS_PROGRESS_INTERVAL_S", "0.5")

    job = start_spark_stage(spec, unique_name, batch_size=1_000)
    output, _ = job.communicate(timeout=600)

    assert job.returncode == 0, output[-4000:]
    reports = [m for m in map(LINE.search, output.splitlines()) if m is not None]
    print("\n".join(m.group(0) for m in reports))
    assert any(m["approx"] == "~" for m in reports), "no estimate from the status tracker"
    final = reports[-1]
    assert final["eta"] == "done" and final["approx"] == "" and int(final["records"]) == len(produced.messages)
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT * FROM reprocess.run_progress WHERE run_id = :r"), {"r": unique_name}).one()
    assert (stored.records_read, stored.exact, stored.done) == (len(produced.messages), True, True)
