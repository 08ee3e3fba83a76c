"""Spark task retries and speculation are harmless (issue 27, item 2): whatever Spark runs twice,
the stage holds each task's rows once, the job does not fail, and the run equals the oracle.

The faults are real Spark behaviour, provoked by the job's test hook ``$REPROCESS_TEST_TASK_FAULT``
(:class:`reprocess.spark.stage_task.TaskFault`, read by the driver; it touches attempt 0 of one
write task only):

- ``exit:<task>``: the attempt's Python worker exits right after its COPY committed, as when an
  executor or worker is lost after writing. Spark runs the task again (``local[2,4]``: up to 4
  attempts; a cluster's default too); before, the second COPY doubled the task's rows and the
  job failed its row count.
- ``stall:<task>:<s>``: the attempt sleeps after its COPY committed, before it reports; with
  ``spark.speculation`` Spark starts a copy on the other worker, which finds the task's rows
  staged and finishes the task; the straggler is killed. Before, the copy's COPY doubled them.

What Spark did comes from Spark's own event log (task attempts, speculative flags, end reasons),
not from the product. Speculation needs two hosts: Spark never starts a task's copy on a host
where the task already ran, so local mode (one host) never speculates; the standalone cluster's
workers are two loopback hosts (``devstack.standalone.worker_host``).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pyarrow as pa
import pytest
from sqlalchemy import text

from devstack import standalone
from reprocess.core.errors import StaleStageTask
from reprocess.core.runs import RunRequest
from reprocess.core.stage_rows import stage_columns
from reprocess.kafka import demo_data
from reprocess.postgres.db import libpq_url
from reprocess.postgres.stage import STAGE_SCHEMA, create_stage
from reprocess.postgres.stage_write import write_task
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import (
    assert_matches_oracle,
    log_ends,
    orders_spec,
    run_spark_stage,
    runs,
    stage_count,
    start_spark_stage,
)

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

FAULT_ENV = "REPROCESS_TEST_TASK_FAULT"
# Adaptive execution would coalesce a small run's four shuffle partitions into one write task;
# with four, the tests can show that the tasks around the faulty one keep their first attempt.
SEVERAL_WRITE_TASKS = {"spark.sql.adaptive.coalescePartitions.enabled": "false"}
KEPT = "written_by_attempt="  # the job's log line for a task Spark ran more than once


# --------------------------------------------------------------------------- Spark's event log
def _event_log_conf(folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": folder.as_uri(),
        "spark.eventLog.compress": "false",
    }


def _events(folder: Path, kind: str) -> list[dict[str, Any]]:
    """The events ``kind`` (e.g. ``SparkListenerTaskEnd``) of the one application logged in ``folder``
    (Spark 4 writes rolling logs: ``eventlog_v2_<app>/events_<n>_<app>``)."""
    (app,) = folder.iterdir()
    lines = [line for log in sorted(app.glob("events_*")) for line in log.read_text().splitlines()]
    return [e for e in (json.loads(line) for line in lines if line.strip()) if e["Event"] == kind]


def _attempts(folder: Path, task_type: str) -> dict[tuple[int, int], list[tuple[int, bool, str]]]:
    """(stage, task index) → [(attempt, speculative, end reason)] of the tasks of ``task_type``
    (``ShuffleMapTask``: the Kafka read; ``ResultTask``: the stage write)."""
    out: dict[tuple[int, int], list[tuple[int, bool, str]]] = {}
    for e in _events(folder, "SparkListenerTaskEnd"):
        if e["Task Type"] == task_type:
            info = e["Task Info"]
            reason = e["Task End Reason"]["Reason"]
            out.setdefault((e["Stage ID"], info["Index"]), []).append((info["Attempt"], info["Speculative"], reason))
    return {k: sorted(v) for k, v in out.items()}


def _launched(folder: Path, stage: int, index: int) -> list[tuple[int, bool]]:
    """(attempt, speculative) of every attempt Spark started of task ``index`` of ``stage``; an
    attempt killed as the application ended has a start event but may have no end event."""
    starts = [e["Task Info"] for e in _events(folder, "SparkListenerTaskStart") if e["Stage ID"] == stage]
    return sorted((i["Attempt"], i["Speculative"]) for i in starts if i["Index"] == index)


# --------------------------------------------------------------------------- shared
def _orders(kafka_config: dict[str, Any], topic: str, seed: int) -> Any:
    demo_data.create_topic(kafka_config, topic, 4)
    return demo_data.produce(
        kafka_config, topic, 4, demo_data.order_events(2000, 5, seed=seed), transactional_every=700
    )


def _stage_on_spark_submit(
    spec: Any, run_id: str, folder: Path, *, master: str | None = None, extra: dict[str, str] | None = None
) -> str:
    """spark-submit the stage job (as the DAG does) with Spark's event log in ``folder``; its output."""
    conf = {**_event_log_conf(folder), **SEVERAL_WRITE_TASKS, **(extra or {})}
    job = start_spark_stage(spec, run_id, conf=conf, master=master)
    output, _ = job.communicate(timeout=600)
    assert job.returncode == 0, output[-6000:]
    return str(output)


