"""The Kafka Connect peer: Debezium's JDBC sink connector, upserting the bench data into PostgreSQL.

The sink needs schema-ful records, so the same events (:func:`bench.data.event`) are produced into
a topic of their own in the JSON converter's envelope form (``{"schema": …, "payload": …}``, key
``{"order_id": …}`` as a struct, tombstones as null values). The connector runs in the Kafka
Connect worker devstack starts (standalone, ``devstack/kafka_connect.py``), configured as its docs
recommend for throughput: one task per partition, ``batch.size`` = the consumer's
``max.poll.records`` (10,000, the baseline's batch), the reduction buffer (one statement per key
and batch), and the PostgreSQL driver's ``reWriteBatchedInserts`` (multi-row statements). A
``ReplaceField`` transform keeps the seven columns the other cases keep.

Time runs from the connector's creation to the moment its consumer group's committed offsets
reach the log ends: the sink commits only what it has written, so that is the last record applied
(give or take the worker's 1 s offset flush interval). The replay resets the group (the connector
stopped, its offsets deleted through the REST API, resumed) and times the same way; every 2 s
while it runs the oracle counts the table's wrong rows, and the worst count is kept (what a
reader saw during the replay). The older-slice replay (:func:`bench.slices.older_slice`) is the way a
Connect team replays part of a topic: the slice copied into a topic of its own, and a second
connector from it into the same table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urlsplit

from bench.context import Bench, Result
from bench.data import Dataset, produce_dataset
from bench.oracle import Table, count_wrong
from bench.slices import older_slice

COLUMNS: Final = ("order_id", "customer_id", "status", "amount", "currency", "items", "updated_at")
BATCH: Final = 10_000
TIMEOUT_S: Final = 3600
PROBE_S: Final = 2.0  # how often the replay's table is checked while it runs
_FIELDS: Final = [
    {"field": "order_id", "type": "string", "optional": False},
    {"field": "customer_id", "type": "string", "optional": False},
    {"field": "status", "type": "string", "optional": False},
    {"field": "amount", "type": "string", "optional": True},
    {"field": "currency", "type": "string", "optional": True},
    {"field": "items", "type": "int32", "optional": True},
    {"field": "updated_at", "type": "string", "optional": False},
    {"field": "channel", "type": "string", "optional": True},
    {"field": "note", "type": "string", "optional": True},
]
_VALUE_SCHEMA: Final = json.dumps({"type": "struct", "name": "order", "optional": False, "fields": _FIELDS})
_KEY_SCHEMA: Final = json.dumps(
    {
        "type": "struct",
        "name": "order_key",
        "optional": False,
        "fields": [{"field": "order_id", "type": "string", "optional": False}],
    }
)


def connect_json_key(key: str) -> bytes:
    """The key in the JSON converter's envelope form (``schemas.enable=true``): a struct."""
    return f'{{"schema":{_KEY_SCHEMA},"payload":{json.dumps({"order_id": key})}}}'.encode()


def connect_json(_i: int, _key: str, body: dict[str, Any] | None) -> bytes | None:
    """The value in the JSON converter's envelope form; a tombstone stays a null value."""
    if body is None:
        return None
    return f'{{"schema":{_VALUE_SCHEMA},"payload":{json.dumps(body, separators=(",", ":"))}}}'.encode()


def connector_config(bench: Bench, topic: str, table: Table, partitions: int, keep: bool = True) -> dict[str, str]:
    """The sink's settings; ``keep``: the ``ReplaceField`` transform keeping :data:`COLUMNS` (the plain
    rows; a Debezium envelope goes in whole, bench.cdc_sink)."""
    from devstack import kafka_connect, postgres

    url = urlsplit(bench.db_url)
    replace = "org.apache.kafka.connect.transforms.ReplaceField$Value"
    transforms = {"transforms": "keep", "transforms.keep.type": replace, "transforms.keep.include": ",".join(COLUMNS)}
    return {
        "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
        "topics": topic,
        "tasks.max": str(partitions),
        "connection.url": f"jdbc:postgresql://{url.hostname}:{url.port}{url.path}?reWriteBatchedInserts=true",
        "connection.username": url.username or "",
        "connection.password": kafka_connect.secret_path(postgres.pg_dir(), "password"),
        "insert.mode": "upsert",
        "primary.key.mode": "record_key",
        "primary.key.fields": "order_id",
        "delete.enabled": "true",
        "schema.evolution": "basic",
        "collection.name.format": f"{table.schema}.{table.name}",
        "batch.size": str(BATCH),
        "use.reduction.buffer": "true",
        "consumer.override.max.poll.records": str(BATCH),
        "consumer.override.auto.offset.reset": "earliest",
        **(transforms if keep else {}),
        **kafka_connect.json_converter(schemas=True),
    }


