"""The stage writer's second layer (issue 27, item 1): a row PostgreSQL refuses at the COPY for a
record-level reason becomes a dead letter; an infrastructure error still fails the task.

The writer runs here as a Spark task runs it (``StageTask(...)(batches)``) against the real
PostgreSQL, on a stage made stricter than the Spark checks know (a ``numeric(5,2)``, a
``varchar(5)``, a CHECK constraint), so values pass Spark and are refused by PostgreSQL; and in a
whole run on Kafka and Spark Connect whose transform writes a NUL character no check covers.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from typing import Any

import psycopg2
import pyarrow as pa
import pytest

from reprocess.core.runs import RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import stage_columns
from reprocess.formats.specs import parse_spec
from reprocess.postgres.db import libpq_url
from reprocess.postgres.stage import STAGE_SCHEMA, create_stage
from reprocess.postgres.stage_write import stage_oid
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from reprocess.spark.stage_task import StageTask
from tests.support.helpers import orders_spec, run_spark_stage
from tests.support.hostile_corpus import Case
from tests.support.hostile_run import produce_corpus, snapshot

pytestmark = [pytest.mark.integration("postgres"), pytest.mark.integration("kafka"), pytest.mark.integration("spark")]

ROWS = 1000
BAD = {
    137: ("amount", "123456.78", "column amount: numeric field overflow (SQLSTATE 22003)"),
    500: ("note", "too long", "column note: value too long for type character varying(5) (SQLSTATE 22001)"),
    501: ("qty", -1, 'the row: new row for relation \\"'),
    999: ("amount", "1e400", "column amount: numeric field overflow (SQLSTATE 22003)"),
}


def _spec(name: str) -> PipelineSpec:
    return parse_spec(
        {
            "name": name,
            "topics": [name],
            "key": ["id"],
            "columns": {"id": "text", "amount": "numeric", "qty": "integer", "note": "text"},
            "target_table": f"{name}.t",
        }
    )


def _batches(bad: dict[int, tuple[str, Any, str]], size: int = 300) -> list[pa.RecordBatch]:
    """ROWS stage rows of good records (one key each), the ``bad`` ones carrying the given value."""
    cols: dict[str, list[Any]] = {
        "_kind": ["row"] * ROWS,
        "id": [f"k{i}" for i in range(ROWS)],
        "amount": ["1.25"] * ROWS,
        "qty": [1] * ROWS,
        "note": ["ok"] * ROWS,
        "_kafka_topic": ["t"] * ROWS,
        "_kafka_partition": [0] * ROWS,
        "_kafka_offset": list(range(ROWS)),
        "_kafka_timestamp": [datetime(2026, 11, 1, tzinfo=UTC)] * ROWS,
        "_records": [2] * ROWS,
        "_error": [None] * ROWS,
        "_raw_key": [None] * ROWS,
        "_raw_value": [None] * ROWS,
    }
    for offset, (column, value, _) in bad.items():
        cols[column][offset] = value
    types = {"qty": pa.int32(), "_kafka_partition": pa.int32(), "_kafka_offset": pa.int64(), "_records": pa.int64()}
    types["_kafka_timestamp"] = pa.timestamp("us", tz="UTC")
    table = pa.table({k: pa.array(v, type=types.get(k, pa.string())) for k, v in cols.items()})
    return table.to_batches(max_chunksize=size)


def _strict_stage(db_url: str, spec: PipelineSpec, run_id: str) -> str:
    """The run's stage, made stricter than the spec's types."""
    conn = psycopg2.connect(libpq_url(db_url))
    with conn, conn.cursor() as cur:
        create_stage(conn, spec, run_id)
        table = f'{STAGE_SCHEMA}."{spec.stage_table(run_id)}"'
        cur.execute(f"ALTER TABLE {table} ALTER amount TYPE numeric(5,2) USING amount::numeric(5,2)")
        cur.execute(f"ALTER TABLE {table} ALTER note TYPE varchar(5)")
        cur.execute(f"ALTER TABLE {table} ADD CONSTRAINT qty_not_negative CHECK (qty >= 0)")
    conn.close()
    return table


def _task(db_url: str, spec: PipelineSpec, run_id: str, dsn: str) -> StageTask:
    """The stage write of a Spark task (task 0, attempt 0 outside Spark) into the run's stage."""
    table = f"{STAGE_SCHEMA}.{spec.stage_table(run_id)}"
    conn = psycopg2.connect(libpq_url(db_url))
    with conn, conn.cursor() as cur:
        oid = stage_oid(cur, table)
    conn.close()
    assert oid is not None
    return StageTask(table, oid, tuple(stage_columns(spec)), dsn)


def _stage_rows(db_url: str, table: str) -> list[tuple[Any, ...]]:
    conn = psycopg2.connect(libpq_url(db_url))
    with conn, conn.cursor() as cur:
        cur.execute(f"SELECT _kind, id, amount, qty, note, _kafka_offset, _records, _error FROM {table} ORDER BY 6")
        rows = cur.fetchall()
    conn.close()
    return rows


