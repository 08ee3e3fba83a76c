"""The ``debezium`` format from real change events: a PostgreSQL table goes through a scripted life
while the Debezium connector on the embedded Kafka Connect worker streams it into Kafka (the JSON
converter with and without schemas, and Avro through Apicurio Registry); the pipeline stages it
with Spark over Connect and commits to Postgres. The oracle is the source table itself, read
back row by row: the target must equal it, after a replay and after an older slice replayed."""

from __future__ import annotations

import json
import os
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from sqlalchemy import text

from devstack import debezium, kafka_connect, registry
from reprocess.core.runs import RunKind, RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.operations.plan import plan_run
from reprocess.postgres.commit import commit_run
from tests.integration.helpers import run_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("postgres")]

SENTINEL = 999_999


def _source(*statements: str) -> None:
    """Run ``statements`` in ONE transaction of the source database."""
    conn = psycopg2.connect(debezium.source_dsn())
    with conn, conn.cursor() as cur:
        for s in statements:
            cur.execute(s)
    conn.close()


def _source_rows(table: str) -> dict[int, tuple[Any, ...]]:
    conn = psycopg2.connect(debezium.source_dsn())
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, customer, amount, status FROM public.{table} WHERE id <> {SENTINEL}")
        rows = {r[0]: (r[1], r[2], r[3]) for r in cur.fetchall()}
    conn.close()
    return rows


def _target_rows(engine, spec) -> dict[int, tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT id, customer, amount, status FROM {spec.qualified_target} WHERE id <> :s"),
                            {"s": SENTINEL})  # fmt: skip
        return {r[0]: (r[1], None if r[2] is None else Decimal(r[2]).quantize(Decimal("0.01")), r[3]) for r in rows}


