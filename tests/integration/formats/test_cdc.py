"""Real change events: the Debezium PostgreSQL connector on the embedded Kafka Connect worker
streams a scripted life of a source table into the embedded Kafka, read back with confluent-kafka.

The expected events are written out here as Debezium documents them (snapshot reads ``op=r``,
``c``/``u``/``d``, a tombstone after each delete, a primary-key change as a delete of the old
key, its tombstone and a create of the new key), not computed by any code of the product.
"""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg2
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from devstack import debezium, kafka_connect

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("postgres")]

ALICE = {"id": 1, "customer": "alice", "amount": "10.50", "status": "new"}
BOB = {"id": 2, "customer": "bob", "amount": "20.00", "status": "new"}
CAROL = {"id": 3, "customer": "carol", "amount": "30.25", "status": "new"}
ALICE_PAID = {**ALICE, "status": "paid"}
CAROL_30 = {**CAROL, "id": 30}
# REPLICA IDENTITY DEFAULT: a delete's `before` carries the key; the other columns are
# placeholders (the NOT NULL text column "", nullable ones null), not the deleted row's values.
DELETED_BOB = {"id": 2, "customer": "", "amount": None, "status": None}
DELETED_CAROL = {"id": 3, "customer": "", "amount": None, "status": None}

# (key, op, before, after, snapshot marker), in topic order; op None = the tombstone (value null).
EXPECTED: list[tuple[dict[str, int], str | None, Any, Any, str | None]] = [
    ({"id": 1}, "r", None, ALICE, "first"),
    ({"id": 2}, "r", None, BOB, "last"),
    ({"id": 3}, "c", None, CAROL, "false"),
    ({"id": 1}, "u", None, ALICE_PAID, "false"),  # REPLICA IDENTITY DEFAULT: no `before` on update
    ({"id": 2}, "d", DELETED_BOB, None, "false"),
    ({"id": 2}, None, None, None, None),
    ({"id": 3}, "d", DELETED_CAROL, None, "false"),  # UPDATE … SET id = 30: delete of the old key,
    ({"id": 3}, None, None, None, None),  # its tombstone,
    ({"id": 30}, "c", None, CAROL_30, "false"),  # and a create of the new key, one position
]


def _source(sql: str) -> None:
    conn = psycopg2.connect(debezium.source_dsn())
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(sql)
    conn.close()


