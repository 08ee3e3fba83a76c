"""The backfill DAG's plan path: the form's ``preview`` switch plans (nothing written, the run note
shows the plan), then its ``plan_id`` applies exactly that plan; run with ``dag.test()`` on real
Kafka, Spark (Connect) and Postgres. The oracle recomputes the rows from the produced messages."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.support import oracle
from tests.support.helpers import corrupt_rows, ledger, loaded_payments, run_dag, runs

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow")]
CORRUPTED = 7


def _note(dag_run) -> str:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return DagRun.find(dag_id=dag_run.dag_id, run_id=dag_run.run_id, session=session)[0].note or ""


def _rows(engine, spec) -> dict[str, tuple]:
    query = f"SELECT payment_id, status, version, _kafka_partition, _kafka_offset FROM {spec.qualified_target}"
    with engine.connect() as conn:
        return {r[0]: tuple(r[1:]) for r in conn.execute(text(query))}


def test_backfill_dag_previews_a_plan_writing_nothing_then_applies_exactly_it_by_plan_id(
    kafka_config, engine, unique_name
):
    spec, produced = loaded_payments(engine, kafka_config, unique_name, 2, 300)
    expected = oracle.expected_by_version(produced, "payment_id")
    corrupted = corrupt_rows(engine, spec, "payment_id", "status = 'wrong'", CORRUPTED)
    before, ledger_before = _rows(engine, spec), ledger(engine, spec)

    previewed = run_dag(spec, "backfill", {"preview": True})
    assert previewed.state == "success"
    assert (_rows(engine, spec), ledger(engine, spec)) == (before, ledger_before)  # nothing written
    plan_id = runs(engine, spec)[-1].run_id
    note = _note(previewed)
    assert note.startswith(f"**PLAN `{plan_id}` (nothing written)**"), note
    assert f"0 to insert, {CORRUPTED} to update (status ×{CORRUPTED}), 0 to delete" in note, note
    print(note)

    applied = run_dag(spec, "backfill", {"plan_id": plan_id})
    assert applied.state == "success"
    apply_run = runs(engine, spec)[-1]
    assert (apply_run.state, apply_run.rows_upserted, apply_run.rows_rederived) == ("committed", CORRUPTED, CORRUPTED)
    after = _rows(engine, spec)
    assert {k: (v[1], v[2], v[3]) for k, v in after.items()} == expected
    assert {k for k in after if after[k] != before[k]} == corrupted
    with engine.connect() as conn:
        planned = conn.execute(text("SELECT applied_run_id FROM reprocess.plans WHERE plan_id = :p"),
                               {"p": plan_id}).scalar()  # fmt: skip
    assert planned == apply_run.run_id