def _wait_for(kafka_config: dict[str, Any], topic: str, marker: bytes, seconds: float = 120) -> int:
    """The offset after the first event whose value holds ``marker`` (e.g. a customer's name), once it arrived."""
    consumer = Consumer({**kafka_config, "group.id": f"{topic}-wait", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error() and marker in (msg.value() or b""):
                return int(msg.offset() or 0) + 1
    finally:
        consumer.close()
    raise AssertionError(f"no change event holding {marker!r} reached {topic} in {seconds:.0f}s")


def _spec(name: str, topic: str, encoding: str) -> PipelineSpec:
    raw = {
        "name": name, "topics": [topic], "format": "debezium", "encoding": encoding, "key": ["id"],
        "target_table": f"{name}.orders", "ordering": {"mode": "column", "column": "lsn"},
        "columns": {"id": "integer", "customer": "text", "amount": "numeric", "status": "text",
                    "lsn": {"type": "bigint", "path": "$source.lsn", "required": True}},
    }  # fmt: skip
    path = Path(os.environ["REPROCESS_PIPELINES_DIR"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return PipelineSpec.from_file(path)


@pytest.mark.parametrize("encoding", ["json", "json_schemas", "avro"])
def test_a_table_life_streamed_by_debezium_replays_into_exactly_the_source_table(
    debezium_connector, kafka_config, engine, unique_name, encoding, request
):
    table, prefix = unique_name, f"dbz_{unique_name}"
    topic = f"{prefix}.public.{table}"
    if encoding == "avro":
        request.getfixturevalue("schema_registry")
        converter = kafka_connect.avro_converter(registry.url())
    else:
        converter = kafka_connect.json_converter(encoding == "json_schemas")
    _source(
        f"CREATE TABLE public.{table} (id int PRIMARY KEY, customer text NOT NULL, amount numeric(10, 2), status text)",
        f"INSERT INTO public.{table} SELECT i, 'c' || i, i + 0.5, 'new' FROM generate_series(1, 5) AS i",
    )
    config = debezium.connector_config(unique_name, [f"public.{table}"], prefix, **{"decimal.handling.mode": "string"},
                                       **converter)  # fmt: skip
    debezium_connector(unique_name, config)  # snapshot: op r for rows 1-5
    _source(f"INSERT INTO public.{table} VALUES (6, 'c6', 6.5, 'new'), (7, 'c7', 7.5, 'new')")
    for n in range(8):  # one key updated many times
        _source(f"UPDATE public.{table} SET amount = {100 + n}, status = 'v{n}' WHERE id = 1")
    _source(f"DELETE FROM public.{table} WHERE id = 2")
    _source(f"UPDATE public.{table} SET id = 30 WHERE id = 3")  # a primary-key change
    _source(f"UPDATE public.{table} SET status = 'u' WHERE id = 4")  # update → delete → insert again
    _source(f"DELETE FROM public.{table} WHERE id = 4")
    _source(f"INSERT INTO public.{table} VALUES (4, 'c4-again', 44, 'back')")
    _wait_for(kafka_config, topic, b"c4-again")
    time.sleep(2)  # its source offsets flushed (offset.flush.interval.ms=1000): the restart resumes, no new snapshot
    kafka_connect.kill()  # the worker SIGKILLed mid-stream; changes while it is down
    _source(f"UPDATE public.{table} SET status = 'bulk' WHERE id IN (5, 6, 7)")  # one transaction, many rows
    _source(f"DELETE FROM public.{table} WHERE id = 6")
    kafka_connect.start()
    debezium_connector(unique_name, config)  # resumes from its offsets and slot; may resend events
    _source(f"INSERT INTO public.{table} VALUES ({SENTINEL}, 'sentinel', 0, 'end')")
    end = _wait_for(kafka_config, topic, b"sentinel")

    spec = _spec(unique_name, topic, "avro" if encoding == "avro" else "json")
    registry_config = json.dumps({"url": registry.ccompat_url()}) if encoding == "avro" else None
    expected = _source_rows(table)
    assert set(expected) == {1, 4, 5, 7, 30}

    first = plan_run(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-1")
    run_spark_stage(spec, first.run_id, registry_config=registry_config)
    result = commit_run(engine, spec, first.run_id)
    assert result.dead_letters == 0
    assert _target_rows(engine, spec) == expected

    def replay(run_id: str, start: int, stop: int) -> Any:
        offsets = json.dumps({topic: {"0": start}}), json.dumps({topic: {"0": stop}})
        params = {"start_mode": "offsets", "start_value": offsets[0], "end_mode": "offsets", "end_value": offsets[1]}
        plan_run(engine, kafka_config, spec, RunRequest.from_params(params, RunKind.BACKFILL), run_id)
        run_spark_stage(spec, run_id, registry_config=registry_config)
        return commit_run(engine, spec, run_id)

    again = replay(f"{unique_name}-2", 0, end)  # the whole log again: nothing changes
    assert (again.rows_upserted, again.rows_deleted) == (0, 0)
    older = replay(f"{unique_name}-3", 0, end // 2)  # an older slice after newer events: nothing changes
    assert (older.rows_upserted, older.rows_deleted) == (0, 0)
    assert _target_rows(engine, spec) == expected  # deleted keys 2, 3 and 6 never come back


def test_a_truncate_fails_the_run_naming_it_and_commits_nothing(debezium_connector, kafka_config, engine, unique_name):
    """A TRUNCATE streamed as op t (the connector told not to skip it) cannot be replayed per key."""
    table, prefix = unique_name, f"dbz_{unique_name}"
    topic = f"{prefix}.public.{table}"
    _source(
        f"CREATE TABLE public.{table} (id int PRIMARY KEY, customer text NOT NULL, amount numeric(10, 2), status text)"
    )
    config = debezium.connector_config(unique_name, [f"public.{table}"], prefix, **{"decimal.handling.mode": "string",
                                       "skipped.operations": "none"})  # fmt: skip
    debezium_connector(unique_name, config)
    _source(f"INSERT INTO public.{table} VALUES (1, 'c1', 1, 'new')")
    _source(f"TRUNCATE public.{table}")
    _source(f"INSERT INTO public.{table} VALUES ({SENTINEL}, 'sentinel', 0, 'end')")
    _wait_for(kafka_config, topic, b"sentinel")

    spec = _spec(unique_name, topic, "json")
    run = plan_run(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-1")
    with pytest.raises(Exception, match=r"a truncate event \(op t\) at .* reprocess cannot replay a truncate"):
        run_spark_stage(spec, run.run_id)
    with engine.connect() as conn:
        exists = conn.execute(text("SELECT to_regclass(:t)"), {"t": spec.qualified_target}).scalar()
        assert exists is None or conn.execute(text(f"SELECT count(*) FROM {spec.qualified_target}")).scalar() == 0
