"""A reconciliation that runs before the incremental has read its whole window (the scheduler runs
the two independently; the soak saw 7 of 15 checks fail so) must not call the unread part a gap:
offsets at or above the ledger are the incremental's lag. The check says "not yet stable", its part
below the ledger is checked, and once the incremental passes it the window is ok. Through the DAG,
the run is no failure: it waits (reschedule mode, no worker slot held) until the incremental has
read the window, then checks it. The target then equals the oracle (``tests/support/oracle.py``)
over every record produced.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.core.errors import WindowNotStable
from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from tests.support.helpers import (
    ledger,
    oracle_rows,
    orders_spec,
    plan_stage_commit,
    reconcile_over_connect,
    target_rows,
)

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

BASE = datetime(2026, 11, 1, tzinfo=UTC)
WINDOW = (BASE, BASE + timedelta(days=1))
WAIT_TASK = "wait_for_incremental"  # the reconcile DAG's wait, by its task id (no product constant)


def _rescheduled(dag_id: str) -> int:
    """How often the DAG's wait gave its worker slot back (a TaskReschedule row each)."""
    from airflow.models import TaskInstance
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(TaskReschedule)
                .join(TaskInstance, TaskInstance.id == TaskReschedule.ti_id)
                .where(TaskInstance.dag_id == dag_id, TaskInstance.task_id == WAIT_TASK)
            )
            or 0
        )


def test_a_window_past_the_ledger_is_not_yet_read_never_a_gap_and_ok_once_the_incremental_reads_it(
    kafka_config, engine, unique_name
):
    kafka, topic = kafka_config, unique_name
    spec = orders_spec(unique_name, topic, max_dead_letter_ratio=0.5)
    demo_data.create_topic(kafka, topic, 2)
    first = demo_data.produce(kafka, topic, 2, demo_data.order_events(40, 2, seed=5), base_time=BASE)
    plan_stage_commit(engine, kafka, spec, RunRequest.from_params({}), f"{unique_name}-backfill")
    read = ledger(engine, spec)

    # Records of the same day arrive after the last run: the incremental has not read them yet.
    later = demo_data.produce(
        kafka, topic, 2, demo_data.order_events(30, 2, seed=9), base_time=BASE + timedelta(hours=6)
    )
    ends = {p: max(o for q, o, *_ in later.messages if q == p) + 1 for p in (0, 1)}
    assert all(ends[p] > read[p] for p in (0, 1))

    pattern = "; ".join(
        rf"{topic}\[{p}\] not yet stable: not read yet: the ledger is at {read[p]}, below the window's end {ends[p]}.*"
        for p in (0, 1)
    )
    with pytest.raises(WindowNotStable, match=pattern):
        reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-early")

    plan_stage_commit(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-incremental")
    assert ledger(engine, spec) == ends
    verdicts = reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-after")
    assert [v.verdict for v in verdicts] == ["ok", "ok"]
    everything = demo_data.Produced(sorted(first.messages + later.messages), {**first.timestamps, **later.timestamps})
    assert target_rows(engine, spec) == oracle_rows(everything)


@pytest.mark.parametrize("before", ["a_backfill", "no_run"])
def test_a_reconcile_dag_run_waits_without_a_worker_slot_until_the_incremental_reads_its_window_then_is_ok(
    kafka_config, engine, unique_name, before
):
    """``no_run``: the pipeline has committed nothing yet (its first incremental is under way, as in
    the soak at 2026-12-07 13:13, where such a window was checked at once and called a gap)."""
    from airflow.dag_processing.dagbag import DagBag

    kafka, topic = kafka_config, unique_name
    spec = orders_spec(
        unique_name, topic, max_dead_letter_ratio=0.5, reconcile={"cron": "0 0 * * *", "auto_heal": False}
    )
    demo_data.create_topic(kafka, topic, 2)
    first = demo_data.produce(kafka, topic, 2, demo_data.order_events(40, 2, seed=5), base_time=BASE)
    if before == "a_backfill":
        plan_stage_commit(engine, kafka, spec, RunRequest.from_params({}), f"{unique_name}-backfill")
    later = demo_data.produce(
        kafka, topic, 2, demo_data.order_events(30, 2, seed=9), base_time=BASE + timedelta(hours=6)
    )
    ends = {p: max(o for q, o, *_ in later.messages if q == p) + 1 for p in (0, 1)}
    assert all(ends[p] > n for p, n in ledger(engine, spec).items())  # the window's end is not read yet

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    dag = bag.dags[spec.dag_id("reconcile")]
    for task in dag.tasks:
        task.retries = 0  # a failure shows at once, not after the retry delays
        if task.task_id == WAIT_TASK:  # look every 2 s; the demo's window is a month old: no deadline
            task.poke_interval, task.wait = 2, timedelta(days=3650)

    finished, errors = threading.Event(), []

    def incremental_once_the_check_waits() -> None:
        """The scheduler's other DAG: the incremental runs while the check waits."""
        try:
            while not _rescheduled(dag.dag_id):
                if finished.wait(0.5):
                    return
            plan_stage_commit(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-incremental")
        except BaseException as exc:
            errors.append(exc)

    incremental = threading.Thread(target=incremental_once_the_check_waits, daemon=True)
    incremental.start()
    started = time.monotonic()
    try:
        run: Any = dag.test(logical_date=WINDOW[1])  # checks [BASE, BASE + 1 day)
    finally:
        finished.set()
        incremental.join(timeout=300)
    print(f"reconcile run {run.state} in {time.monotonic() - started:.1f} s, rescheduled {_rescheduled(dag.dag_id)}x")
    assert not errors, errors
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert run.state == "success", states
    assert _rescheduled(dag.dag_id) >= 1  # it gave its slot back between looks, never failed
    assert ledger(engine, spec) == ends
    with engine.connect() as conn:
        verdicts = conn.execute(
            text(
                "SELECT partition, verdict, kafka_end FROM reprocess.reconciliations WHERE pipeline = :p "
                "AND window_start = :ws ORDER BY partition"
            ),
            {"p": spec.name, "ws": WINDOW[0]},
        ).all()
    assert [tuple(v) for v in verdicts] == [(0, "ok", ends[0]), (1, "ok", ends[1])]
    everything = demo_data.Produced(sorted(first.messages + later.messages), {**first.timestamps, **later.timestamps})
    assert target_rows(engine, spec) == oracle_rows(everything)
