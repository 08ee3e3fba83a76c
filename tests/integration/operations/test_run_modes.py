"""Dry runs, incremental loads (including the no-new-data fast path) and trigger validation."""

from __future__ import annotations

import psycopg2
import pytest
from sqlalchemy import text

from reprocess.core.errors import FencedRunError, StageRefusedError
from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.postgres import queries
from reprocess.postgres.db import libpq_url
from reprocess.postgres.stage import create_stage
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support import oracle
from tests.support.helpers import dead_letter_count, ledger, log_ends, orders_spec, run_dag, runs, target_rows

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("airflow")]


def _task_state(dag_run, task_id: str) -> str | None:
    return dag_run.get_task_instance(task_id).state


def _note(dag_run) -> str:
    """The run note as the UI shows it, read back from the metadata DB."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return DagRun.find(dag_id=dag_run.dag_id, run_id=dag_run.run_id, session=session)[0].note or ""


def test_dry_run_stores_the_plan_and_reads_nothing(kafka_config, engine, unique_name):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(50, 3), malformed=())

    dr = run_dag(spec, "backfill", {"dry_run": True})

    assert dr.state == "success"
    assert _task_state(dr, "spark_read_stage") == "skipped"
    (run,) = runs(engine, spec)
    assert run.state == "dry_run" and run.records_read is None
    assert run.request["params"]["dry_run"] is True  # the trigger form's values, verbatim
    assert run.request["parsed"]["start_mode"] == "earliest"
    with engine.connect() as conn:  # a dry run migrates nothing: a new pipeline's table is not even created
        table = conn.execute(text("SELECT to_regclass(:t)"), {"t": spec.qualified_target}).scalar()
    assert table is None and ledger(engine, spec) == {}
    assert _note(dr).startswith("**DRY RUN")


@pytest.mark.integration("spark")
def test_incremental_loads_new_data_then_no_new_data_run_skips_spark(kafka_config, engine, unique_name):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(80, 4), transactional_every=60)

    first = run_dag(spec, "incremental")
    assert first.state == "success"
    expected = oracle.expected_rows(produced)
    assert {k: v[2:] for k, v in target_rows(engine, spec).items()} == {k: v[2:] for k, v in expected.items()}
    assert dead_letter_count(engine, spec) == len(demo_data.MALFORMED)

    second = run_dag(spec, "incremental")
    assert second.state == "success"
    assert _task_state(second, "spark_read_stage") == "skipped"
    last = runs(engine, spec)[-1]
    assert last.state == "committed" and (last.records_read or 0) == 0


def test_bad_trigger_value_is_refused_with_a_readable_message(unique_name):
    from airflow.sdk.exceptions import ParamValidationError

    spec = orders_spec(unique_name, unique_name)
    with pytest.raises(ParamValidationError, match="start_mode"):
        run_dag(spec, "backfill", {"start_mode": "yesterday"})
    with pytest.raises(ParamValidationError, match="batch_size"):
        run_dag(spec, "backfill", {"batch_size": 0})


def test_semantically_bad_request_fails_planning_without_retries(kafka_config, engine, unique_name):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 1)
    dr = run_dag(spec, "backfill", {"start_mode": "offsets", "start_value": '{"nope": {"0": 1}}'})
    assert dr.state == "failed"
    ti = dr.get_task_instance("plan_offsets")
    assert ti.state == "failed" and ti.try_number == 1  # SpecError: the retry policy fails at once


def test_a_request_that_does_not_parse_is_recorded_as_a_failed_run_with_its_error(engine, unique_name):
    """Airflow's form accepts it (types are fine), the request parser does not: the run row, and
    therefore the run note, says why, not only the task log."""
    spec = orders_spec(unique_name, unique_name)
    dr = run_dag(spec, "backfill", {"start_mode": "offsets"})
    assert dr.state == "failed"
    (run,) = runs(engine, spec)
    assert run.state == "failed" and "start_value is required when start_mode is offsets" in run.error
    assert run.request["params"]["start_mode"] == "offsets" and run.request["parsed"] is None
    assert "start_value is required" in _note(dr)


def test_zombie_incremental_run_is_fenced_by_ledger_compare_and_set(kafka_config, engine, db_url, unique_name):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 1)
    produced = demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(10, 2), malformed=())
    plans = [
        snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-{n}") for n in (1, 2)
    ]
    for plan in plans:  # both staged from the same ledger position (empty stages: the CAS is what is tested)
        with psycopg2.connect(libpq_url(db_url)) as pg:
            create_stage(pg, spec, plan.run_id)
        with engine.begin() as conn:
            conn.execute(queries.MARK_STAGED, {"run_id": plan.run_id, "stage_rows": 0})

    commit_stored(engine, spec, plans[0].run_id)
    with pytest.raises(FencedRunError, match="fenced"):
        commit_stored(engine, spec, plans[1].run_id)
    assert ledger(engine, spec) == log_ends(produced)  # the first run's end: the log end the broker reported
    assert [r.state for r in runs(engine, spec)] == ["committed", "failed"]  # its stage goes at the next plan


def test_an_emptied_stage_never_commits_as_no_data(kafka_config, engine, db_url, unique_name):
    """A Postgres crash-restart empties UNLOGGED stage tables; the commit must notice, not commit 0 rows."""
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 1)
    demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(10, 2), malformed=())
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    with psycopg2.connect(libpq_url(db_url)) as pg:
        create_stage(pg, spec, plan.run_id)  # as the Spark job left it, minus its rows
    with engine.begin() as conn:
        conn.execute(queries.MARK_STAGED, {"run_id": plan.run_id, "stage_rows": 11})

    with pytest.raises(StageRefusedError, match="stage holds 0 rows but the Spark job staged 11"):
        commit_stored(engine, spec, plan.run_id)
    assert ledger(engine, spec) == {} and runs(engine, spec)[0].state == "failed"


def test_a_dry_run_migrates_nothing_the_runs_migrate_stage_does(kafka_config, engine, unique_name):
    """Issue 55 item 3: planning once migrated the live table before any stage existed, dry runs
    included. A new column reaches the table in a run's Migrate stage (the planning task), never
    in a dry run's planning. Driven through start_run (the stages' evaluator)."""
    from reprocess.runner.start import start_run

    v1 = orders_spec(unique_name, unique_name, key=["id"], columns={"id": "text", "s": "text"})
    demo_data.create_topic(kafka_config, unique_name, 1)
    start_run(engine, kafka_config, v1, RunRequest.incremental(), f"{unique_name}-1")  # empty: commits at once
    v2 = orders_spec(unique_name, unique_name, key=["id"], columns={"id": "text", "s": "text", "n": "bigint"})

    def columns() -> list[str]:
        with engine.connect() as conn:
            return list(conn.execute(
                text("SELECT column_name FROM information_schema.columns WHERE table_schema = :s AND table_name = :t "
                     "ORDER BY ordinal_position"), {"s": v2.target_schema, "t": v2.target_table}
            ).scalars())  # fmt: skip

    before = columns()
    _, stages = start_run(engine, kafka_config, v2, RunRequest.from_params({"dry_run": True}), f"{unique_name}-2")
    assert stages == () and columns() == before  # a dry run: no stage, no migration
    start_run(engine, kafka_config, v2, RunRequest.incremental(), f"{unique_name}-3")
    assert columns() == [*before, "n"]
