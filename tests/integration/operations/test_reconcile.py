"""Reconciliation through Airflow on real parts: what it records, and what auto-heal may trigger.

Expected values come from the produced messages and the broker's offsets, never from the
product's own planning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import psycopg2
import pytest
from sqlalchemy import text

from reprocess.kafka import demo_data
from reprocess.operations import coverage
from reprocess.postgres.db import libpq_url
from reprocess.postgres.stage import create_stage
from tests.support import oracle
from tests.support.helpers import oracle_rows, orders_spec, run_dag, stage_count, target_rows

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow")]

# A manual run at 2026-11-02 checks the last complete interval, [2026-11-01, 2026-11-02): the demo's day.
DAY = datetime(2026, 11, 2, tzinfo=UTC)
WINDOW_START = datetime(2026, 11, 1, tzinfo=UTC)


def _reconcile(spec: Any, retries: int | None = None) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    assert bag.import_errors == {}, bag.import_errors
    dag = bag.dags[spec.dag_id("reconcile")]
    if retries is not None:  # a failure test need not wait out the retry delays
        for task in dag.tasks:
            task.retries = retries
    return dag.test(logical_date=DAY)


def _triggered_backfills(spec: Any, kind: str = "backfill") -> list[dict[str, Any]]:
    """The conf of every run of the pipeline's backfill (or ``kind``) DAG that something triggered (oldest first)."""
    from airflow.models import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        runs = session.scalars(select(DagRun).where(DagRun.dag_id == spec.dag_id(kind)).order_by(DagRun.id)).all()
        return [dict(r.conf or {}) for r in runs if r.conf]


def _task_states(dag_run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}


def test_auto_heal_triggers_the_stored_conf_for_a_gap_and_nothing_when_the_check_itself_fails(
    kafka_config, engine, db_url, unique_name, monkeypatch
):
    spec = orders_spec(unique_name, unique_name, reconcile={"cron": "0 0 * * *", "auto_heal": True})
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(60, 3, seed=41), malformed=())
    log_end_1 = max(o for p, o, *_ in produced.messages if p == 1) + 1
    assert run_dag(spec, "backfill").state == "success"
    before = _triggered_backfills(spec)

    # 1. A real gap: partition 1's committed range vanishes from the ledger.
    with engine.begin() as conn:
        conn.execute(
            text("DELETE FROM reprocess.committed_ranges WHERE pipeline = :p AND partition = 1"), {"p": spec.name}
        )
    # An earlier check died after its window job created its stage: the next check drops it.
    dead_check = f"{spec.dag_id('reconcile')}/an-earlier-run/0123456789ab"
    with psycopg2.connect(libpq_url(db_url)) as pg:
        create_stage(pg, spec, dead_check, check=True)
    pg.close()
    assert stage_count(engine, spec, dead_check) == 0
    gap_run = _reconcile(spec)
    assert stage_count(engine, spec, dead_check) is None
    assert gap_run.state == "failed"
    assert _task_states(gap_run) == {
        "wait_for_incremental": "success",  # the ledger is past the window: no wait
        "snapshot_window": "success",
        "spark_window_stage": "success",
        "reconcile": "failed",
        "recorded_gap": "success",
        "heal_with_backfill": "success",
        "check_failed": "failed",
        "emit_asset_event": "upstream_failed",  # a gap changes no table: no asset event
    }
    with engine.connect() as conn:
        stored = conn.execute(
            text(
                "SELECT partition, verdict, check_id, heal_conf FROM reprocess.reconciliations "
                "WHERE pipeline = :p ORDER BY partition"
            ),
            {"p": spec.name},
        ).all()
    expected_conf = {  # the whole of partition 1, from the broker's offsets; the window it heals
        "start_mode": "offsets",
        "start_value": json.dumps({unique_name: {"1": 0}}),
        "end_mode": "offsets",
        "end_value": json.dumps({unique_name: {"1": log_end_1}}),
        "heals_window": f"{WINDOW_START.isoformat()}/{DAY.isoformat()}",
    }
    check_id = stored[0].check_id
    assert check_id.startswith(f"{spec.dag_id('reconcile')}/{gap_run.run_id}/")
    assert [(r.partition, r.verdict, r.check_id) for r in stored] == [(0, "ok", check_id), (1, "gap", check_id)]
    assert stored[0].heal_conf is None
    assert {k: _canonical(v) for k, v in stored[1].heal_conf.items()} == {
        k: _canonical(v) for k, v in expected_conf.items()
    }
    triggered = _triggered_backfills(spec)[len(before) :]
    assert triggered == [stored[1].heal_conf]  # exactly the stored conf, once

    # 2. The same unhealed gap is still recorded, but this check fails on the broker: no backfill.
    unreachable = {"bootstrap.servers": "127.0.0.1:9", "socket.connection.setup.timeout.ms": 2000}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": unreachable}))
    broken_run = _reconcile(spec, retries=0)
    assert broken_run.state == "failed"
    assert _task_states(broken_run) == {
        "wait_for_incremental": "failed",  # its look at the window's offsets is the first to ask the broker
        "snapshot_window": "upstream_failed",
        "spark_window_stage": "upstream_failed",
        "reconcile": "upstream_failed",
        "recorded_gap": "skipped",
        "heal_with_backfill": "skipped",
        "check_failed": "failed",
        "emit_asset_event": "upstream_failed",
    }
    assert _triggered_backfills(spec)[len(before) :] == triggered  # nothing new
    with engine.connect() as conn:  # the earlier gap rows are still there: the heal ignored them
        assert (
            conn.execute(
                text("SELECT check_id FROM reprocess.reconciliations WHERE pipeline = :p AND verdict = 'gap'"),
                {"p": spec.name},
            ).scalar_one()
            == check_id
        )


