"""Plans of the replays the issue names, each compared with the real apply that follows, exactly.

On real Kafka, Spark (Connect) and Postgres: a transform version bump (exactly the re-derived rows,
per column), a slice of late older records (refused as older, counted in records), and plans made
stale by an incremental's ledger or by records deleted from the log (refused, naming why), and a
Debezium topic with primary-key changes over Debezium's placeholders. The oracles recompute the
expected rows from the produced messages, or read the source table, and import nothing of the product.
"""

from __future__ import annotations

import json

import psycopg2
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from sqlalchemy import text

from bench.cdc_source import source as _source
from bench.cdc_source import wait_for as _wait_for
from devstack import debezium
from reprocess.core.errors import StalePlanError
from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.runner.preview import start_apply
from tests.integration.formats.test_debezium_format import LARGE_I, SENTINEL
from tests.integration.formats.test_debezium_format import _spec as _cdc_spec
from tests.integration.operations.test_plan import _apply, _plan
from tests.integration.spark.test_transforms import BASE, _events, _oracle, _spec, _target
from tests.support import oracle
from tests.support.helpers import backfill, loaded_payments, orders_spec, plan_stage_commit

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]


def test_plan_of_a_transform_version_bump_counts_exactly_the_rederived_rows_per_column(
    kafka_config, engine, unique_name
):
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, _events(300), malformed=(b"{not json",),
                                 base_time=BASE)  # fmt: skip
    v1 = _spec(unique_name, "v1", 1)
    expected, _, _ = _oracle(produced, vat=False)
    backfill(engine, kafka_config, v1, f"{unique_name}-1")

    v2 = _spec(unique_name, "v2", 2)  # adds VAT to the eu rows' net
    expected_v2, _, _ = _oracle(produced, vat=True)
    changed = {k for k in expected if expected[k] != expected_v2[k]}
    assert changed and changed == {k for k, row in expected.items() if row[0] == "eu"}
    planned = _plan(engine, kafka_config, v2, f"{unique_name}-p")
    assert planned["total"]["updated"] == len(changed) and planned["columns"] == {"net": len(changed)}
    assert planned["total"]["unchanged"] == len(expected) - len(changed)
    assert planned["total"]["inserted"] == planned["total"]["deleted"] == 0
    assert {s["key"]["id"] for s in planned["samples"]["updated"]} <= changed
    assert all(set(s["changes"]) == {"net"} for s in planned["samples"]["updated"])

    applied = _apply(engine, kafka_config, v2, f"{unique_name}-p", f"{unique_name}-apply")
    assert applied == planned["apply"]
    assert (applied["rows_rederived"], applied["rows_restamped"]) == (len(changed), len(expected) - len(changed))
    assert {k: v[:7] for k, v in _target(engine, v2).items()} == expected_v2


def test_plan_of_late_older_records_refuses_each_record_and_its_apply_changes_nothing(
    kafka_config, engine, unique_name
):
    spec, produced = loaded_payments(engine, kafka_config, unique_name, 1, 100)
    expected = oracle.expected_by_version(produced, "payment_id")
    slice_start = max(o for _p, o, *_ in produced.messages) + 1

    # Late retries of version 0 (older than every stored version): two per key for the first 5 keys.
    keys = sorted(expected)[:5]
    late = [(k, {"payment_id": k, "order_id": "late", "status": "late", "amount": "1.00", "version": 0,
                 "updated_at": "2026-10-01T00:00:00Z"}) for k in keys for _ in range(2)]  # fmt: skip
    demo_data.produce(kafka_config, unique_name, 1, late, malformed=())
    offsets = {"start_mode": "offsets", "start_value": json.dumps({unique_name: {"0": slice_start}})}
    planned = _plan(engine, kafka_config, spec, f"{unique_name}-p", **offsets)
    assert planned["total"]["refused"] == len(late)  # records, not keys
    assert planned["partitions"][0]["kinds"]["refused"] == len(late)
    assert {s["key"]["payment_id"] for s in planned["samples"]["refused"]} == set(keys)
    assert planned["changes"] == 0

    applied = _apply(engine, kafka_config, spec, f"{unique_name}-p", f"{unique_name}-apply")
    assert applied == planned["apply"]
    assert (applied["rows_upserted"], applied["rows_deleted"]) == (0, 0)


