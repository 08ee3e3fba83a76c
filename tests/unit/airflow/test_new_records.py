"""``schedule: on_new_records``: the spec setting, the incremental DAG's watched Asset, the trigger's
serialized form, and when it fires (no services)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reprocess.airflow.new_records import Cadence, NewRecordsTrigger, new_records_asset
from reprocess.airflow.run_dags import build_run_dag
from reprocess.core.errors import SpecError
from reprocess.core.ranges import TopicPartition
from reprocess.core.runs import RunKind
from reprocess.formats.specs import read_spec

ORDERS_YAML = Path(__file__).resolve().parents[3] / "pipelines" / "orders.yaml"
P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


def _spec_file(tmp_path: Path, **overrides: object) -> Path:
    raw = yaml.safe_load(ORDERS_YAML.read_text())
    raw.update(overrides)
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_on_new_records_schedules_the_incremental_on_the_pipelines_watched_asset(tmp_path):
    spec = read_spec(_spec_file(tmp_path, schedule="on_new_records", min_interval_seconds=7))
    dag = build_run_dag(spec, RunKind.INCREMENTAL)
    (asset,) = dag.timetable.asset_condition.objects
    assert asset == new_records_asset(spec) and asset.uri == "reprocess://orders/new_records"
    (watcher,) = asset.watchers
    assert watcher.trigger.serialize()[1] == {
        "spec_file": spec.source_file, "pipeline": "orders", "min_interval_seconds": 7, "poll_seconds": 2.0
    }  # fmt: skip
    assert dag.max_active_runs == 1  # a burst's events wait in Airflow's one pending event per DAG
    assert build_run_dag(spec, RunKind.BACKFILL).schedule is None


def test_a_cron_schedule_keeps_its_cron_and_refuses_a_min_interval(tmp_path):
    spec = read_spec(_spec_file(tmp_path, schedule="@hourly"))
    assert build_run_dag(spec, RunKind.INCREMENTAL).schedule == "@hourly"
    with pytest.raises(SpecError, match=r"min_interval_seconds.*on_new_records` only"):
        read_spec(_spec_file(tmp_path, schedule="@hourly", min_interval_seconds=30))
    with pytest.raises(SpecError, match=r"min_interval_seconds.*positive integer"):
        read_spec(_spec_file(tmp_path, schedule="on_new_records", min_interval_seconds=0))


def test_the_trigger_rebuilds_from_its_serialized_form_by_its_class_path():
    import importlib

    trigger = NewRecordsTrigger(spec_file="/s/orders.yaml", pipeline="orders", min_interval_seconds=30)
    path, kwargs = trigger.serialize()
    module, _, name = path.rpartition(".")
    again = getattr(importlib.import_module(module), name)(**kwargs)
    assert again.serialize() == (path, kwargs)


def test_the_cadence_fires_once_per_set_of_log_ends_and_at_least_the_interval_apart():
    cadence = Cadence(min_interval=10)
    assert not cadence.due({}, 0)  # a quiet topic: nothing unread, no event
    assert cadence.due({P0: 5}, 0)
    assert not cadence.due({P0: 5}, 100)  # the same records: the event's run takes them
    assert not cadence.due({P0: 9}, 5)  # new records within the interval wait
    assert cadence.due({P0: 9, P1: 1}, 10)
    assert not cadence.due({P0: 9, P1: 1}, 40)  # a failed run left them unread: no event until more arrive
    assert cadence.due({P0: 12, P1: 1}, 41)