def test_rows_postgres_refuses_are_isolated_as_dead_letters_naming_column_and_reason(db_url, engine, unique_name):
    spec = _spec(unique_name)
    table = _strict_stage(db_url, spec, "r1")
    copier = _task(db_url, spec, "r1", libpq_url(db_url))

    (reported,) = list(copier(iter(_batches(BAD))))

    assert reported.column("rows").to_pylist() == [ROWS]  # every input row is one stage row
    rows = _stage_rows(db_url, table)
    assert len(rows) == ROWS
    dead = {r[5]: r for r in rows if r[0] == "dead"}
    assert sorted(dead) == sorted(BAD)
    for offset, (_, _, reason) in BAD.items():
        _, key, amount, qty, note, _, records, error = dead[offset]
        assert (key, amount, qty, note, records) == (None, None, None, None, 2)  # lineage and count kept
        assert error.startswith("stage error: PostgreSQL refused ") and reason in error, error
    assert 'violates check constraint \\"qty_not_negative\\" (SQLSTATE 23514)' in dead[501][7]
    good = [r for r in rows if r[0] == "row"]
    assert len(good) == ROWS - len(BAD)
    assert all((str(r[2]), r[3], r[4], r[7]) == ("1.25", 1, "ok", None) for r in good)


def test_a_lost_connection_fails_the_copy_and_stages_nothing(db_url, engine, unique_name):
    """An infrastructure error is no record's fault: the task fails (Spark and Airflow retry it)."""
    spec = _spec(unique_name)
    table = _strict_stage(db_url, spec, "r2")
    copier = _task(db_url, spec, "r2", libpq_url(db_url) + "?application_name=refusal_test_copier")
    locker = psycopg2.connect(libpq_url(db_url))
    failure: list[BaseException] = []

    def copy() -> None:
        try:
            list(copier(iter(_batches(BAD))))
        except BaseException as exc:  # the test inspects it
            failure.append(exc)

    with locker.cursor() as cur:
        cur.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")  # the copier's COPY waits here
        worker = threading.Thread(target=copy)
        worker.start()
        pid = None
        watcher = psycopg2.connect(libpq_url(db_url))
        watcher.autocommit = True  # pg_stat_activity is read anew by each statement only outside a transaction
        with watcher.cursor() as watch:
            for _ in range(200):
                watch.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = 'refusal_test_copier' "
                    "AND wait_event_type = 'Lock'"
                )
                found = watch.fetchone()
                if found:
                    pid = found[0]
                    break
                time.sleep(0.05)
            assert pid is not None, ("the copier never waited for the lock", failure)
            watch.execute("SELECT pg_terminate_backend(%s)", (pid,))
        watcher.close()
    locker.rollback()
    locker.close()
    worker.join(30)

    (exc,) = failure  # raised, not isolated: the server's termination (the rollback then finds the connection gone)
    assert isinstance(exc, psycopg2.OperationalError) or isinstance(exc.__context__, psycopg2.OperationalError), exc
    assert "server closed the connection" in str(exc.__context__ or exc)
    assert _stage_rows(db_url, table) == []


def test_a_transform_output_postgres_refuses_is_a_dead_letter_and_the_run_commits(kafka_config, engine, unique_name):
    spec = orders_spec(
        unique_name, unique_name, key=["id"], columns={"id": {"type": "text", "required": True}, "t": "text"},
        transform="tests.support.transform_fns:nul_in_text", transform_version="1", max_dead_letter_ratio=0.5,
    )  # fmt: skip
    sent = [Case(f"k{i}", "refused", json.dumps({"id": f"k{i}", "t": f"bad{i}" if i % 10 == 3 else f"ok{i}"}).encode())
            for i in range(50)]  # fmt: skip
    offsets = produce_corpus(kafka_config, unique_name, sent)
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    run_spark_stage(spec, plan.run_id)
    result = commit_stored(engine, spec, plan.run_id)

    # The oracle, from what was sent: the five "bad" texts PostgreSQL cannot store are dead letters, the rest rows.
    assert (result.records_read, result.rows_upserted, result.dead_letters) == (50, 45, 5)
    rows, dead = snapshot(engine, spec)
    assert {r["id"]: r["t"] for r in rows} == {f"k{i}": f"ok{i}" for i in range(50) if i % 10 != 3}
    assert {d["offset"] for d in dead} == {offsets[f"k{i}"] for i in range(50) if i % 10 == 3}
    # Issue 39 item 7: the transform's output is checked as a decoded value is, before the dedupe
    # (a refusal at the COPY would hide the key's older records of the run).
    assert all(
        d["error"].startswith(
            "text error: column t holds a NUL character or bytes that are not UTF-8, which "
            "PostgreSQL text cannot store: "
        )
        for d in dead
    ), dead[0]["error"]
