"""The audit DAG (``reprocess_<pipeline>_audit``, issue 57 item 2): with ``audit.auto_heal`` a run heals a row
deleted by SQL and says so in its note; the next run's note says equal. Real Kafka, Spark Connect, Postgres
and ``dag.test()``; the produced messages are the oracle (tests/support/oracle.py imports nothing of the
product)."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session
from sqlalchemy import text

from reprocess.kafka import demo_data
from tests.support.helpers import backfill, oracle_rows, orders_spec, run_dag, target_rows

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow")]


def _note(dr: Any) -> str:
    with create_session() as session:
        return DagRun.find(dag_id=dr.dag_id, run_id=dr.run_id, session=session)[0].note or ""


def test_the_audit_dag_heals_a_row_deleted_by_sql_with_auto_heal_and_its_notes_say_the_verdicts(
    kafka_config, engine, unique_name
):
    spec = orders_spec(unique_name, unique_name, audit={"cron": "0 4 * * 0", "auto_heal": True})
    assert (spec.audit_cron, spec.audit_auto_heal) == ("0 4 * * 0", True)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(40, 2), malformed=())
    backfill(engine, kafka_config, spec, f"{unique_name}-load")
    expected = oracle_rows(produced)
    assert target_rows(engine, spec) == expected
    gone = sorted(expected)[3]
    with engine.begin() as conn:
        conn.execute(text(f"DELETE FROM {spec.qualified_target} WHERE order_id = :k"), {"k": gone})

    healed = run_dag(spec, "audit")
    assert healed.state == "success", _note(healed)
    note = _note(healed)
    assert note.startswith("AUDIT differences ") and ": missing 1; healed by run " in note, note
    assert target_rows(engine, spec) == expected

    again = run_dag(spec, "audit")
    assert again.state == "success"
    assert _note(again).startswith("AUDIT equal "), _note(again)