def _wait_applied(bench: Bench, group: str, ds: Dataset, probe: Callable[[], None] | None = None) -> float:
    """Seconds until the group's committed offsets reach every partition's log end; ``probe``
    runs every :data:`PROBE_S` seconds meanwhile."""
    from reprocess.kafka.clients import committed_offsets

    started = probed = time.monotonic()
    while time.monotonic() - started < TIMEOUT_S:
        answer = committed_offsets(bench.kafka, group, [(ds.topic, p) for p in ds.ends])
        if all(answer.get((ds.topic, p), -1) >= end for p, end in ds.ends.items()):
            return time.monotonic() - started
        if probe is not None and time.monotonic() - probed >= PROBE_S:
            probe()
            probed = time.monotonic()
        time.sleep(0.25)
    raise RuntimeError(f"the JDBC sink did not reach the log ends of {ds.topic} within {TIMEOUT_S} s")


def _ensure_worker() -> None:
    from devstack import kafka_connect

    if not kafka_connect.running():
        kafka_connect.start()


def jdbc_sink(bench: Bench, records: int) -> Result:
    """Produce the envelope topic, run the connector from its start, then replay it from offset 0."""
    from reprocess.kafka.clients import make_admin

    ds = produce_dataset(
        bench.kafka, f"{bench.tag}_{records}_connect_json", records, encode=connect_json, encode_key=connect_json_key
    )
    table = Table(f"{bench.tag}_jdbc_sink", "orders")

    def older() -> Dataset:
        return produce_dataset(bench.kafka, f"{ds.topic}_older", records, encode=connect_json,
                               encode_key=connect_json_key, limits=older_slice(ds.ends))  # fmt: skip

    try:
        seconds, detail = sink_replays(bench, ds, table, f"{bench.tag}_jdbc_sink", True, older,
                                       lambda conn: count_wrong(conn, ds, table))  # fmt: skip
    finally:
        admin = make_admin(bench.kafka)  # kept: its futures fail once it is collected
        for fut in admin.delete_topics([ds.topic], operation_timeout=30).values():
            fut.result()
    return Result("Debezium JDBC sink (Kafka Connect, upsert, deletes)", records, seconds,
                  detail={**detail, "produce_seconds": ds.produce_seconds})  # fmt: skip


def sink_replays(bench: Bench, ds: Dataset, table: Table, name: str, keep: bool, older: Callable[[], Dataset],
                 wrong: Callable[[Any], dict[str, int]]) -> tuple[float, dict[str, Any]]:  # fmt: skip
    """The sink's load of ``ds`` into ``table`` (its seconds), then its replay from offset 0 and an
    older-slice replay (``older()`` produces the slice's topic, deleted after), each counted by
    ``wrong(conn)``: the detail of a peer's :class:`Result`."""
    from devstack import kafka_connect
    from reprocess.kafka.clients import make_admin

    _ensure_worker()
    conn = bench.connect()
    with conn, conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{table.schema}"')
    group = f"connect-{name}"
    topics: list[str] = []
    try:
        started = time.monotonic()
        kafka_connect.put_connector(name, connector_config(bench, ds.topic, table, len(ds.ends), keep))
        seconds = (time.monotonic() - started) + _wait_applied(bench, group, ds)
        wrong_first = wrong(conn)
        kafka_connect.request("PUT", f"/connectors/{name}/stop")
        _wait_state(name, "STOPPED")
        kafka_connect.request("DELETE", f"/connectors/{name}/offsets")
        worst = {"total": 0}

        def probe() -> None:
            """What a reader of the table sees while the replay runs."""
            now = wrong(conn)
            if now["total"] > worst["total"]:
                worst.clear()
                worst.update(now)

        started = time.monotonic()
        kafka_connect.request("PUT", f"/connectors/{name}/resume")
        replay_seconds = (time.monotonic() - started) + _wait_applied(bench, group, ds, probe)
        wrong_replay = wrong(conn)
        kafka_connect.remove_connector(name)
        slice_ds = older()
        topics.append(slice_ds.topic)
        kafka_connect.put_connector(f"{name}_older", connector_config(bench, slice_ds.topic, table,
                                                                      len(slice_ds.ends), keep))  # fmt: skip
        _wait_applied(bench, f"connect-{name}_older", slice_ds)
        wrong_older = wrong(conn)
    finally:
        conn.close()
        for connector in (name, f"{name}_older"):
            kafka_connect.remove_connector(connector)
        if topics:
            admin = make_admin(bench.kafka)  # kept: its futures fail once it is collected
            for fut in admin.delete_topics(topics, operation_timeout=30).values():
                fut.result()
    return seconds, {
        "wrong_after_load": wrong_first,
        "wrong_after_replay": wrong_replay,
        "wrong_after_older_slice": wrong_older,
        "replay_seconds": replay_seconds,
        "worst_during_replay": worst,
    }


def _wait_state(name: str, state: str, seconds: float = 60) -> None:
    from devstack import kafka_connect

    deadline = time.monotonic() + seconds
    while kafka_connect.request("GET", f"/connectors/{name}/status")["connector"]["state"] != state:
        if time.monotonic() > deadline:
            raise RuntimeError(f"connector {name} not {state} after {seconds:.0f} s")
        time.sleep(0.2)