def _canonical(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _verdicts(engine: Any, spec: Any) -> dict[int, tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT partition, verdict, detail FROM reprocess.reconciliations WHERE pipeline = :p"),
            {"p": spec.name},
        )
        return {r.partition: (r.verdict, r.detail) for r in rows}


def test_stale_and_missing_rows_are_gaps_named_with_examples_and_the_heal_conf_closes_them(
    kafka_config, engine, unique_name
):
    """A row set back to an older record of its key is stale, not "ok"; the oracle picks the keys."""
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(80, 3, seed=43), malformed=())
    assert run_dag(spec, "backfill").state == "success"
    assert _reconcile(spec).state == "success"
    assert {p: v for p, (v, _) in _verdicts(engine, spec).items()} == {0: "ok", 1: "ok"}

    # From the produced messages: keys of partition 0 with an older valid event, and its lineage.
    events: dict[str, list[tuple[int, int, str]]] = {}
    for partition, offset, _key, value in produced.messages:
        ev = oracle.is_valid_order(value)
        if ev is not None:
            events.setdefault(ev["order_id"], []).append((partition, offset, ev["status"]))
    stale_keys = sorted(k for k, evs in events.items() if len(evs) > 1 and evs[0][0] == 0)[:3]
    missing_key = sorted(k for k, evs in events.items() if evs[0][0] == 1)[0]
    assert len(stale_keys) == 3
    with engine.begin() as conn:
        for key in stale_keys:
            _, older_offset, older_status = sorted(events[key])[-2]
            conn.execute(
                text(f"UPDATE {spec.qualified_target} SET _kafka_offset = :o, status = :s WHERE order_id = :k"),
                {"o": older_offset, "s": older_status, "k": key},
            )
        conn.execute(text(f"DELETE FROM {spec.qualified_target} WHERE order_id = :k"), {"k": missing_key})

    failed = _reconcile(spec)
    assert failed.state == "failed"
    verdicts = _verdicts(engine, spec)
    assert verdicts[0] == (
        "gap",
        f"stale: 3 keys whose target row is older than their newest record (e.g. {stale_keys[0]}, {stale_keys[1]})",
    )
    assert verdicts[1] == ("gap", f"1 keys missing from the target (e.g. {missing_key})")
    with engine.connect() as conn:
        (conf,) = conn.execute(
            text("SELECT DISTINCT heal_conf FROM reprocess.reconciliations WHERE pipeline = :p AND verdict = 'gap'"),
            {"p": spec.name},
        ).one()
    ends = {p: max(o for q, o, *_ in produced.messages if q == p) + 1 for p in (0, 1)}
    assert json.loads(conf["start_value"]) == {unique_name: {"0": 0, "1": 0}}  # the whole window of both
    assert json.loads(conf["end_value"]) == {unique_name: {str(p): e for p, e in ends.items()}}

    # The stored conf, run as a backfill, closes the gap: the next check passes.
    assert run_dag(spec, "backfill", conf).state == "success"
    assert _reconcile(spec).state == "success"
    assert {p: v for p, (v, _) in _verdicts(engine, spec).items()} == {0: "ok", 1: "ok"}