def _read(kafka_config: dict[str, Any], topic: str, count: int, seconds: float = 60, linger: float = 3) -> list[Any]:
    """The records of ``topic`` (partition 0) once ``count`` arrived and ``linger`` seconds brought no
    more (so an extra event shows up in the comparison)."""
    consumer = Consumer({**kafka_config, "group.id": f"{topic}-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    records: list[Any] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                records.append(msg)
            if len(records) >= count:
                deadline = min(deadline, time.monotonic() + linger)
    finally:
        consumer.close()
    return records


def _unwrap(raw: bytes | None, schemas: bool) -> Any:
    """The JSON converter's payload; with schemas.enable it sits under "payload" next to "schema"."""
    if raw is None:
        return None
    doc = json.loads(raw)
    return doc["payload"] if schemas else doc


@pytest.mark.parametrize("schemas", [False, True], ids=["json", "json_schemas"])
def test_a_scripted_table_life_comes_out_as_the_documented_change_events(
    debezium_connector, kafka_config, unique_name, schemas
):
    table, prefix = unique_name, f"cdc_{unique_name}"
    _source(
        f"CREATE TABLE public.{table} (id int PRIMARY KEY, customer text NOT NULL, amount numeric(10, 2), status text);"
        f"INSERT INTO public.{table} VALUES (1, 'alice', 10.50, 'new'), (2, 'bob', 20.00, 'new')"
    )
    config = debezium.connector_config(unique_name, [f"public.{table}"], prefix, **{"decimal.handling.mode": "string"},
                                       **kafka_connect.json_converter(schemas))  # fmt: skip
    debezium_connector(unique_name, config)
    _source(f"INSERT INTO public.{table} VALUES (3, 'carol', 30.25, 'new')")
    _source(f"UPDATE public.{table} SET status = 'paid' WHERE id = 1")
    _source(f"DELETE FROM public.{table} WHERE id = 2")
    _source(f"UPDATE public.{table} SET id = 30 WHERE id = 3")

    records = _read(kafka_config, f"{prefix}.public.{table}", len(EXPECTED))
    got = []
    for msg in records:
        value = _unwrap(msg.value(), schemas)
        got.append((
            _unwrap(msg.key(), schemas),
            value and value["op"],
            value and value["before"],
            value and value["after"],
            value and value["source"]["snapshot"],
        ))  # fmt: skip
    assert got == EXPECTED, "change events differ from Debezium's documented ones"

    # Source positions: every streamed event after the snapshot carries a larger WAL position
    # (lsn), and the primary-key change's delete and create share one transaction.
    values = [_unwrap(m.value(), schemas) for m in records]
    events = [v for v in values if v is not None]
    assert all(e["source"]["db"] == debezium.SOURCE_DB and e["source"]["table"] == table for e in events)
    streamed = [e["source"]["lsn"] for e in events[2:]]
    assert streamed == sorted(streamed) and len(set(streamed[:-1])) == len(streamed) - 1
    assert events[-2]["source"]["txId"] == events[-1]["source"]["txId"]
    # The key change names the other key in a header on both events (the header converter is the
    # worker's, so these are plain JSON in both cases).
    assert dict(records[-3].headers())["__debezium.newkey"] == b'{"id":30}'
    assert dict(records[-1].headers())["__debezium.oldkey"] == b'{"id":3}'
    if schemas:
        envelope = json.loads(records[0].value())["schema"]
        assert envelope["name"] == f"{prefix}.public.{table}.Envelope"
        assert json.loads(records[0].key())["schema"]["name"] == f"{prefix}.public.{table}.Key"


def test_removing_a_connector_drops_its_slot_and_publication_and_forgets_its_offsets(
    debezium_connector, kafka_config, unique_name
):
    table, name, topic = unique_name, unique_name, f"cdc_{unique_name}.public.{unique_name}"
    config = debezium.connector_config(name, [f"public.{table}"], f"cdc_{name}")
    _source(f"CREATE TABLE public.{table} (id int PRIMARY KEY, v text); INSERT INTO public.{table} VALUES (1, 'a')")
    debezium_connector(name, config)
    _source(f"INSERT INTO public.{table} VALUES (2, 'b')")
    assert [json.loads(m.value())["op"] for m in _read(kafka_config, topic, 2)] == ["r", "c"]
    assert _slots_and_publications(name) == (1, 1)

    debezium.remove(name)
    assert _slots_and_publications(name) == (0, 0), "a removed connector must not leave a slot holding WAL"
    # The same connector again: its offsets were forgotten with it, so it starts over with a
    # snapshot of the table as it is now (op r for both rows) instead of resuming from a
    # position of the dropped slot.
    debezium_connector(name, config)
    again = [json.loads(m.value()) for m in _read(kafka_config, topic, 4)[2:]]
    assert [(v["op"], v["after"]) for v in again] == [("r", {"id": 1, "v": "a"}), ("r", {"id": 2, "v": "b"})]


def _slots_and_publications(name: str) -> tuple[int, int]:
    conn = psycopg2.connect(debezium.source_dsn())
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (name,))
        (slots,) = cur.fetchone()
        cur.execute("SELECT count(*) FROM pg_publication WHERE pubname = %s", (name,))
        (publications,) = cur.fetchone()
    conn.close()
    return slots, publications


def test_a_slot_left_behind_by_a_forgotten_connector_is_dropped_at_the_next_start(
    debezium_connector, kafka_config, unique_name
):
    """A worker that stops forgets its connectors but not their slots (a crashed test, `make stop`)."""
    orphan = f"orphan_{unique_name}"[:63]
    conn = psycopg2.connect(debezium.source_dsn())
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (orphan,))
        cur.execute(f"CREATE TABLE public.{unique_name} (id int PRIMARY KEY)")
    conn.close()
    assert _slots_and_publications(orphan)[0] == 1
    debezium_connector(unique_name, debezium.connector_config(unique_name, [f"public.{unique_name}"], unique_name))
    assert _slots_and_publications(orphan)[0] == 0
    assert _slots_and_publications(unique_name) == (1, 1)


