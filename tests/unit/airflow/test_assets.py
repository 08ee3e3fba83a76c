"""The Asset URIs a pipeline's DAGs declare, from the connections, and a reconciliation's event extra."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reprocess.airflow.assets import Locations, PipelineAssets, locate, reconcile_event_extra
from reprocess.airflow.payloads import PlannedWindow
from reprocess.formats.specs import read_spec

ORDERS = Path(__file__).resolve().parents[3] / "pipelines" / "orders.yaml"


def _connections(monkeypatch: pytest.MonkeyPatch, db: str | None, servers: str) -> None:
    if db is None:
        monkeypatch.delenv("AIRFLOW_CONN_REPROCESS_DB", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW_CONN_REPROCESS_DB", db)
    kafka = {"conn_type": "kafka", "extra": {"bootstrap.servers": servers}}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps(kafka))


def test_asset_uris_are_the_providers_forms_built_from_the_connections(monkeypatch):
    _connections(monkeypatch, "postgresql://app:secret@db.example:6432/warehouse", "SASL_SSL://b1:9093, b2:9093")
    where = locate()
    assert where == Locations(database="db.example:6432/warehouse", bootstrap="b1:9093")
    assets = PipelineAssets.of(read_spec(ORDERS), where)
    assert assets.table.uri == "postgres://db.example:6432/warehouse/public/orders"
    assert "secret" not in assets.table.uri and "app" not in assets.table.uri.split("/")[2]
    assert [a.uri for a in assets.topics] == ["kafka://b1:9093/orders"]


def test_a_database_without_a_port_gets_postgres_default_one(monkeypatch):
    _connections(monkeypatch, "postgresql://app:secret@db.example/warehouse", "b1:9092")
    assert locate() == Locations(database="db.example:5432/warehouse", bootstrap="b1:9092")


def test_a_missing_connection_builds_dags_without_assets_and_logs_the_fix(monkeypatch, caplog):
    _connections(monkeypatch, None, "b1:9092")
    with caplog.at_level(logging.WARNING):
        assert locate() is None
    assert "airflow connections add reprocess_db" in caplog.text


def test_a_reconciliation_event_names_its_window_verdict_and_ranges():
    window = PlannedWindow(
        check_id="c1",
        starting='{"orders": {"0": 5, "1": 7}}',
        ending='{"orders": {"0": 9, "1": 7}}',
        window_start=datetime(2026, 11, 1, tzinfo=UTC),
        window_end=datetime(2026, 11, 2, tzinfo=UTC),
        healed_by="run-9",
    )
    extra = reconcile_event_extra(read_spec(ORDERS), window, ["orders[0]: ok"], 3, "scheduled__x")
    assert extra["kind"] == "reconcile" and extra["run_id"] == "c1" and extra["spec_version"] == 3
    assert extra["window"] == {"start": "2026-11-01T00:00:00+00:00", "end": "2026-11-02T00:00:00+00:00"}
    assert extra["verdict"] == "healed" and extra["healed_by"] == "run-9"
    assert extra["offsets"] == {"orders": {"0": {"start": 5, "end": 9}, "1": {"start": 7, "end": 7}}}
    json.dumps(extra)  # an event's extra is stored as JSON
