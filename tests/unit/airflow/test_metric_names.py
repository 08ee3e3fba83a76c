"""The metrics' names and tags (reprocess.airflow.metrics), built from a run summary, live lag and
verdicts; and their StatsD lines as Airflow's own StatsD logger writes them (a loopback socket)."""

from __future__ import annotations

import socket

import pytest

from reprocess.airflow import metrics
from reprocess.airflow.metrics import Metric
from reprocess.operations.lag import PartitionLag

SUMMARY = {
    "pipeline": "orders",
    "records_read": 120,
    "rows_upserted": 90,
    "rows_deleted": 3,
    "dead_letters": 4,
    "wall_seconds": 12.0,
}


def test_run_metrics_name_each_count_of_the_summary_tagged_with_pipeline_and_kind():
    tags = {"pipeline": "orders", "kind": "backfill"}
    assert metrics.run_metrics(SUMMARY, "backfill") == [
        Metric("incr", "reprocess.run.records_read", 120, tags),
        Metric("incr", "reprocess.run.rows_upserted", 90, tags),
        Metric("incr", "reprocess.run.rows_deleted", 3, tags),
        Metric("incr", "reprocess.run.dead_letters", 4, tags),
        Metric("gauge", "reprocess.run.records_per_second", 10.0, tags),
        Metric("timing", "reprocess.run.duration", 12000.0, tags),
    ]


def test_a_dry_run_sends_no_run_metrics():
    assert metrics.run_metrics({**SUMMARY, "dry_run": True}, "backfill") == []


def test_a_run_that_took_no_time_reads_zero_records_per_second():
    (rate,) = [m for m in metrics.run_metrics({**SUMMARY, "wall_seconds": 0.0}, "incremental") if m.kind == "gauge"]
    assert rate.value == 0.0


def test_lag_metrics_tag_each_partition_with_pipeline_topic_and_partition():
    lags = [PartitionLag("t", 0, 5, 61.26), PartitionLag("t", 1, 0, 0.0, unstable=7)]
    names = ("reprocess.lag.offsets", "reprocess.lag.oldest_unread_seconds", "reprocess.lag.unstable_offsets")
    sent = {0: (5, 61.3, 0), 1: (0, 0.0, 7)}  # per partition: lag, oldest unread age, held above the LSO
    assert metrics.lag_metrics("orders", lags) == [
        Metric("gauge", name, value, {"pipeline": "orders", "topic": "t", "partition": str(p)})
        for p, values in sent.items()
        for name, value in zip(names, values, strict=True)
    ]


def test_verdict_metrics_count_one_per_partition_tagged_with_its_verdict():
    tags = {"pipeline": "orders", "topic": "t"}
    assert metrics.verdict_metrics("orders", [("t", 0, "ok"), ("t", 1, "gap")]) == [
        Metric("incr", "reprocess.reconcile.verdicts", 1, {**tags, "partition": "0", "verdict": "ok"}),
        Metric("incr", "reprocess.reconcile.verdicts", 1, {**tags, "partition": "1", "verdict": "gap"}),
    ]


@pytest.fixture
def statsd_socket(monkeypatch: pytest.MonkeyPatch):
    """A UDP socket on loopback that Airflow's [metrics] StatsD settings point at, tags in InfluxDB form."""
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability.metrics.stats_utils import get_stats_factory
    from airflow.sdk.observability.stats import Stats

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    for key, value in {"STATSD_ON": "True", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(sock.getsockname()[1]),
                       "STATSD_PREFIX": "unit", "STATSD_INFLUXDB_ENABLED": "True"}.items():  # fmt: skip
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    Stats.initialize(factory=get_stats_factory(), export_legacy_names=False)
    yield sock
    Stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    sock.close()


def test_emit_writes_statsd_lines_with_the_tags_in_influxdb_form(statsd_socket):
    metrics.emit(metrics.run_metrics(SUMMARY, "backfill"))
    lines = [statsd_socket.recv(4096).decode() for _ in range(6)]
    tags = ",pipeline=orders,kind=backfill"
    assert lines == [
        f"unit.reprocess.run.records_read{tags}:120|c",
        f"unit.reprocess.run.rows_upserted{tags}:90|c",
        f"unit.reprocess.run.rows_deleted{tags}:3|c",
        f"unit.reprocess.run.dead_letters{tags}:4|c",
        f"unit.reprocess.run.records_per_second{tags}:10.0|g",
        f"unit.reprocess.run.duration{tags}:12000.000000|ms",
    ]