def _assert_killed_write_retried_alone(folder: Path, task: int) -> None:
    """Spark's own account: the write task ``task`` failed once and its retry succeeded; every
    other write task and every Kafka read task ran once (nothing else was read or written again)."""
    writes = _attempts(folder, "ResultTask")
    reads = _attempts(folder, "ShuffleMapTask")
    assert reads and all(len(a) == 1 and a[0][2] == "Success" for a in reads.values()), reads
    retried = {k: a for k, a in writes.items() if len(a) > 1}
    assert [k[1] for k in retried] == [task], writes
    ((first, _, failed), (second, _, succeeded)) = next(iter(retried.values()))
    assert (first, second, succeeded) == (0, 1, "Success") and failed != "Success", writes
    assert all(a == [(0, False, "Success")] for k, a in writes.items() if k not in retried), writes
    assert len(writes) >= 2, f"one write task only: nothing shows the other tasks kept their work: {writes}"


# --------------------------------------------------------------------------- Postgres only
def test_concurrent_attempts_of_one_write_task_stage_its_rows_once(engine, db_url, unique_name):
    """Two attempts of task 0 COPY at the same time (a speculative copy): the one that commits
    first is kept, the other's COPY is rolled back; a third attempt after them (a retry) reads
    none of its input; another task's write is untouched. Against real Postgres, no Spark."""
    spec = orders_spec(unique_name, unique_name)
    dsn = libpq_url(db_url)
    with psycopg2.connect(dsn) as pg:
        oid = create_stage(pg, spec, unique_name)
    pg.close()
    table = f"{STAGE_SCHEMA}.{spec.stage_table(unique_name)}"
    columns = tuple(stage_columns(spec))

    def batch(n: int, tag: str) -> pa.RecordBatch:
        rows = {c: [None] * n for c in columns}
        rows.update({"_kind": ["row"] * n, "order_id": [f"{tag}-{i}" for i in range(n)], "_records": [1] * n})
        return pa.RecordBatch.from_pydict(rows)

    first_copied = threading.Event()
    second_done = threading.Event()

    def slow_attempt() -> Iterator[pa.RecordBatch]:
        yield batch(5, "a0")
        first_copied.set()
        assert second_done.wait(60)  # COPYed, not yet committed, while attempt 1 writes and commits
        yield batch(5, "a0-late")

    results: dict[int, Any] = {}

    def first_attempt() -> None:
        results[0] = write_task(dsn, table, oid, columns, slow_attempt(), 0, 0)

    slow = threading.Thread(target=first_attempt)
    slow.start()
    assert first_copied.wait(60)
    results[1] = write_task(dsn, table, oid, columns, iter([batch(7, "a1")]), 0, 1)
    second_done.set()
    slow.join(60)

    def never_read() -> Iterator[pa.RecordBatch]:
        raise AssertionError("a retry of a written task read its input")
        yield  # pragma: no cover

    results[2] = write_task(dsn, table, oid, columns, never_read(), 0, 2)
    other = write_task(dsn, table, oid, columns, iter([batch(3, "t1")]), 1, 0)

    # attempt 1 committed first: every attempt reports its 7 rows; attempt 0's 10 rows are gone
    assert [(w.attempt, w.rows, w.written_by) for w in (results[0], results[1], results[2])] == [
        (0, 7, 1), (1, 7, 1), (2, 7, 1)
    ]  # fmt: skip
    assert (other.rows, other.written_by) == (3, 0)
    assert stage_count(engine, spec, unique_name) == 7 + 3
    with engine.connect() as conn:
        kept = conn.execute(text(f'SELECT order_id FROM {STAGE_SCHEMA}."{spec.stage_table(unique_name)}"')).scalars()
        assert sorted(kept) == sorted([f"a1-{i}" for i in range(7)] + [f"t1-{i}" for i in range(3)])

    # A stale attempt (its job's stage was re-created since) writes nothing.
    with psycopg2.connect(dsn) as pg:
        create_stage(pg, spec, unique_name)
    pg.close()
    with pytest.raises(StaleStageTask, match="re-created"):
        write_task(dsn, table, oid, columns, iter([batch(2, "zombie")]), 0, 3)
    assert stage_count(engine, spec, unique_name) == 0


