"""The ``debezium`` format from real change events: ONE PostgreSQL table goes through a scripted
life while three Debezium connectors on the embedded Kafka Connect worker stream it into Kafka at
once (the JSON converter with and without schemas, and Avro through Apicurio Registry); a
pipeline per topic stages it with Spark over Connect and commits to Postgres. The oracle is the
source table itself, read back row by row: the target must equal it, after a replay, after an
older slice replayed, and reconciliation must find no gap.

The table has a large text column stored out of line (``STORAGE EXTERNAL``, REPLICA IDENTITY
DEFAULT), so an update that leaves it unchanged streams Debezium's placeholder for it."""

from __future__ import annotations

import itertools
import json
import os
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import yaml
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as examples
from hypothesis import strategies as st
from sqlalchemy import text

from bench.cdc_source import events as _events
from bench.cdc_source import source as _source
from bench.cdc_source import wait_for as _wait_for
from devstack import debezium, kafka_connect, registry
from reprocess.core.errors import ReconciliationGap
from reprocess.core.runs import RunKind, RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import read_spec
from reprocess.runner.start import commit_stored, snapshot_and_migrate, start_run
from tests.support.helpers import reconcile_over_connect, run_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("postgres")]

SENTINEL = 999_999
ENCODINGS = ("json", "json_schemas", "avro")
# The oracle reads the source table; the target's label is the spec's expr over the row's status.
SOURCE_COLUMNS = "id, customer, amount, status, md5(notes), length(notes), upper(status)"
TARGET_COLUMNS = "id, customer, amount, status, md5(notes), length(notes), label"


def _source_rows(table: str) -> dict[int, tuple[Any, ...]]:
    conn = psycopg2.connect(debezium.source_dsn())
    with conn.cursor() as cur:
        cur.execute(f"SELECT {SOURCE_COLUMNS} FROM public.{table} WHERE id <> {SENTINEL}")
        rows = {r[0]: tuple(r[1:]) for r in cur.fetchall()}
    conn.close()
    return rows


def _target_rows(engine, spec) -> dict[int, tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(f"SELECT {TARGET_COLUMNS} FROM {spec.qualified_target} WHERE id <> :s"), {"s": SENTINEL}
        )
        return {r[0]: (r[1], None if r[2] is None else Decimal(r[2]).quantize(Decimal("0.01")), *r[3:]) for r in rows}


