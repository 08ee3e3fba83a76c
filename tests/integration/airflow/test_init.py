"""``reprocess init`` on the suite's real services, and the run note of a run that fails at a task."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from reprocess.cli.main import main
from reprocess.core import errors
from reprocess.kafka import demo_data
from tests.support.helpers import orders_spec, run_dag, runs

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("airflow")]


def _pool_slots() -> int | None:
    from airflow.models.pool import Pool

    pool = Pool.get_pool("spark")
    return None if pool is None else pool.slots


def _init(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, dict[str, str]]]:
    code = main(["init", "--json"])
    report = json.loads(capsys.readouterr().out)
    return code, {f["source"]: f for f in report["findings"]}


@pytest.fixture
def no_spark_pool() -> object:
    """The metadata DB as a fresh Airflow has it: no ``spark`` pool; the session's pool is put back after."""
    from airflow.models.pool import Pool

    slots = _pool_slots()
    Pool.delete_pool("spark")
    yield
    Pool.create_or_update_pool("spark", slots or 1, "Spark jobs of the reprocessing pipelines", include_deferred=False)


@pytest.mark.integration("spark")
def test_init_creates_the_pool_with_two_slots_then_a_second_init_changes_nothing(no_spark_pool, capsys):
    code, first = _init(capsys)
    assert code == 0, first
    assert _pool_slots() == 2 and "created with 2 slots" in first["spark"]["problem"]
    assert all(f["severity"] == "ok" for f in first.values()), first
    assert "answers and holds reprocess" in first["spark_default"]["problem"]  # the Connect library check ran

    code, second = _init(capsys)
    assert code == 0 and _pool_slots() == 2
    assert "exists with 2 slots; left as is" in second["spark"]["problem"]
    assert "migrations already up to date" in second["reprocess_db"]["problem"]


def test_init_with_a_wrong_kafka_port_exits_1_naming_kafka_default_and_the_fix(monkeypatch, capsys):
    dead = json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:1"}})
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", dead)
    code, findings = _init(capsys)
    assert code == 1
    kafka = findings["kafka_default"]
    assert kafka["severity"] == "error" and kafka["check"] == "kafka"
    assert kafka["problem"].startswith("KafkaException: bootstrap.servers=127.0.0.1:1: ")
    assert "bootstrap.servers" in kafka["fix"] and "kafka_default" in kafka["fix"]
    assert findings["reprocess_db"]["severity"] == "ok"  # the other steps still ran


@pytest.mark.integration("spark")
def test_a_run_failing_at_the_spark_task_is_failed_with_a_note_naming_the_error_kind_reason_and_fix(
    kafka_config, engine, unique_name
):
    """The spec file changes after the DAG was built: the Spark task refuses it (SpecError, no retry).
    The run had a row in state ``planned``; it ends ``failed`` and its note says why and what to do."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 1)
    demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(10, 2), malformed=())
    dag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).dags[spec.dag_id("backfill")]
    path = Path(spec.source_file)
    raw = yaml.safe_load(path.read_text())
    raw["columns"]["currency"] = {"type": "text", "path": "currency_code"}  # a path derives rows: a new fingerprint
    path.write_text(yaml.safe_dump(raw))

    dr = dag.test()

    assert dr.state == "failed" and dr.get_task_instance("spark_read_stage").state == "failed"
    (run,) = runs(engine, spec)
    kind, _, _ = run.error.partition(" at spark_read_stage: ")
    assert run.state == "failed" and issubclass(getattr(errors, kind), errors.SpecError), run.error
    with create_session() as session:
        note = DagRun.find(dag_id=dr.dag_id, run_id=dr.run_id, session=session)[0].note or ""
    assert "failed" in note and f"{kind} at spark_read_stage" in note
    assert "changed since the DAG was built" in note and "Trigger the run again" in note  # reason and fix


def test_a_run_failing_before_it_has_a_row_gets_a_note_naming_the_error_kind_reason_and_fix(unique_name, engine):
    """Planning fails before the run has a row in the app database (the spec's topic is not on the
    broker): the worker's failure hook pushes the error, and the failed run's note shows it."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    spec = orders_spec(unique_name, f"{unique_name}-never-created")
    dag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).dags[spec.dag_id("backfill")]
    dag.get_task("plan_offsets").retries = 0  # a retryable Kafka error: one attempt is enough here

    dr = dag.test()

    assert dr.state == "failed" and dr.get_task_instance("plan_offsets").state == "failed"
    assert runs(engine, spec) == []  # no row: the note cannot come from the app database
    with create_session() as session:
        note = DagRun.find(dag_id=dr.dag_id, run_id=dr.run_id, session=session)[0].note or ""
    assert note.startswith("reprocess run failed: OffsetLookupError at plan_offsets: "), note
    assert "is unknown to the broker" in note and "fix:" in note, note


def test_a_run_whose_spark_task_waits_on_a_missing_pool_says_so_in_its_note(kafka_config, unique_name, request):
    """The scheduler's run-start hook on a real run of the metadata DB (its task instances name the
    pool), called as the scheduler calls it once the pool is gone."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from plugins.listener import RunNoteListener

    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 1)
    dr = run_dag(spec, "backfill", {"dry_run": True})
    request.getfixturevalue("no_spark_pool")
    with create_session() as session:
        RunNoteListener().on_dag_run_running(DagRun.find(dag_id=dr.dag_id, run_id=dr.run_id, session=session)[0], "")
    with create_session() as session:
        note = DagRun.find(dag_id=dr.dag_id, run_id=dr.run_id, session=session)[0].note or ""
    assert "pool `spark` does not exist" in note and "spark_read_stage stays in `scheduled`" in note
    assert "`reprocess init`" in note


@pytest.mark.integration("spark")
def test_a_run_refused_for_its_dead_letters_fails_at_once_and_its_note_keeps_the_cause(
    kafka_config, engine, unique_name
):
    """A commit refused for its dead-letter ratio is not retried (retrying cannot change the answer), and no
    later error replaces the cause: the run note says the ratio, not "is failed, not staged"."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    spec = orders_spec(unique_name, unique_name, max_dead_letter_ratio=0.05)
    demo_data.create_topic(kafka_config, unique_name, 1)
    demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(10, 1), malformed=[b"not json"] * 10)

    dr = run_dag(spec, "backfill")

    commit = dr.get_task_instance("commit_transaction")
    assert (dr.state, commit.state, commit.try_number) == ("failed", "failed", 1)
    (run,) = runs(engine, spec)
    assert run.state == "failed" and "max_dead_letter_ratio" in run.error and "not staged" not in run.error, run.error
    with create_session() as session:
        note = DagRun.find(dag_id=dr.dag_id, run_id=dr.run_id, session=session)[0].note or ""
    assert "max_dead_letter_ratio" in note and "not staged" not in note, note