# --------------------------------------------------------------------------- local spark-submit
def test_task_killed_after_its_copy_commits_is_retried_on_local_without_doubling(
    kafka_config, engine, unique_name, tmp_path, monkeypatch
):
    """local[2,4] spark-submit: write task 0's first attempt dies with its COPY committed; Spark
    retries it alone, the retry keeps attempt 0's rows, the run commits and equals the oracle."""
    spec = orders_spec(unique_name, unique_name)
    produced = _orders(kafka_config, unique_name, seed=31)
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    monkeypatch.setenv(FAULT_ENV, "exit:0")

    output = _stage_on_spark_submit(spec, plan.run_id, tmp_path / "events", master="local[2,4]")

    _assert_killed_write_retried_alone(tmp_path / "events", 0)
    assert "task=0 attempt=1" in output and f"{KEPT}0" in output, output[-4000:]
    commit_stored(engine, spec, plan.run_id)
    assert_matches_oracle(engine, spec, produced, log_ends(produced))
    (run,) = runs(engine, spec)
    assert run.state == "committed" and run.records_read == len(produced.messages)


# --------------------------------------------------------------------------- Spark Connect
def test_task_killed_after_its_copy_commits_is_retried_over_connect_without_doubling(
    kafka_config, engine, unique_name, monkeypatch, caplog
):
    """The default launcher: the Connect server (local[8,4]) retries the killed write task; the
    job (in this process, as the DAG's Connect launcher runs it) logs which attempt's rows it kept."""
    spec = orders_spec(unique_name, unique_name)
    produced = _orders(kafka_config, unique_name, seed=32)
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    monkeypatch.setenv(FAULT_ENV, "exit:0")

    with caplog.at_level(logging.INFO, logger="reprocess.spark.job"):
        run_spark_stage(spec, plan.run_id, conf=SEVERAL_WRITE_TASKS)

    kept = [r.getMessage() for r in caplog.records if KEPT in r.getMessage()]
    assert len(kept) == 1 and "task=0 attempt=1" in kept[0] and kept[0].endswith(f"{KEPT}0"), kept
    commit_stored(engine, spec, plan.run_id)
    assert_matches_oracle(engine, spec, produced, log_ends(produced))
    (run,) = runs(engine, spec)
    assert run.state == "committed" and run.records_read == len(produced.messages)


# --------------------------------------------------------------------------- standalone cluster
@pytest.fixture
def on_cluster(cluster, monkeypatch) -> str:
    """The job's executors are the cluster's (their Python from the wheel); returns the master URL."""
    monkeypatch.setenv("PYSPARK_PYTHON", standalone.job_env()["PYSPARK_PYTHON"])
    return standalone.master_url()


def test_task_killed_after_its_copy_commits_is_retried_on_a_standalone_cluster_without_doubling(
    kafka_config, engine, unique_name, tmp_path, monkeypatch, on_cluster
):
    """The same fault on the cluster (spark.task.maxFailures' default 4): the retry keeps the dead
    attempt's rows, no other task runs again, the run equals the oracle."""
    spec = orders_spec(unique_name, unique_name)
    produced = _orders(kafka_config, unique_name, seed=33)
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    monkeypatch.setenv(FAULT_ENV, "exit:0")

    output = _stage_on_spark_submit(spec, plan.run_id, tmp_path / "events", master=on_cluster)

    _assert_killed_write_retried_alone(tmp_path / "events", 0)
    assert "task=0 attempt=1" in output and f"{KEPT}0" in output, output[-4000:]
    commit_stored(engine, spec, plan.run_id)
    assert_matches_oracle(engine, spec, produced, log_ends(produced))


SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.quantile": "0.5",  # speculate once half of a stage's tasks finished ...
    "spark.speculation.multiplier": "1.5",  # ... a task running 1.5x their median
    "spark.speculation.minTaskRuntime": "500ms",
    "spark.speculation.efficiency.enabled": "false",  # judge by time alone (the straggler reads nothing)
}


def test_speculative_copy_of_a_straggling_write_task_stages_its_rows_once_on_a_standalone_cluster(
    kafka_config, engine, unique_name, tmp_path, monkeypatch, on_cluster
):
    """spark.speculation on the two-host cluster: write task 0's first attempt stalls after its
    COPY committed, Spark starts a speculative copy on the other worker, which keeps the first
    attempt's rows and finishes the task; the run equals the oracle."""
    spec = orders_spec(unique_name, unique_name)
    produced = _orders(kafka_config, unique_name, seed=34)
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    monkeypatch.setenv(FAULT_ENV, "stall:0:120")

    output = _stage_on_spark_submit(spec, plan.run_id, tmp_path / "events", master=on_cluster, extra=SPECULATION)

    events = tmp_path / "events"
    writes = _attempts(events, "ResultTask")
    ((stage, _),) = [k for k in writes if k[1] == 0]
    assert _launched(events, stage, 0) == [(0, False), (1, True)], f"no speculative copy ran: {writes}"
    assert writes[(stage, 0)][-1] == (1, True, "Success"), writes  # the copy finished the task ...
    assert (0, False, "Success") not in writes[(stage, 0)], writes  # ... the straggler never did (killed)
    assert "task=0 attempt=1" in output and f"{KEPT}0" in output, output[-4000:]
    commit_stored(engine, spec, plan.run_id)
    assert_matches_oracle(engine, spec, produced, log_ends(produced))