def _spec(name: str, topic: str, encoding: str, **settings: Any) -> PipelineSpec:
    """The pipeline of the table, in the default (Kafka offset) order; ``settings`` are further spec fields."""
    raw = {
        "name": name, "topics": [topic], "format": "debezium", "encoding": encoding, "key": ["id"],
        "target_table": f"{name}.orders",
        "columns": {"id": "integer", "customer": "text", "amount": "numeric", "status": "text", "notes": "text",
                    "lsn": {"type": "bigint", "path": "$source.lsn", "required": True},
                    "label": {"type": "text", "expr": "upper(status)"}},
    }  # fmt: skip
    raw.update(settings)
    path = Path(os.environ["REPROCESS_PIPELINES_DIR"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return read_spec(path)


def _large(tag: str) -> str:
    """SQL of a text of 6,400 characters: with STORAGE EXTERNAL it is stored out of line (TOAST)."""
    return f"repeat(md5('{tag}'), 200)"


LARGE_I = "repeat(md5(i::text), 200)"  # the same, per row of generate_series(…) AS i


def _connectors(unique_name: str, table: str) -> dict[str, tuple[str, str, dict[str, str]]]:
    """Per encoding: (connector name, topic, connector config)."""
    out = {}
    for i, encoding in enumerate(ENCODINGS):
        name, prefix = f"{unique_name}_{i}", f"dbz{i}_{unique_name}"
        if encoding == "avro":
            converter = kafka_connect.avro_converter(registry.url())
        else:
            converter = kafka_connect.json_converter(encoding == "json_schemas")
        config = debezium.connector_config(name, [f"public.{table}"], prefix, **{"decimal.handling.mode": "string"},
                                           **converter)  # fmt: skip
        out[encoding] = (name, f"{prefix}.public.{table}", config)
    return out


def test_a_table_life_streamed_by_debezium_replays_into_exactly_the_source_table(
    debezium_connector, schema_registry, kafka_config, engine, unique_name
):
    table = unique_name
    _source(
        f"CREATE TABLE public.{table} (id int PRIMARY KEY, customer text NOT NULL, amount numeric(10, 2), "
        "status text, notes text)",
        f"ALTER TABLE public.{table} ALTER COLUMN notes SET STORAGE EXTERNAL",
        f"INSERT INTO public.{table} SELECT i, 'c' || i, i + 0.5, 'new', {LARGE_I} FROM generate_series(1, 5) i",
        f"UPDATE public.{table} SET notes = 'short' WHERE id = 3",  # inline: a key change sends it whole
    )
    connectors = _connectors(unique_name, table)
    for name, _, config in connectors.values():
        debezium_connector(name, config)  # snapshot: op r for rows 1-5
    _source(f"INSERT INTO public.{table} VALUES (6, 'c6', 6.5, 'new', {_large('6')}), (7, 'c7', 7.5, 'new', NULL)")
    for n in range(8):  # one key updated many times, its large column unchanged: the placeholder every time
        _source(f"UPDATE public.{table} SET amount = {100 + n}, status = 'v{n}' WHERE id = 1")
    _source(f"UPDATE public.{table} SET notes = {_large('5-new')} WHERE id = 5")  # the large column changed
    _source(f"UPDATE public.{table} SET status = 'after' WHERE id = 5")  # ... then left unchanged
    _source(f"DELETE FROM public.{table} WHERE id = 2")  # op d and its tombstone
    _source(f"UPDATE public.{table} SET id = 30 WHERE id = 3")  # a primary-key change: d of 3, c of 30
    _source(f"UPDATE public.{table} SET status = 'u' WHERE id = 4")  # update → delete → insert → update
    _source(f"DELETE FROM public.{table} WHERE id = 4")
    _source(f"INSERT INTO public.{table} VALUES (4, 'c4-again', 44, 'back', {_large('4-again')})")
    _source(f"UPDATE public.{table} SET status = 'back-again' WHERE id = 4")  # its large column sent by the insert
    for _, topic, _ in connectors.values():
        _wait_for(kafka_config, topic, b"back-again")
    specs = {e: _spec(f"{unique_name}_{e}", topic, "avro" if e == "avro" else "json")
             for e, (_, topic, _) in connectors.items()}  # fmt: skip
    registry_config = {e: json.dumps({"url": registry.ccompat_url()}) if e == "avro" else None for e in ENCODINGS}

    def run(encoding: str, run_id: str, params: dict[str, str] | None = None) -> Any:
        spec = specs[encoding]
        request = RunRequest.from_params(params, RunKind.BACKFILL) if params else RunRequest.incremental()
        snapshot_and_migrate(engine, kafka_config, spec, request, run_id)
        run_spark_stage(spec, run_id, registry_config=registry_config[encoding])
        return commit_stored(engine, spec, run_id)

    so_far = _source_rows(table)
    for encoding, spec in specs.items():  # the first scheduled run
        assert run(encoding, f"{spec.name}-1").dead_letters == 0, encoding
        assert _target_rows(engine, spec) == so_far, encoding

    _source(  # one transaction touching many rows; 1 and 5 keep the large values the target holds
        f"INSERT INTO public.{table} SELECT i, 'c' || i, i, 'bulk', {LARGE_I} FROM generate_series(100, 139) i",
        f"UPDATE public.{table} SET status = 'bulk' WHERE id IN (1, 5, 6, 7)",
        f"DELETE FROM public.{table} WHERE id BETWEEN 130 AND 139",
    )
    # No worker kill here (a JVM restart, ~30-50 s): resuming from offsets and slots is test_cdc.py's and
    # test_cdc_source_table.py's; the events a resume re-sends are duplicates, and the whole-log replay
    # below applies every event of each encoding a second time.
    _source(f"DELETE FROM public.{table} WHERE id = 6")
    _source(f"INSERT INTO public.{table} VALUES ({SENTINEL}, 'sentinel', 0, 'end', NULL)")
    ends = {e: _wait_for(kafka_config, topic, b"sentinel") for e, (_, topic, _) in connectors.items()}
    expected = _source_rows(table)
    assert set(expected) == {1, 4, 5, 7, 30, *range(100, 130)}
    assert expected[1][4] == expected[5][4] == 6400 and expected[30][4] == len("short")

    for encoding, spec in specs.items():
        started = time.monotonic()
        second = run(encoding, f"{spec.name}-2")  # the next scheduled run: the placeholders keep the target's values
        assert second.dead_letters == 0, encoding
        assert _target_rows(engine, spec) == expected, encoding
        topic = spec.topics[0]

        def offsets(start: int, stop: int, topic: str = topic) -> dict[str, str]:
            return {"start_mode": "offsets", "start_value": json.dumps({topic: {"0": start}}),
                    "end_mode": "offsets", "end_value": json.dumps({topic: {"0": stop}})}  # fmt: skip

        again = run(encoding, f"{spec.name}-3", offsets(0, ends[encoding]))  # the whole log again: nothing changes
        assert (again.rows_upserted, again.rows_deleted) == (0, 0), encoding
        older = run(encoding, f"{spec.name}-4", offsets(0, ends[encoding] // 2))  # older slice after newer events
        assert (older.rows_upserted, older.rows_deleted) == (0, 0), encoding
        assert _target_rows(engine, spec) == expected, encoding  # deleted keys 2, 3, 6, 130-139 never come back
        now = datetime.now(UTC)
        reconcile_over_connect(engine, spec, now - timedelta(hours=1), now + timedelta(minutes=5), f"{spec.name}-check",
                               registry_config=registry_config[encoding])  # fmt: skip
        print(f"{encoding}: {ends[encoding]} events, 3 runs and a reconciliation in {time.monotonic() - started:.1f} s")


def test_a_truncate_fails_the_run_naming_it_and_commits_nothing(debezium_connector, kafka_config, engine, unique_name):
    """A TRUNCATE streamed as op t (the connector told not to skip it) cannot be replayed per key."""
    table, prefix = unique_name, f"dbz_{unique_name}"
    topic = f"{prefix}.public.{table}"
    _source(
        f"CREATE TABLE public.{table} (id int PRIMARY KEY, customer text NOT NULL, amount numeric(10, 2), "
        "status text, notes text)"
    )
    config = debezium.connector_config(unique_name, [f"public.{table}"], prefix, **{"decimal.handling.mode": "string",
                                       "skipped.operations": "none"})  # fmt: skip
    debezium_connector(unique_name, config)
    _source(f"INSERT INTO public.{table} VALUES (1, 'c1', 1, 'new', NULL)")
    _source(f"TRUNCATE public.{table}")
    _source(f"INSERT INTO public.{table} VALUES ({SENTINEL}, 'sentinel', 0, 'end', NULL)")
    _wait_for(kafka_config, topic, b"sentinel")

    spec = _spec(unique_name, topic, "json")
    run = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-1")
    with pytest.raises(Exception, match=r"a truncate event \(op t\) at .* reprocess cannot replay a truncate"):
        run_spark_stage(spec, run.run_id)
    with engine.connect() as conn:
        exists = conn.execute(text("SELECT to_regclass(:t)"), {"t": spec.qualified_target}).scalar()
        assert exists is None or conn.execute(text(f"SELECT count(*) FROM {spec.qualified_target}")).scalar() == 0


def test_exprs_over_left_out_values_keep_their_values_and_what_cannot_be_derived_is_a_dead_letter(
    debezium_connector, kafka_config, engine, unique_name
):
    """A connector with its own ``unavailable.value.placeholder`` (the spec names it) streams updates
    that leave two large values unchanged: a mapped text column and an unmapped jsonb one that an
    ``expr`` reads. Every column, the exprs over left-out values included, equals the source table's
    (the oracle: the source table, read with psycopg2). An ``expr`` reading a left-out value beside a
    sent one, or a ``where`` reading a left-out value, cannot be derived from the event: those
    updates are dead letters naming the value, never a stale value or a dropped update."""
    table, prefix, placeholder = unique_name, f"dbz_{unique_name}", "<unchanged-toast>"
    topic = f"{prefix}.public.{table}"
    _source(
        f"CREATE TABLE public.{table} (id int PRIMARY KEY, status text, notes text, attrs jsonb)",
        f"ALTER TABLE public.{table} ALTER COLUMN notes SET STORAGE EXTERNAL",
        f"ALTER TABLE public.{table} ALTER COLUMN attrs SET STORAGE EXTERNAL",
    )
    config = debezium.connector_config(unique_name, [f"public.{table}"], prefix, **{
        "unavailable.value.placeholder": placeholder})  # fmt: skip
    debezium_connector(unique_name, config)
    _source(
        f"INSERT INTO public.{table} SELECT i, 'new', {LARGE_I}, "
        "jsonb_build_object('color', 'red' || i, 'pad', repeat(md5(i::text), 200)) FROM generate_series(1, 3) i"
    )
    _source(f"UPDATE public.{table} SET status = 'paid' WHERE id IN (1, 2)")  # notes and attrs unchanged
    _source(f"UPDATE public.{table} SET status = 'shipped' WHERE id = 1")
    _source(f"INSERT INTO public.{table} VALUES ({SENTINEL}, 'sentinel', NULL, NULL)")
    _wait_for(kafka_config, topic, b"sentinel")
    updates = [e["after"] for _, e in _events(kafka_config, topic) if e and e["op"] == "u"]
    assert [(u["notes"], u["attrs"]) for u in updates] == [(placeholder, placeholder)] * 3  # what the connector sent

    def run(name: str, **settings: Any) -> tuple[PipelineSpec, Any]:
        spec = _spec(name, topic, "json", unavailable_value_placeholder=placeholder, **settings)
        snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{name}-1")
        run_spark_stage(spec, f"{name}-1")
        return spec, commit_stored(engine, spec, f"{name}-1")

    spec, result = run(unique_name, columns={
        "id": "integer", "status": "text", "notes": "text", "notes_len": {"type": "integer", "expr": "length(notes)"},
        "color": {"type": "text", "expr": "get_json_object(attrs, '$.color')"},
        "tag": {"type": "text", "expr": "id || ':' || length(notes)"}})  # fmt: skip
    assert result.dead_letters == 0
    with psycopg2.connect(debezium.source_dsn()) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id, status, md5(notes), length(notes), attrs->>'color', id || ':' || length(notes) "
                    f"FROM public.{table} ORDER BY id")  # fmt: skip
        expected = cur.fetchall()
    with engine.connect() as conn:
        got = conn.execute(text(f"SELECT id, status, md5(notes), notes_len, color, tag FROM {spec.qualified_target} "
                                "ORDER BY id")).all()  # fmt: skip
    assert [tuple(r) for r in got] == expected

    label = {"type": "text", "expr": "upper(status) || '-' || get_json_object(attrs, '$.color')"}
    for name, settings, reads in (
        (f"{unique_name}_x", {"columns": {"id": "integer", "label": label}}, "the expr of column label reads attrs"),
        (f"{unique_name}_w", {"columns": {"id": "integer", "status": "text"}, "where": "length(notes) > 0"},
         "the where predicate reads notes"),
    ):  # fmt: skip
        spec, result = run(name, max_dead_letter_ratio=1, **settings)
        assert result.dead_letters == 3, name  # the three updates; the inserts derive as usual
        with engine.connect() as conn:
            errors = (
                conn.execute(text("SELECT error FROM reprocess.dead_letters WHERE pipeline = :p"), {"p": spec.name})
                .scalars()
                .all()
            )
        assert len(errors) == 3 and all(f"{reads}, which this change event left out" in e for e in errors), errors


def _rows_by_key(cur: Any, query: str) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    cur.execute(query)
    return {tuple(r[:2]): tuple(r[2:]) for r in cur.fetchall()}


def test_primary_key_changes_over_unchanged_large_values_keep_them_whatever_the_batch_cut(
    debezium_connector, kafka_config, engine, unique_name
):
    """Primary-key changes of rows whose large values are unchanged (REPLICA IDENTITY DEFAULT: the
    new key's create carries the placeholder): across runs, inside one run, a chain of them, a
    re-key onto a key deleted before, after the value changed in the same run; beside an
    update → delete → re-insert. The oracle is the source table: every run — incrementals, one
    backfill, a backfill in two-record batches (cut inside key changes), a rebuild
    — gives it value for value, and a whole replay writes nothing. A slice that starts after the
    full values, into an empty table, knows them nowhere: those values are recorded incomplete."""
    table, prefix = unique_name, f"dbz_{unique_name}"
    topic = f"{prefix}.public.{table}"
    notes, attrs = LARGE_I, "jsonb_build_object('n', i, 'pad', repeat(md5(i::text), 200))"
    _source(
        f"CREATE TABLE public.{table} (id int, region text, status text, notes text, attrs jsonb, "
        "PRIMARY KEY (id, region))",
        f"ALTER TABLE public.{table} ALTER COLUMN notes SET STORAGE EXTERNAL",
        f"ALTER TABLE public.{table} ALTER COLUMN attrs SET STORAGE EXTERNAL",
        f"INSERT INTO public.{table} SELECT i, 'eu', 'new', {notes}, {attrs} FROM generate_series(1, 3) i",
    )
    debezium_connector(unique_name, debezium.connector_config(unique_name, [f"public.{table}"], prefix))
    _source(f"INSERT INTO public.{table} SELECT i, 'eu', 'new', {notes}, {attrs} FROM generate_series(4, 7) i")
    _source(f"UPDATE public.{table} SET status = 'first' WHERE id IN (1, 2)")  # large values unchanged
    _source(f"INSERT INTO public.{table} VALUES ({SENTINEL}, 'end', 'first-end', NULL, NULL)")
    first_end = _wait_for(kafka_config, topic, b"first-end")

    def spec_of(kind: str) -> PipelineSpec:
        return _spec(f"{unique_name}_{kind}", topic, "json", key=["id", "region"], columns={
            "id": "integer", "region": "text", "status": "text", "notes": "text", "attrs": "text"})  # fmt: skip

    def run(spec: PipelineSpec, run_id: str, start: int | None = None, **params: Any) -> Any:
        """An incremental, or a backfill from ``start`` to the end (``params``: the trigger form's)."""
        if start is None:
            request = RunRequest.incremental()
        else:
            request = RunRequest.from_params({"start_mode": "offsets", "start_value": json.dumps({topic: {"0": start}}),
                                              **params}, RunKind.BACKFILL)  # fmt: skip
        snapshot_and_migrate(engine, kafka_config, spec, request, run_id)
        run_spark_stage(spec, run_id, batch_size=params.get("batch_size"))
        return commit_stored(engine, spec, run_id)

    incremental = spec_of("inc")
    assert run(incremental, f"{incremental.name}-1").values_incomplete == 0  # before the keys change
    _source(f"UPDATE public.{table} SET id = 10 WHERE id = 1")  # its full value is in the first run only
    _source(f"UPDATE public.{table} SET id = 20, region = 'us' WHERE id = 2")  # a chain: 2 → 20 → 21
    _source(f"UPDATE public.{table} SET id = 21 WHERE id = 20")
    _source(f"UPDATE public.{table} SET status = 'chained' WHERE id = 21")
    _source(f"DELETE FROM public.{table} WHERE id = 3")  # 4 re-keyed onto the deleted 3
    _source(f"UPDATE public.{table} SET id = 3 WHERE id = 4")
    _source(f"UPDATE public.{table} SET notes = 'changed', attrs = '{{\"n\": 5}}' WHERE id = 5")
    _source(f"UPDATE public.{table} SET id = 50 WHERE id = 5")  # moves the value of this range
    _source(f"UPDATE public.{table} SET status = 'u' WHERE id = 6")  # update → delete → insert → update
    _source(f"DELETE FROM public.{table} WHERE id = 6")
    _source(f"INSERT INTO public.{table} VALUES (6, 'eu', 'back', {_large('6-again')}, '{{\"n\": 66}}')")
    _source(f"UPDATE public.{table} SET status = 'back-again' WHERE id = 6")
    _source(f"UPDATE public.{table} SET id = 70 WHERE id = 7")
    _source(f"UPDATE public.{table} SET status = 'last' WHERE id = 70")
    _source(f"DELETE FROM public.{table} WHERE id = {SENTINEL}")  # a rebuild reads no record of it after delete-records
    _source(f"INSERT INTO public.{table} VALUES ({SENTINEL}, 'end2', 'last-end', NULL, NULL)")
    end = _wait_for(kafka_config, topic, b"last-end")
    creates = [e for _, e in _events(kafka_config, topic) if e and e["op"] == "c" and e["after"]["id"] in (10, 21, 3)]
    assert len(creates) == 3 and all(e["after"]["notes"] == "__debezium_unavailable_value" for e in creates)

    query = "SELECT id, region, status, md5(notes), md5(attrs::text) FROM {} WHERE id <> %s ORDER BY id, region"
    with psycopg2.connect(debezium.source_dsn()) as conn, conn.cursor() as cur:
        expected = _rows_by_key(cur, query.format(f"public.{table}") % SENTINEL)
    assert {k[0] for k in expected} == {10, 21, 3, 50, 6, 70}

    def stored(spec: PipelineSpec) -> dict[tuple[Any, ...], tuple[Any, ...]]:
        with engine.connect() as conn:
            rows = conn.execute(text(query.replace("attrs::text", "attrs").format(spec.qualified_target) % SENTINEL))
            return {tuple(r[:2]): tuple(r[2:]) for r in rows}

    whole, batched = spec_of("one"), spec_of("cut")
    assert run(incremental, f"{incremental.name}-2").values_incomplete == 0
    assert stored(incremental) == expected
    assert run(whole, f"{whole.name}-1", 0).values_incomplete == 0
    assert stored(whole) == expected
    assert run(batched, f"{batched.name}-1", 0, batch_size=2).values_incomplete == 0
    assert stored(batched) == expected
    for spec in (incremental, whole, batched):
        again = run(spec, f"{spec.name}-again", 0)
        assert (again.rows_upserted, again.rows_deleted, again.values_incomplete) == (0, 0, 0), spec.name
        assert stored(spec) == expected

    # The records with the full values leave the topic (kafka-delete-records): a table built from
    # what is left knows them nowhere; a rebuild of the live pipeline takes them from its table.
    admin = AdminClient(kafka_config)  # held: a collected client never completes its futures
    (deleted,) = admin.delete_records([TopicPartition(topic, 0, first_end)], operation_timeout=30).values()
    assert deleted.result().low_watermark == first_end
    fresh = spec_of("slice")
    assert run(fresh, f"{fresh.name}-1", first_end).values_incomplete == 8
    unknown = {(10, "eu"), (21, "us"), (3, "eu"), (70, "eu")}  # moved from keys whose full values are gone
    assert stored(fresh) == {k: (v[0], None, None) if k in unknown else v for k, v in expected.items()}
    with engine.connect() as conn:
        listed = conn.execute(text('SELECT key, "column", "offset", reason FROM reprocess.incomplete_values '
                                   "WHERE pipeline = :p"), {"p": fresh.name}).all()  # fmt: skip
    assert {((k["id"], k["region"]), c) for k, c, *_ in listed} == {(k, c) for k in unknown for c in ("notes", "attrs")}
    assert min(o for _, _, o, _ in listed) >= first_end
    assert all("set REPLICA IDENTITY FULL on the source table" in r for *_, r in listed)
    now = datetime.now(UTC)
    with pytest.raises(ReconciliationGap, match="8 values incomplete: the connector left them out"):
        reconcile_over_connect(engine, fresh, now - timedelta(hours=1), now + timedelta(minutes=5), f"{fresh.name}-c")
    rebuild = f"{incremental.name}-rebuild"
    start_run(
        engine, kafka_config, incremental, RunRequest.from_params({"mode": "rebuild", "batch_size": 100}), rebuild
    )
    run_spark_stage(incremental, rebuild, batch_size=100)
    assert commit_stored(engine, incremental, rebuild).values_incomplete == 0
    assert stored(incremental) == expected

    # An update that sends one of the two values: that one is known from now on, the other still is not.
    _source(f"UPDATE public.{table} SET notes = 'sent again' WHERE id = 10")
    _source(f"INSERT INTO public.{table} VALUES ({SENTINEL}, 'end3', 'again-end', NULL, NULL)")
    _wait_for(kafka_config, topic, b"again-end")
    assert run(fresh, f"{fresh.name}-2", end).values_incomplete == 1
    with engine.connect() as conn:
        left = conn.execute(
            text('SELECT "column" FROM reprocess.incomplete_values WHERE pipeline = :p AND key = CAST(:k AS jsonb)'),
            {"p": fresh.name, "k": '{"id": 10, "region": "eu"}'},
        )
        assert left.scalars().all() == ["attrs"]
        notes = conn.execute(text(f"SELECT notes, attrs FROM {fresh.qualified_target} WHERE id = 10")).one()
    assert tuple(notes) == ("sent again", None)


INVARIANCE_EXAMPLES = 3  # each applies the topic in up to 4 slices, in batches, then replays it whole


def test_a_debezium_topic_gives_the_same_table_however_it_is_cut_into_runs_and_batches(
    debezium_connector, kafka_config, engine, unique_name
):
    """Batch invariance: a topic of key changes over unchanged large values (a chain of them, a re-key
    onto a deleted key), placeholders and tombstones, applied as one backfill and, for each
    generated example, as consecutive slices cut at any offsets (the runs an incremental schedule
    makes), each in batches of any size: the target is the same row for row — values and the record
    each came from — no dead letter and no incomplete value, and a whole replay afterwards writes
    nothing. The one backfill equals the source table (the oracle)."""
    table, prefix = unique_name, f"dbz_{unique_name}"
    topic = f"{prefix}.public.{table}"
    _source(
        f"CREATE TABLE public.{table} (id int PRIMARY KEY, customer text NOT NULL, amount numeric(10, 2), "
        "status text, notes text)",
        f"ALTER TABLE public.{table} ALTER COLUMN notes SET STORAGE EXTERNAL",
        f"INSERT INTO public.{table} SELECT i, 'c' || i, i, 'new', {LARGE_I} FROM generate_series(1, 4) i",
    )
    debezium_connector(unique_name, debezium.connector_config(unique_name, [f"public.{table}"], prefix, **{
        "decimal.handling.mode": "string"}))  # fmt: skip
    _source(f"INSERT INTO public.{table} SELECT i, 'c' || i, i, 'new', {LARGE_I} FROM generate_series(5, 6) i")
    for statement in (
        "UPDATE {t} SET status = 'paid' WHERE id IN (1, 2)",
        "UPDATE {t} SET id = 11 WHERE id = 1",
        "UPDATE {t} SET id = 12 WHERE id = 11",
        "UPDATE {t} SET status = 'moved twice' WHERE id = 12",
        "DELETE FROM {t} WHERE id = 3",
        "UPDATE {t} SET id = 3 WHERE id = 4",
        f"UPDATE {{t}} SET notes = {_large('5-new')} WHERE id = 5",
        "UPDATE {t} SET id = 15 WHERE id = 5",
        "DELETE FROM {t} WHERE id = 6",
        "UPDATE {t} SET status = 'gone' WHERE id = 2",
        "DELETE FROM {t} WHERE id = 2",
        f"INSERT INTO {{t}} VALUES (2, 'c2-again', 22, 'back', {_large('2-again')})",
        "UPDATE {t} SET status = 'back-again' WHERE id = 2",
        f"INSERT INTO {{t}} VALUES ({SENTINEL}, 'sentinel', 0, 'end', NULL)",
    ):
        _source(statement.format(t=f"public.{table}"))
    end = _wait_for(kafka_config, topic, b"sentinel")
    with psycopg2.connect(debezium.source_dsn()) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {SOURCE_COLUMNS} FROM public.{table} ORDER BY id")
        source = {r[0]: tuple(r[1:]) for r in cur.fetchall()}

    def apply(spec: PipelineSpec, cuts: list[int], sizes: list[int | None]) -> None:
        bounds = [0, *cuts, end]
        for i, (start, stop) in enumerate(itertools.pairwise(bounds)):
            params = {"start_mode": "offsets", "start_value": json.dumps({topic: {"0": start}}),
                      "end_mode": "offsets", "end_value": json.dumps({topic: {"0": stop}}),
                      **({"batch_size": sizes[i]} if sizes[i] else {})}  # fmt: skip
            run_id = f"{spec.name}-{i}"
            snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params(params, RunKind.BACKFILL), run_id)
            run_spark_stage(spec, run_id, batch_size=sizes[i])
            result = commit_stored(engine, spec, run_id)
            assert (result.dead_letters, result.values_incomplete) == (0, 0), (cuts, sizes, result)

    def table_of(spec: PipelineSpec) -> list[tuple[Any, ...]]:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(
                f"SELECT id, customer, amount, status, md5(notes), _kafka_partition, _kafka_offset "
                f"FROM {spec.qualified_target} ORDER BY id"))]  # fmt: skip

    one = _spec(f"{unique_name}_one", topic, "json")
    apply(one, [], [None])
    expected = table_of(one)
    assert {r[0]: (r[1], Decimal(r[2]).quantize(Decimal("0.01")), r[3], r[4]) for r in expected} == {
        k: v[:4] for k, v in source.items()}  # fmt: skip
    names = iter(range(INVARIANCE_EXAMPLES * 10))

    @examples(max_examples=INVARIANCE_EXAMPLES, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(
        st.lists(st.integers(1, end - 1), max_size=3, unique=True).map(sorted),
        st.lists(st.sampled_from([None, 1, 2, 3, 7]), min_size=4, max_size=4),
    )
    def same_table(cuts: list[int], sizes: list[int | None]) -> None:
        spec = _spec(f"{unique_name}_{next(names)}", topic, "json")
        apply(spec, cuts, sizes)
        assert table_of(spec) == expected, (cuts, sizes)
        again = f"{spec.name}-again"
        whole = {"start_mode": "offsets", "start_value": json.dumps({topic: {"0": 0}}),
                 "end_mode": "offsets", "end_value": json.dumps({topic: {"0": end}})}  # fmt: skip
        snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params(whole, RunKind.BACKFILL), again)
        run_spark_stage(spec, again)
        result = commit_stored(engine, spec, again)
        assert (result.rows_upserted, result.rows_deleted) == (0, 0), (cuts, sizes, result)

    same_table()
