"""Records PostgreSQL cannot hold where the Spark checks pass them (issue 39, items 2 and 7): a key
longer than PostgreSQL's btree index row limit is a dead letter naming the limit (never a merge that
fails with SQLSTATE 54000 on every attempt), and a key's newest record that PostgreSQL refuses at the
stage lets the key's newest storable record of the run land. Expected rows and dead letters come
from what each test sends; the oracle reads PostgreSQL with SQL alone.
"""

from __future__ import annotations

import base64
import json
import os
import time
from datetime import UTC, datetime, timedelta

import psycopg2
import psycopg2.sql
import pytest
from sqlalchemy import text

from reprocess.core.errors import ReconciliationGap
from reprocess.core.runs import RunRequest
from reprocess.formats.specs import parse_spec
from reprocess.postgres.db import libpq_url
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import orders_spec, reconcile_over_connect, run_spark_stage
from tests.support.hostile_corpus import Case
from tests.support.hostile_run import produce_corpus, snapshot
from tests.support.staging import Record, stage_and_commit

pytestmark = [pytest.mark.integration("postgres"), pytest.mark.integration("kafka"), pytest.mark.integration("spark")]

_COLUMNS = {"id": {"type": "text", "required": True}, "t": "text"}


def test_a_key_over_the_btree_index_row_limit_is_a_dead_letter_and_the_run_commits(kafka_config, engine, unique_name):
    spec = orders_spec(unique_name, unique_name, key=["id"], columns=_COLUMNS, tombstones="delete",
                       max_dead_letter_ratio=0.5)  # fmt: skip
    long_key = base64.b64encode(os.urandom(2250)).decode()  # 3,000 characters that do not compress
    long_tombstone = base64.b64encode(os.urandom(2250)).decode()
    sent = [Case(f"k{i}", "ok", json.dumps({"id": f"k{i}", "t": f"v{i}"}).encode()) for i in range(20)]
    sent.insert(7, Case("long", "long key", json.dumps({"id": long_key, "t": "x"}).encode()))
    sent.insert(12, Case(long_tombstone, "long tombstone key", None))
    offsets = produce_corpus(kafka_config, unique_name, sent)
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    run_spark_stage(spec, plan.run_id)
    result = commit_stored(engine, spec, plan.run_id)

    assert (result.records_read, result.dead_letters) == (22, 2)
    rows, dead = snapshot(engine, spec)
    assert {r["id"]: r["t"] for r in rows} == {f"k{i}": f"v{i}" for i in range(20)}
    assert {d["offset"] for d in dead} == {offsets["long"], offsets[long_tombstone]}
    assert all("btree index row limit is 2704 bytes" in d["error"] and "3000 bytes" in d["error"] for d in dead), dead


def _verdicts(engine, spec) -> set[str]:
    with engine.connect() as conn:
        return set(
            conn.execute(
                text("SELECT verdict FROM reprocess.reconciliations WHERE pipeline = :p"), {"p": spec.name}
            ).scalars()
        )


def test_a_newest_record_postgres_cannot_store_lets_the_keys_older_good_record_land(kafka_config, engine, unique_name):
    """The transform writes a NUL into the newest record of key K (as in test_stage_refusals): K's
    older good record of the same run lands, the NUL one is a dead letter, and reconciliation,
    which stages the window the same way, compares K (it reports K missing once its row is gone)."""
    spec = orders_spec(
        unique_name, unique_name, key=["id"], columns=_COLUMNS, transform="tests.support.transform_fns:nul_in_text",
        transform_version="1", max_dead_letter_ratio=0.5,
    )  # fmt: skip
    start = datetime.now(UTC) - timedelta(minutes=1)
    sent = [Case(f"k{i}", "ok", json.dumps({"id": f"k{i}", "t": f"ok{i}"}).encode()) for i in range(10)]
    sent.insert(3, Case("K-good", "older good", json.dumps({"id": "K", "t": "good"}).encode()))
    sent.insert(8, Case("K-bad", "newest, unstorable", json.dumps({"id": "K", "t": "bad"}).encode()))
    offsets = produce_corpus(kafka_config, unique_name, sent)
    time.sleep(1.5)
    end = datetime.now(UTC)
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    run_spark_stage(spec, plan.run_id)
    result = commit_stored(engine, spec, plan.run_id)

    assert (result.records_read, result.dead_letters) == (12, 1)
    rows, dead = snapshot(engine, spec)
    assert {r["id"]: (r["t"], r["_kafka_offset"]) for r in rows} == {
        **{f"k{i}": (f"ok{i}", offsets[f"k{i}"]) for i in range(10)},
        "K": ("good", offsets["K-good"]),
    }
    assert [d["offset"] for d in dead] == [offsets["K-bad"]]
    assert "column t holds a NUL character" in dead[0]["error"], dead[0]["error"]

    reconcile_over_connect(engine, spec, start, end, f"{unique_name}-check-1")
    assert _verdicts(engine, spec) == {"ok"}
    with engine.begin() as conn:
        conn.execute(text(f"DELETE FROM {spec.qualified_target} WHERE id = 'K'"))
    with pytest.raises(ReconciliationGap):
        reconcile_over_connect(engine, spec, start, end, f"{unique_name}-check-2")


