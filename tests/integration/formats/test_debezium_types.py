"""Every column type of the spec from real Debezium change events: ONE PostgreSQL table holding
jsonb, json, uuid, date, timestamp, time, smallint, real, bytea, numeric(p,s), numeric, text[],
bigint[] and timestamptz streams through Debezium connectors on the embedded Kafka Connect worker
(the JSON converter with and without schemas, Avro through Apicurio Registry; ``decimal.handling.mode``
string and precise), and a pipeline per topic replays it.

The oracle is the source table itself, read with psycopg2 as the target is read (json, jsonb and
uuid as their text, the rest as the driver's Python values): the target must equal it after the
first run, after updates that leave a large jsonb and bytea (stored out of line, REPLICA IDENTITY
DEFAULT) unchanged, so Debezium sends its placeholder for them, and after the whole log again,
which writes nothing. A value the
spec's type cannot hold (the source's ``integer`` 70000 into a ``smallint`` column) is a dead
letter naming the column, and the run commits."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg2
import pytest
from sqlalchemy import text

from bench.cdc_source import source as _source
from bench.cdc_source import wait_for as _wait_for
from devstack import debezium, kafka_connect, registry
from reprocess.core.runs import RunKind, RunRequest
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import orders_spec, run_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("postgres")]

# (converter, decimal.handling.mode) per connector.
CONNECTORS = {
    "json_string": ("json", "string"),
    "json_precise": ("json", "precise"),
    "schemas_precise": ("json_schemas", "precise"),
    "avro_precise": ("avro", "precise"),
    "avro_string": ("avro", "string"),
}
SPEC_COLUMNS = {
    "id": "integer", "doc": "jsonb", "raw_doc": "json", "ref": "uuid", "born": "date", "seen": "timestamp",
    "opens": "time", "rank": "smallint", "ratio": "real", "blob": "bytea", "price": "numeric(20,6)",
    "amount": "numeric", "tags": "text[]", "ids": "bigint[]", "at": "timestamptz", "small": "smallint",
}  # fmt: skip
# Read alike from the source and the target: json, jsonb and uuid as their text.
READ = ", ".join(f"{c}::text" if c in ("doc", "raw_doc", "ref") else c for c in SPEC_COLUMNS)
SENTINEL = 999_999
HOSTILE_ID = 666  # its `small` (an integer in the source) does not fit the spec's smallint

ROW = (
    '({id}, \'{{"b": [1, 2.5], "a": "é", "n": 1.000000000000000000001}}\', \'{{"k": 1,  "k": 2}}\', '
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd{id:06d}', '2024-02-29', '2024-01-01 12:34:56.123456', '23:59:59.999999', "
    "-32768, 1.5, '\\x0001ff'::bytea, -12345678901234.567891, 1.50, ARRAY['a\"b', NULL, 'c\\d', '{{x}}'], "
    "ARRAY[1, NULL, 9223372036854775807]::bigint[], '2024-01-01 12:00:00.5+02', {small})"
)


def _rows(dsn: str, table: str) -> dict[int, tuple[Any, ...]]:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {READ} FROM {table} WHERE id NOT IN ({SENTINEL}, {HOSTILE_ID})")
            return {r[0]: tuple(bytes(v) if isinstance(v, memoryview) else v for v in r[1:]) for r in cur.fetchall()}
    finally:
        conn.close()


def _differences(target: dict[int, tuple[Any, ...]], source: dict[int, tuple[Any, ...]]) -> dict[int, Any]:
    """Per key, the columns whose value differs (target, source); a key one side lacks, whole."""
    names = list(SPEC_COLUMNS)[1:]
    out: dict[int, Any] = {}
    for key in sorted(set(target) | set(source)):
        if key not in target or key not in source:
            out[key] = (target.get(key), source.get(key))
            continue
        found = {n: (t, s) for n, t, s in zip(names, target[key], source[key], strict=True) if t != s}
        if found:
            out[key] = found
    return out


def test_every_type_streamed_by_debezium_lands_as_the_source_table_holds_it(
    debezium_connector, schema_registry, kafka_config, engine, db_url, unique_name
):
    table = unique_name
    columns = (
        "id int PRIMARY KEY, doc jsonb, raw_doc json, ref uuid, born date, seen timestamp, opens time, "
        "rank smallint, ratio real, blob bytea, price numeric(20,6), amount numeric, tags text[], ids bigint[], "
        "at timestamptz, small integer"
    )
    _source(
        f"CREATE TABLE public.{table} ({columns})",  # REPLICA IDENTITY DEFAULT; large values out of line
        f"ALTER TABLE public.{table} ALTER COLUMN doc SET STORAGE EXTERNAL, ALTER COLUMN blob SET STORAGE EXTERNAL",
        f"INSERT INTO public.{table} VALUES {ROW.format(id=1, small=1)}, {ROW.format(id=2, small=2)}",
        f"INSERT INTO public.{table} (id) VALUES (3)",  # every other column NULL
    )
    topics = {}
    for i, (name, (converter, mode)) in enumerate(CONNECTORS.items()):
        connector, prefix = f"{unique_name}_{i}", f"dbt{i}_{unique_name}"
        settings = (
            kafka_connect.avro_converter(registry.url())
            if converter == "avro"
            else kafka_connect.json_converter(converter == "json_schemas")
        )
        config = debezium.connector_config(connector, [f"public.{table}"], prefix, **{"decimal.handling.mode": mode},
                                           **settings)  # fmt: skip
        debezium_connector(connector, config)  # the snapshot: op r for rows 1-3
        topics[name] = f"{prefix}.public.{table}"
    _source(  # streamed changes: an insert with other values, updates of every type, a delete
        f"INSERT INTO public.{table} VALUES {ROW.format(id=4, small=4)}",
        f"UPDATE public.{table} SET doc = '[]', raw_doc = '\"s\"', born = '0001-01-01', seen = '9999-12-31 23:59:59', "
        "opens = '00:00', rank = 32767, ratio = -0.25, blob = '', price = 0.000001, amount = -0.0001, "
        f"tags = '{{}}', ids = '{{}}', at = '1970-01-01 00:00:00Z' WHERE id = 2",
        f"UPDATE public.{table} SET doc = '{{\"later\": true}}', price = 99999999999999.999999, "
        f"amount = 12345678901234567890.123456789 WHERE id = 4",
        f"DELETE FROM public.{table} WHERE id = 1",
        f"INSERT INTO public.{table} VALUES {ROW.format(id=HOSTILE_ID, small=70000)}",
        f"INSERT INTO public.{table} VALUES {ROW.format(id=5, small=5)}",  # then large values, sent whole
        f"UPDATE public.{table} SET doc = jsonb_build_object('big', repeat('x', 20000), 'n', 1.5), "
        f"blob = decode(repeat('00ff', 10000), 'hex') WHERE id = 5",
        f"INSERT INTO public.{table} (id, raw_doc) VALUES ({SENTINEL}, '\"sentinel\"')",
    )
    ends = {name: _wait_for(kafka_config, topic, b"sentinel") for name, topic in topics.items()}
    expected = _rows(debezium.source_dsn(), f"public.{table}")
    assert set(expected) == {2, 3, 4, 5}
    registry_config = json.dumps({"url": registry.ccompat_url()})
    specs = {}

    def run(name: str, run_id: str, params: dict[str, str] | None = None) -> Any:
        spec = specs[name]
        request = RunRequest.from_params(params, RunKind.BACKFILL) if params else RunRequest.incremental()
        snapshot_and_migrate(engine, kafka_config, spec, request, run_id)
        run_spark_stage(spec, run_id, **({"registry_config": registry_config} if "avro" in name else {}))
        return commit_stored(engine, spec, run_id)

    for name, (converter, mode) in CONNECTORS.items():  # the first scheduled run
        settings = {"decimal_handling_mode": mode} if mode != "string" else {}
        specs[name] = spec = orders_spec(
            f"{unique_name}_{name}"[:60], topics[name], columns=SPEC_COLUMNS, key=["id"], format="debezium",
            encoding="avro" if converter == "avro" else "json", tombstones="delete", ordering="offset",
            max_dead_letter_ratio=0.5, **settings,
        )  # fmt: skip
        first = run(name, f"{spec.name}-1")
        with engine.connect() as conn:
            errors = list(
                conn.execute(text("SELECT error FROM reprocess.dead_letters WHERE pipeline = :p"), {"p": spec.name})
                .scalars()
            )  # fmt: skip
        assert errors == ["type error: field small is not smallint: 70000"], (name, errors)
        assert first.dead_letters == 1, name
        assert _differences(_rows(db_url, spec.qualified_target), expected) == {}, name

    # Updates that leave row 5's large jsonb and bytea (stored out of line) unchanged: Debezium sends
    # its placeholder for them, and the target keeps the values the first run wrote.
    _source(
        f"UPDATE public.{table} SET rank = 7 WHERE id = 5",
        f"UPDATE public.{table} SET ratio = 2.5, tags = ARRAY['after'] WHERE id = 5",
        f"INSERT INTO public.{table} (id, raw_doc) VALUES ({SENTINEL + 1}, '\"second-end\"')",
    )
    ends = {name: _wait_for(kafka_config, topic, b"second-end") for name, topic in topics.items()}
    _wait_for(kafka_config, topics["json_string"], b"__debezium_unavailable_value")  # the placeholder was sent
    expected = _rows(debezium.source_dsn(), f"public.{table}")
    assert expected[5][6] == 7 and len(expected[5][0]) > 20_000 and len(expected[5][8]) == 20_000

    for name, spec in specs.items():
        started = time.monotonic()
        second = run(name, f"{spec.name}-2")
        assert second.dead_letters == 0, name
        assert _differences(_rows(db_url, spec.qualified_target), expected) == {}, name
        topic = spec.topics[0]
        whole = {"start_mode": "offsets", "start_value": json.dumps({topic: {"0": 0}}),
                 "end_mode": "offsets", "end_value": json.dumps({topic: {"0": ends[name]}})}  # fmt: skip
        again = run(name, f"{spec.name}-3", whole)  # the whole log again: nothing changes
        assert (again.rows_upserted, again.rows_deleted) == (0, 0), name
        assert _differences(_rows(db_url, spec.qualified_target), expected) == {}, name
        print(f"{name}: {ends[name]} events, 2 more runs in {time.monotonic() - started:.1f} s")