def test_a_heal_closes_its_day_checked_again_after_its_commit_and_shown_healed_by_its_run(
    kafka_config, engine, unique_name
):
    """Gap → the stored heal conf, run as a backfill → its commit triggers the window's check → the
    calendar (page data and ``cli status``) shows the day healed by that run, the gap kept in the history."""
    spec = orders_spec(unique_name, unique_name, reconcile={"cron": "0 0 * * *", "auto_heal": True})
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(60, 3, seed=47), malformed=())
    assert run_dag(spec, "backfill").state == "success"
    with engine.begin() as conn:  # a real gap: partition 1's committed range and rows vanish
        conn.execute(
            text("DELETE FROM reprocess.committed_ranges WHERE pipeline = :p AND partition = 1"), {"p": spec.name}
        )
        conn.execute(text(f"DELETE FROM {spec.qualified_target} WHERE _kafka_partition = 1"))
    assert _reconcile(spec).state == "failed"
    heal_conf = _triggered_backfills(spec)[-1]
    assert heal_conf["heals_window"] == f"{WINDOW_START.isoformat()}/{DAY.isoformat()}"

    # The heal, run as the scheduler would run what the reconcile DAG triggered (dag.test runs only
    # its own run): its commit triggers the reconcile DAG for the healed window, naming the run.
    before = len(_triggered_backfills(spec, "reconcile"))
    heal = run_dag(spec, "backfill", heal_conf)
    assert heal.state == "success"
    heal_run = f"{spec.dag_id('backfill')}/{heal.run_id}"
    assert _task_states(heal)["reconcile_healed_window"] == "success"
    (recheck_conf,) = _triggered_backfills(spec, "reconcile")[before:]
    assert recheck_conf == {"window": heal_conf["heals_window"], "healed_by": heal_run}
    recheck = _reconcile_with(spec, recheck_conf)
    assert recheck.state == "success"
    assert target_rows(engine, spec) == oracle_rows(produced)

    # The history keeps the gap; the cell is healed by the heal's run; partition 0 never had a gap.
    with engine.connect() as conn:
        history = conn.execute(
            text("SELECT partition, verdict, healed_by_run FROM reprocess.reconciliation_history WHERE pipeline = :p "
                 "ORDER BY partition, checked_at"), {"p": spec.name}
        ).all()  # fmt: skip
    assert [tuple(r) for r in history] == [
        (0, "ok", None), (0, "ok", None), (1, "gap", None), (1, "ok", heal_run),
    ]  # fmt: skip
    with engine.connect() as conn:
        cells = {c.partition: c for c in coverage.calendar(conn, spec.name)}
        (overview,) = coverage.overview(conn, [spec.name])
    assert cells[0].verdict == "ok" and cells[0].healed_by is None
    healed = cells[1].as_dict()  # what the page's calendar draws
    assert (healed["verdict"], healed["healed_by"]) == ("healed", heal_run)
    assert healed["gap_detail"].startswith("uncovered offsets [0, ") and healed["heal_conf"] is None
    assert [(x.partition, x.verdict, x.verdict_healed_by) for x in overview.partitions] == [
        (0, "ok", None), (1, "healed", heal_run),
    ]  # fmt: skip

    out = subprocess.run([sys.executable, "-m", "reprocess.cli", "status", spec.name], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    assert "RECONCILIATION (1 windows): 1 ok, 1 healed, 0 gap" in out
    assert f"2026-11-01 {unique_name}[1] healed by {heal_run} (uncovered, missing gap found " in out
    assert f"healed {WINDOW_START.date()}" in out.splitlines()[3]  # partition 1's RECONCILED column


def _reconcile_with(spec: Any, conf: dict[str, Any]) -> Any:
    """A run of the reconcile DAG with ``conf``, as the healing backfill triggered it (any logical date)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    return bag.dags[spec.dag_id("reconcile")].test(run_conf=conf, logical_date=datetime.now(UTC))