def test_plan_of_an_incremental_is_refused_once_another_run_moved_the_ledger(kafka_config, engine, unique_name):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 1)
    demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(30, 2), malformed=())
    plan_stage_commit(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-1")
    demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(10, 2), malformed=())
    planned = _plan(engine, kafka_config, spec, f"{unique_name}-p", start_mode="ledger")
    assert planned["changes"] > 0
    plan_stage_commit(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-2")
    with pytest.raises(StalePlanError, match=r"the ledger of .*\[0\] moved from \d+ to \d+"):
        start_apply(engine, kafka_config, spec, f"{unique_name}-p", f"{unique_name}-apply")


def test_plan_is_refused_once_the_log_start_moved_past_its_range(kafka_config, engine, unique_name):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 1)
    produced = demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(30, 2), malformed=())
    _plan(engine, kafka_config, spec, f"{unique_name}-p")
    gone = len(produced.messages) // 2
    admin = AdminClient(kafka_config)  # held: a collected client never completes its futures
    (deleted,) = admin.delete_records([TopicPartition(unique_name, 0, gone)], operation_timeout=30).values()
    assert deleted.result().low_watermark == gone
    with pytest.raises(StalePlanError, match=rf"the log start of .*\[0\] moved to {gone}, past the plan's start 0"):
        start_apply(engine, kafka_config, spec, f"{unique_name}-p", f"{unique_name}-apply")


def test_plan_of_debezium_key_changes_over_placeholders_counts_what_its_apply_does(
    debezium_connector, kafka_config, engine, unique_name
):
    """Updates that leave a large value out (the placeholder), a primary-key change (a delete of the
    old key, a create of the new one with the placeholder), a delete and an insert: the plan counts
    them as the apply then does, and the table equals the source table (read with psycopg2)."""
    table, prefix = unique_name, f"dbz_{unique_name}"
    topic = f"{prefix}.public.{table}"
    _source(
        f"CREATE TABLE public.{table} (id int PRIMARY KEY, status text, notes text)",
        f"ALTER TABLE public.{table} ALTER COLUMN notes SET STORAGE EXTERNAL",
        f"INSERT INTO public.{table} SELECT i, 'new', {LARGE_I} FROM generate_series(1, 5) i",
    )
    debezium_connector(unique_name, debezium.connector_config(unique_name, [f"public.{table}"], prefix))
    _source(f"INSERT INTO public.{table} VALUES ({SENTINEL}, 'end1', NULL)")
    _wait_for(kafka_config, topic, b"end1")
    spec = _cdc_spec(unique_name, topic, "json", columns={"id": "integer", "status": "text", "notes": "text"})
    plan_stage_commit(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-1")

    _source(f"UPDATE public.{table} SET status = 'paid' WHERE id = 1")  # notes left out: the placeholder
    _source(f"UPDATE public.{table} SET id = 10 WHERE id = 2")  # a key change: 2 deleted, 10 created
    _source(f"DELETE FROM public.{table} WHERE id = 3")
    _source(f"INSERT INTO public.{table} VALUES (6, 'new', 'short')")
    _source(f"UPDATE public.{table} SET status = 'end2' WHERE id = {SENTINEL}")
    _wait_for(kafka_config, topic, b"end2")
    planned = _plan(engine, kafka_config, spec, f"{unique_name}-p", start_mode="ledger")
    kinds = {k: planned["total"][k] for k in ("inserted", "updated", "deleted", "values_incomplete")}
    assert kinds == {"inserted": 2, "updated": 2, "deleted": 2, "values_incomplete": 0}
    assert planned["columns"] == {"status": 2}  # notes kept under the placeholder
    assert sum(p["values_incomplete"] for p in planned["partitions"]) == 0

    applied = _apply(engine, kafka_config, spec, f"{unique_name}-p", f"{unique_name}-apply")
    assert applied == planned["apply"]
    query = "SELECT id, status, md5(notes) FROM {} ORDER BY id"
    with psycopg2.connect(debezium.source_dsn()) as conn, conn.cursor() as cur:
        cur.execute(query.format(f"public.{table}"))
        expected = cur.fetchall()
    with engine.connect() as conn:
        stored = [tuple(r) for r in conn.execute(text(query.format(spec.qualified_target)))]
    assert stored == expected