def test_a_worker_killed_mid_stream_resumes_its_connector_losing_nothing_and_one_whose_slot_was_dropped_starts_over(
    debezium_connector, kafka_config, unique_name
):
    """SIGKILL of the worker while rows change, more changes while it is down, then the worker and
    the same connector again: it resumes from its flushed offsets and its slot (no new snapshot) and
    every change arrives; one sent again (its offset not yet flushed at the kill) is the same event,
    at the same source position (Debezium is at least once).

    The crash also made the worker forget connector A (its offsets and slot stay); the first
    connector started afterwards drops A's slot as an orphan, so A added again cannot resume from a
    position no slot keeps: it starts over with a snapshot instead of failing. (One kill for both:
    the worker's JVM restart is most of each scenario's time.)"""
    table, topic = unique_name, f"cdc_{unique_name}.public.{unique_name}"
    a = table_a = f"a_{unique_name}"
    config = debezium.connector_config(unique_name, [f"public.{table}"], f"cdc_{unique_name}")
    config_a = debezium.connector_config(a, [f"public.{table_a}"], a)
    _source(f"CREATE TABLE public.{table} (id int PRIMARY KEY); INSERT INTO public.{table} VALUES (0)")
    _source(f"CREATE TABLE public.{table_a} (id int PRIMARY KEY); INSERT INTO public.{table_a} VALUES (1)")
    debezium_connector(unique_name, config)
    debezium_connector(a, config_a)
    for i in range(1, 21):
        _source(f"INSERT INTO public.{table} VALUES ({i})")
    _source(f"INSERT INTO public.{table_a} VALUES (2)")
    # Streamed, and (offset.flush.interval.ms=1000) their offsets flushed during the 3 s linger.
    assert len(_read(kafka_config, f"{a}.public.{table_a}", 2)) == 2
    assert len(_read(kafka_config, topic, 21)) == 21
    for i in range(21, 26):
        _source(f"INSERT INTO public.{table} VALUES ({i})")
    kafka_connect.kill()
    for i in range(26, 41):
        _source(f"INSERT INTO public.{table} VALUES ({i})")
    kafka_connect.start()
    debezium_connector(unique_name, config)  # the worker forgot it; its offsets and slot remain
    assert _slots_and_publications(a)[0] == 0, "A's slot was dropped as an orphan"
    _source(f"INSERT INTO public.{table} VALUES (41)")
    _source(f"INSERT INTO public.{table_a} VALUES (3)")
    debezium_connector(a, config_a)

    events = [json.loads(m.value()) for m in _read(kafka_config, topic, 42)]
    positions: dict[int, set[int]] = {}
    for event in events:
        positions.setdefault(event["after"]["id"], set()).add(event["source"]["lsn"])
    assert sorted(positions) == list(range(42)), "every change, none lost"
    assert [(e["op"], e["after"]["id"]) for e in events if e["op"] != "c"] == [("r", 0)], "no second snapshot"
    assert all(len(p) == 1 for p in positions.values()), "a change sent again carries its first position"
    events_a = [json.loads(m.value()) for m in _read(kafka_config, f"{a}.public.{table_a}", 5)]
    assert [(e["op"], e["after"]["id"]) for e in events_a] == [("r", 1), ("c", 2), ("r", 1), ("r", 2), ("r", 3)]
