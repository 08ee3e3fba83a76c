"""``schedule: on_new_records`` on a running scheduler and triggerer: records produced start an
incremental within seconds that commits them; a quiet topic starts nothing; a burst's records are
taken by a few runs, never one run per produce.

One ``airflow standalone`` (:mod:`tests.support.standalone`) parses the product's two-line DAG file
over one spec; only its incremental DAG is unpaused, so the watcher's trigger is registered at the
next parse and runs in the standalone's triggerer. What the target must hold comes from the oracle
(the produced messages alone); the ledger and the mirrored group are read from Postgres and Kafka.
The timeline (produce → trigger event → run start → committed) goes to test-reports/new-records.txt.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.kafka import demo_data
from reprocess.kafka.clients import committed_offsets
from tests.support import oracle
from tests.support.helpers import ledger, orders_spec, target_rows
from tests.support.standalone import PIPELINES_DAG, Api, standalone

# In the cluster lane, beside the parallel part: an Airflow of its own for ~6 minutes, which the
# parallel part's two workers (the suite's critical path) need not wait for.
pytestmark = [
    pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow"),
    pytest.mark.cluster_lane,
]  # fmt: skip

MIN_INTERVAL_S = 10
PARTITIONS = 2
QUIET_S = MIN_INTERVAL_S + 15  # past the interval and several of the trigger's 2 s checks
START_WITHIN_S = 30  # trigger check + scheduler loop + queueing; "within seconds"
BURST_PRODUCES, BURST_GAP_S = 24, 0.5


@dataclass
class Log:
    """Every produced message, for the oracle."""

    messages: list[tuple[int, int, bytes | None, bytes]] = field(default_factory=list)

    def produce(self, kafka: dict[str, Any], topic: str, seed: int) -> datetime:
        produced = demo_data.produce(kafka, topic, PARTITIONS, demo_data.order_events(4, 1, seed=seed), malformed=())
        self.messages.extend(produced.messages)
        return datetime.now(UTC)


def _at(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def _settled(api: Api, dag_id: str) -> list[dict[str, Any]]:
    """The DAG's runs once none is queued or running."""
    runs: list[dict[str, Any]] = []

    def done() -> bool:
        runs[:] = api.runs(dag_id)
        return all(r["state"] in ("success", "failed") for r in runs)

    api.wait(done, f"{dag_id}'s runs finished")
    return runs


