"""The spine, end to end on real parts: Kafka → Airflow → Spark → Postgres, then a replay."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from reprocess.kafka import demo_data
from reprocess.runner.start import commit_stored
from tests.support import oracle
from tests.support.helpers import dead_letter_count, ledger, orders_spec, run_dag, runs, target_rows

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow")]


def _expected(produced: demo_data.Produced) -> dict[str, tuple[str, str, int, int]]:
    return {k: (s, str(Decimal(a).normalize()), p, o) for k, (s, a, p, o) in oracle.expected_rows(produced).items()}


SPARK_SUBMIT_LOCAL = json.dumps({"conn_type": "spark", "host": "local[2]"})


def test_backfill_equals_oracle_and_replay_changes_nothing(kafka_config, engine, unique_name, monkeypatch):
    """The first run goes through the embedded default's Spark Connect server, the replay through
    spark-submit (a ``spark`` connection): one job, two launchers, the same result."""
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 4)
    # Empty strings: a present, empty required text field is a value; an empty amount is not a number.
    base = {"status": "paid", "amount": "3.50", "currency": "EUR", "items": 1, "updated_at": "2026-11-01T00:00:00Z"}
    empties = [
        ("o-empty-customer", {**base, "order_id": "o-empty-customer", "customer_id": ""}),
        ("o-empty-amount", {**base, "order_id": "o-empty-amount", "customer_id": "c1", "amount": ""}),
    ]
    produced = demo_data.produce(
        kafka_config, unique_name, 4, demo_data.order_events(400, 5, seed=11) + empties, transactional_every=300
    )
    log_ends = {p: max(o for q, o, *_ in produced.messages if q == p) + 1 for p in range(4)}
    assert "o-empty-customer" in _expected(produced) and "o-empty-amount" not in _expected(produced)

    first = run_dag(spec, "backfill")
    assert first.state == "success"
    # (a) the target equals the oracle: newest valid event per key, with its Kafka lineage.
    assert target_rows(engine, spec) == _expected(produced)
    # (d) malformed messages became dead letters and did not stop the run.
    assert dead_letter_count(engine, spec) == oracle.invalid_count(produced) == len(demo_data.MALFORMED) + 1
    # The ledger equals the planned ends, which are the log ends (markers included).
    assert ledger(engine, spec) == log_ends
    (run1,) = runs(engine, spec)
    assert run1.state == "committed"
    assert run1.records_read == len(produced.messages)

    # The ledger was mirrored to the Kafka consumer group after the commit.
    assert _group_offsets(kafka_config, spec) == log_ends

    # The first load inserted one row per key of the oracle.
    assert run1.rows_upserted == len(_expected(produced))

    # Committing the same run twice is a no-op: no target row is rewritten (same xmin), nothing moves.
    versions = _row_versions(engine, spec)
    again = commit_stored(engine, spec, run1.run_id)
    assert again.already_committed
    assert _row_versions(engine, spec) == versions
    assert ledger(engine, spec) == log_ends
    assert dead_letter_count(engine, spec) == len(demo_data.MALFORMED) + 1

    # (b) replaying the same backfill changes nothing, launched the other way.
    before = target_rows(engine, spec)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_SUBMIT_LOCAL)
    second = run_dag(spec, "backfill")
    assert second.state == "success"
    assert target_rows(engine, spec) == before
    assert dead_letter_count(engine, spec) == len(demo_data.MALFORMED) + 1
    assert ledger(engine, spec) == log_ends
    run2 = runs(engine, spec)[-1]
    assert run2.state == "committed" and run2.rows_upserted == 0


def _row_versions(engine, spec) -> dict[str, str]:
    """key → the row version's transaction id (xmin): any rewrite of a row changes it."""
    from sqlalchemy import text

    with engine.connect() as conn:
        return dict(conn.execute(text(f"SELECT order_id, xmin::text FROM {spec.qualified_target}")).all())


def _group_offsets(kafka_config, spec) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    from reprocess.kafka.clients import make_consumer

    consumer = make_consumer({**kafka_config, "group.id": spec.consumer_group})
    try:
        committed = consumer.committed([TopicPartition(spec.topics[0], p) for p in range(4)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in committed}


def test_reconciliation_passes_after_backfill_and_names_a_deliberate_gap(kafka_config, engine, unique_name):
    """Reconcile the day the demo records carry (2026-11-01, UTC) before and after deleting a committed range."""
    from datetime import UTC, datetime

    from sqlalchemy import text

    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(120, 4, seed=5), transactional_every=100)
    assert run_dag(spec, "backfill").state == "success"
    # A manual run at 2026-11-02 covers the last complete interval: [2026-11-01, 2026-11-02).
    day = datetime(2026, 11, 2, tzinfo=UTC)

    passed = _run_reconcile(spec, day)
    assert passed.state == "success"
    assert _verdicts(engine, spec) == {0: "ok", 1: "ok"}

    with engine.begin() as conn:  # the gap: partition 1's committed range disappears from the ledger
        conn.execute(
            text("DELETE FROM reprocess.committed_ranges WHERE pipeline = :p AND partition = 1"), {"p": spec.name}
        )
    failed = _run_reconcile(spec, day)
    assert failed.state == "failed"
    assert _verdicts(engine, spec) == {0: "ok", 1: "gap"}
    with engine.connect() as conn:
        detail = conn.execute(
            text("SELECT detail FROM reprocess.reconciliations WHERE pipeline = :p AND partition = 1"), {"p": spec.name}
        ).scalar_one()
    assert detail.startswith("uncovered offsets [0, ")


def _run_reconcile(spec, day):
    import os

    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    dag = bag.dags[spec.dag_id("reconcile")]
    return dag.test(logical_date=day)


def _verdicts(engine, spec) -> dict[int, str]:
    from sqlalchemy import text

    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT partition, verdict FROM reprocess.reconciliations WHERE pipeline = :p"), {"p": spec.name}
        )
        return dict(rows.all())


def test_version_ordering_keeps_the_highest_version_when_an_older_one_arrives_later(kafka_config, engine, unique_name):
    from sqlalchemy import text

    from tests.support.helpers import PAYMENTS_SPEC

    spec = orders_spec(unique_name, unique_name, base=PAYMENTS_SPEC)
    demo_data.create_topic(kafka_config, unique_name, 2)
    events = demo_data.payment_events(300, seed=9)
    produced = demo_data.produce(kafka_config, unique_name, 2, events, malformed=())
    assert run_dag(spec, "backfill").state == "success"

    with engine.connect() as conn:
        rows = conn.execute(
            text(f"SELECT payment_id, version, _kafka_partition, _kafka_offset FROM {spec.qualified_target}")
        ).all()
    assert {r[0]: (r[1], r[2], r[3]) for r in rows} == oracle.expected_by_version(produced, "payment_id")
    # The data really has late, older versions: offset order alone would have kept those.
    last_written = {ev["payment_id"]: ev["version"] for ev in (json.loads(v) for *_, v in sorted(produced.messages))}
    assert any(last_written[r[0]] < r[1] for r in rows)
