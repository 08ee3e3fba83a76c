"""The metrics reach a team's collector through Airflow's own ``[metrics]`` settings: a StatsD
listener (a UDP socket on loopback) receives them while real DAG runs go over Kafka, Spark and
Postgres, and every value equals what the producer's delivery reports say (the oracle of
tests/support/oracle.py, which imports nothing of the product).

A backfill that stops at the log ends of a first batch (malformed records included) sends its counts
and the lag a second batch leaves; records produced afterwards, with no run, show up as grown lag
through the lag DAG alone; the day's reconciliation sends one verdict per partition: not yet stable
where records lie past the ledger (the incremental's lag, not a gap).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from reprocess.kafka import demo_data
from tests.support import oracle
from tests.support.helpers import log_ends, orders_spec, run_dag

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow")]

PREFIX = "collector"
# A manual reconcile at this date checks [2026-11-01, 2026-11-02): the demo records' day.
DAY = datetime(2026, 11, 2, tzinfo=UTC)


class Line(NamedTuple):
    name: str
    tags: dict[str, str]
    value: float
    type: str


def parse(datagram: str) -> Line:
    """``prefix.name,tag=v,...:value|type``: a StatsD line with InfluxDB-style tags."""
    head, _, rest = datagram.partition(":")
    value, _, kind = rest.partition("|")
    name, *tags = head.split(",")
    return Line(name.removeprefix(f"{PREFIX}."), dict(t.split("=", 1) for t in tags), float(value), kind)


class Listener:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(1.0)
        self.port = self.sock.getsockname()[1]

    def drain(self) -> list[Line]:
        """Every line received since the last drain (UDP on loopback: the kernel holds them)."""
        lines = []
        while True:
            try:
                lines.append(parse(self.sock.recv(65536).decode()))
            except TimeoutError:
                return lines


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    """Airflow's [metrics] pointed at the listener. ``dag.test()`` runs tasks in this process without
    the task runner's start-up, so the Stats backend is initialised here as the task runner does it."""
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability.metrics.stats_utils import get_stats_factory
    from airflow.sdk.observability.stats import Stats

    listener = Listener()
    for key, value in {"STATSD_ON": "True", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(listener.port),
                       "STATSD_PREFIX": PREFIX, "STATSD_INFLUXDB_ENABLED": "True"}.items():  # fmt: skip
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    Stats.initialize(factory=get_stats_factory(), export_legacy_names=False)
    yield listener
    Stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    listener.sock.close()


def ours(lines: list[Line], name: str, pipeline: str) -> list[Line]:
    return [x for x in lines if x.name == name and x.tags.get("pipeline") == pipeline]


def by_partition(lines: list[Line], name: str, pipeline: str) -> dict[int, float]:
    """The last value per partition (a gauge's current value)."""
    return {int(x.tags["partition"]): x.value for x in ours(lines, name, pipeline)}


def _lag_dag_run() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    assert bag.import_errors == {}, bag.import_errors
    return bag.dags["reprocess_lag"].test()


def _reconcile_run(spec: Any) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    dag = bag.dags[spec.dag_id("reconcile")]
    for task in dag.tasks:  # the gap fails the check: no retry delays to wait out
        task.retries = 0
    return dag.test(logical_date=DAY)


def test_statsd_listener_receives_run_counts_lag_growth_and_verdicts_equal_to_the_oracle(
    kafka_config, engine, unique_name, statsd
):
    kafka, topic = kafka_config, unique_name
    spec = orders_spec(unique_name, topic)
    demo_data.create_topic(kafka, topic, 3)
    read = demo_data.produce(kafka, topic, 3, demo_data.order_events(60, 5, seed=40))  # malformed ones too
    stops = log_ends(read)
    unread = demo_data.produce(kafka, topic, 3, demo_data.order_events(30, 5, seed=41), malformed=())
    ends = {p: max(stops[p], log_ends(unread).get(p, 0)) for p in stops}
    assert oracle.invalid_count(read) > 0 and len(stops) == 3 and sum(ends.values()) > sum(stops.values())

    statsd.drain()
    end_value = json.dumps({topic: {str(p): o for p, o in stops.items()}})
    sent_before = time.time()
    assert run_dag(spec, "backfill", {"end_mode": "offsets", "end_value": end_value}).state == "success"
    sent_after = time.time()
    lines = run_lines = statsd.drain()

    # The run's counts, tagged with its pipeline and kind.
    counts = {x.name: x for x in lines if x.name.startswith("reprocess.run.") and x.tags.get("pipeline") == spec.name}
    assert {n: (x.value, x.type) for n, x in counts.items() if x.type == "c"} == {
        "reprocess.run.records_read": (len(read.messages), "c"),
        "reprocess.run.rows_upserted": (len(oracle.expected_rows(read)), "c"),
        "reprocess.run.rows_deleted": (0, "c"),
        "reprocess.run.dead_letters": (oracle.invalid_count(read), "c"),
    }
    assert all(x.tags["kind"] == "backfill" for x in counts.values())
    duration = counts["reprocess.run.duration"]
    assert duration.type == "ms" and 0 < duration.value < (sent_after - sent_before) * 1000
    rate = counts["reprocess.run.records_per_second"]
    assert rate.type == "g" and rate.value > 0
    # The lag the run left, per partition, and the age of each partition's first unread record.
    assert by_partition(lines, "reprocess.lag.offsets", spec.name) == {p: ends[p] - stops[p] for p in ends}
    ages = by_partition(lines, "reprocess.lag.oldest_unread_seconds", spec.name)
    for p in ends:
        if ends[p] == stops[p]:
            assert ages[p] == 0
            continue
        first_unread = unread.timestamps[(p, stops[p])] / 1000
        assert sent_before - first_unread - 1 <= ages[p] <= sent_after - first_unread + 1, (p, ages[p])

    # No run, records arrive: the lag DAG alone sends the grown lag.
    more = demo_data.produce(kafka, topic, 3, demo_data.order_events(30, 5, seed=42), malformed=())
    grown = {p: max(ends[p], log_ends(more).get(p, 0)) for p in ends}
    assert sum(grown.values()) > sum(ends.values())
    assert _lag_dag_run().state == "success"
    lines = statsd.drain()
    assert by_partition(lines, "reprocess.lag.offsets", spec.name) == {p: grown[p] - stops[p] for p in ends}
    assert not ours(lines, "reprocess.run.records_read", spec.name)  # no run happened

    # The day's reconciliation: a partition with records past the ledger is not yet stable (the window
    # ended a month ago, past the wait for the incremental: checked at once, the run fails).
    assert _reconcile_run(spec).state == "failed"
    verdicts = ours(statsd.drain(), "reprocess.reconcile.verdicts", spec.name)
    assert sorted((int(x.tags["partition"]), x.tags["verdict"], x.value, x.type) for x in verdicts) == [
        (p, "not_yet_stable" if grown[p] > stops[p] else "ok", 1.0, "c") for p in sorted(ends)
    ]
    received = [
        f"{x.name} {x.tags} {x.value}|{x.type}"
        for x in [*run_lines, *lines, *verdicts]
        if x.name.startswith("reprocess.")
    ]
    (Path(os.environ["REPROCESS_STATE_DIR"]) / "test-reports" / "metrics-lines.txt").write_text("\n".join(received))