def test_records_start_an_incremental_that_commits_them_a_quiet_topic_none_and_a_burst_few_runs(
    kafka_config, engine, unique_name, tmp_path, monkeypatch
):
    started = time.monotonic()
    dags, specs = tmp_path / "dags", tmp_path / "specs"
    dags.mkdir()
    specs.mkdir()
    monkeypatch.setenv("REPROCESS_PIPELINES_DIR", str(specs))
    spec = orders_spec(unique_name, unique_name, schedule="on_new_records", min_interval_seconds=MIN_INTERVAL_S)
    demo_data.create_topic(kafka_config, unique_name, PARTITIONS)
    (dags / "pipelines.py").write_text(PIPELINES_DAG)
    incremental = spec.dag_id("incremental")
    asset_uri = f"reprocess://{spec.name}/new_records"
    log = Log()
    run_dir = Path(os.environ["REPROCESS_STATE_DIR"]) / "airflow-new-records-test"
    # A short re-parse: the watcher's trigger is registered by the first parse after the unpause.
    with standalone(dags, run_dir, {"AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5"}) as api:
        up_s = time.monotonic() - started
        api.unpause(incremental)
        api.wait(lambda: api.asset(asset_uri)["watchers"] != [], "the watcher's trigger registered", 120)

        time.sleep(QUIET_S)  # an empty topic: no event, no run
        assert api.runs(incremental) == [] and api.asset_events(asset_uri) == []

        produced_at = log.produce(kafka_config, unique_name, seed=1)
        api.wait(lambda: api.runs(incremental) != [], "an incremental started by the new records", START_WITHIN_S)
        (first,) = _settled(api, incremental)
        assert first["state"] == "success", first
        (event,) = api.asset_events(asset_uri)
        assert event["extra"]["from_trigger"] is True and event["extra"]["payload"]["pipeline"] == spec.name
        assert target_rows(engine, spec) == oracle.expected_rows(log)

        time.sleep(QUIET_S)  # committed, nothing new: a quiet topic starts no run
        assert len(api.runs(incremental)) == 1 and len(api.asset_events(asset_uri)) == 1

        burst_from, most = time.monotonic(), [0, 0]  # runs queued or running; events pending in Airflow

        def sample() -> None:
            most[:] = [max(m, n) for m, n in zip(most, _waiting(api, incremental), strict=True)]

        for i in range(BURST_PRODUCES):
            log.produce(kafka_config, unique_name, seed=100 + i)
            sample()
            time.sleep(BURST_GAP_S)
        burst_s = time.monotonic() - burst_from

        def caught_up() -> bool:
            ends = {p: end for (_, p), end in _log_ends(kafka_config, spec).items()}
            runs = api.runs(incremental)
            sample()
            return ledger(engine, spec) == ends and all(r["state"] in ("success", "failed") for r in runs)

        api.wait(caught_up, "the burst committed")
        runs = _settled(api, incremental)
        events = api.asset_events(asset_uri)

    burst_runs = len(runs) - 1
    assert all(r["state"] == "success" for r in runs), runs
    # At most one run going and one event pending; the trigger fires at most once per interval.
    assert most[0] <= 1 and most[1] <= 1, most
    assert 1 <= burst_runs <= burst_s / MIN_INTERVAL_S + 2 < BURST_PRODUCES, (burst_runs, burst_s)
    assert target_rows(engine, spec) == oracle.expected_rows(log)
    # The watcher moved no group: the mirrored group says what the ledger says (mirror_group_offsets).
    group = committed_offsets(kafka_config, spec.consumer_group, [(unique_name, p) for p in range(PARTITIONS)])
    assert {p: o for (_, p), o in group.items()} == ledger(engine, spec)

    first_start, first_committed = _at(first["start_date"]), _committed_at(engine, incremental, first)
    assert first_start is not None and (first_start - produced_at).total_seconds() < START_WITHIN_S
    report = Path(os.environ["REPROCESS_STATE_DIR"]) / "test-reports" / "new-records.txt"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(
        f"standalone up after {up_s:.0f} s; min_interval_seconds={MIN_INTERVAL_S}\n"
        f"produced {produced_at.isoformat(timespec='milliseconds')}\n"
        f"trigger event +{_since(produced_at, _at(event['timestamp']))}\n"
        f"run queued +{_since(produced_at, _at(first.get('queued_at')))}\n"
        f"run start +{_since(produced_at, first_start)}\n"
        f"committed +{_since(produced_at, first_committed)}\n"
        f"run end +{_since(produced_at, _at(first['end_date']))}\n"
        f"quiet {QUIET_S} s before and after: 0 runs\n"
        f"burst: {BURST_PRODUCES} produces over {burst_s:.1f} s -> {burst_runs} runs, {len(events) - 1} trigger "
        f"events, at most {most[0]} run queued or running and {most[1]} event pending\n"
        f"whole test {time.monotonic() - started:.0f} s\n"
    )


def _waiting(api: Api, dag_id: str) -> tuple[int, int]:
    """(the DAG's runs queued or running, asset events pending for it in Airflow's queue)."""
    active = sum(r["state"] in ("queued", "running") for r in api.runs(dag_id))
    pending = api.call("GET", f"/api/v2/dags/{dag_id}/assets/queuedEvents", ok=(200, 404))
    return active, int(pending["total_entries"]) if pending else 0


def _log_ends(kafka: dict[str, Any], spec: Any) -> dict[tuple[str, int], int]:
    """The partitions' last stable offsets, asked of the broker (the end a run plans to)."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": kafka["bootstrap.servers"]})
    asked = {TopicPartition(t, p): OffsetSpec.latest() for t in spec.topics for p in range(PARTITIONS)}
    answer = admin.list_offsets(asked, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30)
    return {(tp.topic, tp.partition): fut.result().offset for tp, fut in answer.items()}


def _committed_at(engine: Any, dag_id: str, run: dict[str, Any]) -> datetime | None:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT committed_at FROM reprocess.runs WHERE run_id = :r"), {"r": f"{dag_id}/{run['dag_run_id']}"}
        ).scalar()


def _since(origin: datetime, moment: datetime | None) -> str:
    return f"{(moment - origin).total_seconds():.1f} s" if moment else "?"
