"""The demo's change-data-capture source (``make demo``): a ``customers`` table in the source
database, streamed into topic ``demo.public.customers`` by a real Debezium connector on the
embedded Kafka Connect worker, both started on demand here (``make stop`` stops the worker).

The first time, the table goes through a short life (a snapshot, inserts, updates that leave
its large ``notes`` column unchanged, so Debezium sends its placeholder, deletes, a primary-key
change); later demos only touch one row, so the connector resumes from its offsets and every
demo finds a new event. ``pipelines/customers.yaml`` replays the topic into ``public.customers``.
"""

from __future__ import annotations

import time
import uuid
from typing import Final

from devstack import debezium, kafka_connect

CONNECTOR: Final = "reprocess_demo_customers"
TABLE: Final = "public.customers"
TOPIC: Final = "demo.public.customers"
ROWS: Final = 1_000

# Rows 1-3 change their primary key below; their notes are short (stored inline) because the new
# key's event of a large, unchanged value carries only Debezium's placeholder (docs/formats/debezium.md).
_NOTES: Final = "CASE WHEN i <= 3 THEN 'short note' ELSE repeat(md5(i::text), 100) END"
_LIFE: Final = (
    f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, name text NOT NULL, balance numeric(12, 2), "
    "tier text, notes text, touched text)",
    f"ALTER TABLE {TABLE} ALTER COLUMN notes SET STORAGE EXTERNAL",  # large notes live out of line (TOAST)
    f"INSERT INTO {TABLE} SELECT i, 'customer ' || i, i * 1.25, 'basic', {_NOTES}, NULL "
    f"FROM generate_series(1, {ROWS // 2}) AS i",
)
_STREAMED: Final = (
    f"INSERT INTO {TABLE} SELECT i, 'customer ' || i, i * 1.25, 'basic', {_NOTES}, NULL "
    f"FROM generate_series({ROWS // 2 + 1}, {ROWS}) AS i",
    f"UPDATE {TABLE} SET tier = 'gold', balance = balance + 100 WHERE id % 10 = 0",  # notes unchanged
    f"DELETE FROM {TABLE} WHERE id % 97 = 0",
    f"UPDATE {TABLE} SET id = id + 100000 WHERE id IN (1, 2, 3)",  # primary-key changes
)


def _execute(*statements: str) -> None:
    import psycopg2

    conn = psycopg2.connect(debezium.source_dsn())
    with conn, conn.cursor() as cur:
        for s in statements:
            cur.execute(s)
    conn.close()


def _table_exists() -> bool:
    import psycopg2

    conn = psycopg2.connect(debezium.source_dsn())
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (TABLE,))
        (exists,) = cur.fetchone()
    conn.close()
    return bool(exists)


def _wait_for(marker: str, seconds: float = 120) -> None:
    """Until an event holding ``marker`` reached the topic (the connector streamed everything before it)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from reprocess.airflow.hooks import KafkaConfigHook

    config = KafkaConfigHook().client_config()
    consumer = Consumer({**config, "group.id": f"cdc-demo-{marker}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])  # the log start
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error() and marker.encode() in (msg.value() or b""):
                return
    finally:
        consumer.close()
    raise TimeoutError(
        f"no change event holding {marker!r} reached {TOPIC} in {seconds:.0f}s; see {kafka_connect.log()}"
    )


def prepare() -> None:
    """The table, the worker and the connector, and one new change to replay."""
    started = time.monotonic()
    kafka_connect.start()
    debezium.ensure_source()
    first = not _table_exists()
    if first:
        _execute(*_LIFE)
    config = debezium.connector_config(CONNECTOR, [TABLE], "demo", **{"decimal.handling.mode": "string"})
    debezium.start(CONNECTOR, config)  # the first time a snapshot (op r); then it resumes from its offsets
    if first:
        for statement in _STREAMED:
            _execute(statement)
    marker = uuid.uuid4().hex
    _execute(f"UPDATE {TABLE} SET touched = '{marker}' WHERE id = 4")
    _wait_for(marker)
    print(f"cdc demo: {TABLE} streamed into {TOPIC} by connector {CONNECTOR} in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    prepare()
