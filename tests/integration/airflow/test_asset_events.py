"""Asset events on a running scheduler: a DAG scheduled on a pipeline's table runs after a committed
backfill and reads the event's extra; a dry run emits no event and starts nothing.

One ``airflow standalone`` (``scripts/airflow_ui.py up``, scheduling on: asset-triggered runs are
created by the same scheduler loop as scheduled ones) parses a DAG folder of this test's own: the
product's two-line DAG file over one spec, and a downstream DAG written here with the table's URI
spelled from the ``reprocess_db`` connection by this test (no product code). Every DAG is paused at
creation; the test unpauses only the backfill and the downstream DAG.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from pathlib import Path

import pytest

from reprocess.kafka import demo_data
from tests.support import oracle
from tests.support.helpers import orders_spec
from tests.support.standalone import PIPELINES_DAG, standalone

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow")]

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
    with standalone(dags, run_dir) as api:
        up_seconds = time.monotonic() - started
        backfill = spec.dag_id("backfill")
        for dag_id in (backfill, consumer):
            api.unpause(dag_id)
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