def test_a_record_the_merge_refuses_is_a_dead_letter_and_the_rest_commits(engine, db_url, unique_name):
    """What the stage cannot see fails the merge on every attempt unless it is isolated: a CHECK the
    user added to the target (SQLSTATE 23514), a key staged over the btree row limit for the target
    and the deletion markers (54000; staged here past the Spark check, as a stage written before it
    holds it). Each becomes a dead letter naming PostgreSQL's reason; every other record lands."""
    spec = parse_spec(
        {"name": unique_name, "topics": [unique_name], "key": ["id"], "columns": {"id": "text", "s": "text"},
         "target_table": f"{unique_name}.items", "tombstones": "delete", "max_dead_letter_ratio": 0.9},
        source=f"{unique_name}.yaml",
    )  # fmt: skip
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [Record(0, 0, {"id": "a", "s": "a0"})])
    with engine.begin() as conn:
        conn.execute(text(f"ALTER TABLE {spec.qualified_target} ADD CONSTRAINT no_forbidden CHECK (s <> 'forbidden')"))
    long_row, long_tombstone = (base64.b64encode(os.urandom(2250)).decode() for _ in range(2))
    result = stage_and_commit(engine, db_url, spec, f"{unique_name}-2", [
        Record(0, 1, {"id": "a", "s": "a1"}), Record(0, 2, {"id": "b", "s": "forbidden"}),
        Record(0, 3, {"id": long_row, "s": "x"}), Record(0, 4, {"id": long_tombstone}, tombstone=True),
        Record(0, 5, {"id": "c", "s": "c5"}),
    ])  # fmt: skip

    assert (result.rows_upserted, result.dead_letters) == (2, 3)
    with engine.connect() as conn:
        rows = dict(conn.execute(text(f"SELECT id, s FROM {spec.qualified_target}")).all())
        dead = dict(
            conn.execute(
                text('SELECT "offset", error FROM reprocess.dead_letters WHERE pipeline = :p'), {"p": spec.name}
            ).all()
        )
    assert rows == {"a": "a1", "c": "c5"}
    assert sorted(dead) == [2, 3, 4]
    assert 'violates check constraint \\"no_forbidden\\" (SQLSTATE 23514)' in dead[2], dead[2]
    assert all("exceeds btree version 4 maximum 2704" in dead[o] and "(SQLSTATE 54000)" in dead[o] for o in (3, 4))
    assert all(e.startswith("merge error: PostgreSQL refused the record's row in ") for e in dead.values())


def test_a_long_key_fits_the_moved_values_and_incomplete_values_of_a_debezium_pipeline(engine, db_url, unique_name):
    """A key the target indexes (under the Spark check's budget) is held twice by a moved value (old
    and new key, as JSON text) and as jsonb by an incomplete value: both must be storable, or a
    primary-key change or a left-out value of such a key fails every commit of its run."""
    from reprocess.postgres import left_out
    from reprocess.postgres.stage import STAGE_SCHEMA, create_stage

    spec = parse_spec(
        {"name": unique_name, "topics": [unique_name], "key": ["id"], "format": "debezium",
         "columns": {"id": "text", "s": "text"}, "target_table": f"{unique_name}.items"},
        source=f"{unique_name}.yaml",
    )  # fmt: skip
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [Record(0, 0, {"id": "a", "s": "a0"})])
    old, new = (base64.b64encode(os.urandom(2010)).decode() for _ in range(2))  # 2,680: the budget
    stage = f'{STAGE_SCHEMA}."{spec.stage_table(f"{unique_name}-2")}"'
    conn = psycopg2.connect(libpq_url(db_url))
    with conn, conn.cursor() as cur:
        create_stage(conn, spec, f"{unique_name}-2")
        lineage = "_kafka_topic, _kafka_partition, _kafka_offset, _records"
        cur.execute(
            f"INSERT INTO {stage} (_kind, id, s, {lineage}, _unchanged, _row_key, _new_key, _moved_at) VALUES "
            f"('moved', %s, 'moved', %s, 0, 1, 0, NULL, %s, %s, '1'), ('row', %s, NULL, %s, 0, 2, 1, 's', %s, NULL, "
            "NULL)",
            (old, unique_name, json.dumps({"id": old}), json.dumps({"id": new}), new, unique_name,
             json.dumps({"id": new})),
        )  # fmt: skip
        cur.execute(
            f"INSERT INTO {spec.qualified_target} (id, s, _kafka_topic, _kafka_partition, _kafka_offset, _run_id) "
            "VALUES (%s, NULL, %s, 0, 2, %s)",
            (new, unique_name, f"{unique_name}-2"),
        )
        stage_sql = psycopg2.sql.SQL(stage)
        left_out.keep_moved_values(cur, spec, stage_sql, spec.name, f"{unique_name}-2")
        assert left_out.record_incomplete(cur, spec, stage_sql, spec.name, f"{unique_name}-2") == 1
    conn.close()
    with engine.connect() as c:
        moved = c.execute(text("SELECT old_key, new_key FROM reprocess.moved_values WHERE pipeline = :p"),
                          {"p": spec.name}).all()  # fmt: skip
        incomplete = c.execute(text('SELECT key, "column" FROM reprocess.incomplete_values WHERE pipeline = :p'),
                               {"p": spec.name}).all()  # fmt: skip
    assert [tuple(m) for m in moved] == [(json.dumps({"id": old}), json.dumps({"id": new}))]
    assert [tuple(i) for i in incomplete] == [({"id": new}, "s")]
