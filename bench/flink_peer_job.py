"""The Flink peer: the job a team writes to load a keyed Kafka topic into PostgreSQL with Apache Flink.

Run by ``bench.flink_peer`` with the Python of the bench's Flink venv (apache-flink 1.20, its own
pins: ``bench/flink-requirements.txt``); it imports nothing of the product. Flink SQL, as Flink's
docs write it: an ``upsert-kafka`` source (the key as the primary key, a tombstone a DELETE), bounded
to the offsets given (``scan.bounded.mode`` = ``specific-offsets``), into a JDBC sink whose primary key
makes it an upsert sink (Postgres: ``INSERT … ON CONFLICT DO UPDATE``, a DELETE for a delete), tuned
for throughput: parallelism 2, mini-batches (the source's changelog normalisation keeps one change
per key and batch), a sink buffer of 10,000 rows flushed every second.

Batch mode refuses an ``upsert-kafka`` source, and the plain ``kafka`` source in batch mode drops
tombstones, so the job runs in streaming mode over the bounded range, which ends when every
partition reaches its bound. The Postgres dialect has no ``TIMESTAMP_LTZ``: the columns go as text
(the driver's ``stringtype=unspecified`` lets the server cast them to the table's types). There is
no ordering guard: whatever the job reads last for a key overwrites the table's row.

Usage: ``python bench/flink_peer_job.py --bootstrap H:P --topic T --table schema.table --jars A.jar,B.jar
--bounded partition:0,offset:N;…``; the database URL (libpq) is ``$REPROCESS_DB_URL``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

COLUMNS = ("order_id", "customer_id", "status", "amount", "currency", "items", "updated_at")
FIELDS = ("order_id STRING, customer_id STRING, status STRING, amount STRING, currency STRING, items INT, "
          "updated_at STRING, PRIMARY KEY (order_id) NOT ENFORCED")  # fmt: skip
BUFFER_ROWS = 10_000


def quoted(value: str) -> str:
    """A Flink SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def with_options(options: dict[str, str]) -> str:
    return ", ".join(f"{quoted(k)} = {quoted(v)}" for k, v in options.items())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--jars", required=True, help="the connector jars, comma-separated")
    parser.add_argument("--bounded", required=True, help="Flink's specific-offsets: partition:0,offset:N;…")
    args = parser.parse_args()

    from pyflink.table import EnvironmentSettings, TableEnvironment

    db = urlsplit(os.environ["REPROCESS_DB_URL"])
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    for key, value in {
        "pipeline.jars": ";".join(Path(j).resolve().as_uri() for j in args.jars.split(",")),
        "parallelism.default": "2",
        "table.exec.mini-batch.enabled": "true",
        "table.exec.mini-batch.allow-latency": "1 s",
        "table.exec.mini-batch.size": str(BUFFER_ROWS),
    }.items():
        conf.set(key, value)
    source = {
        "connector": "upsert-kafka",
        "topic": args.topic,
        "properties.bootstrap.servers": args.bootstrap,
        "key.format": "raw",
        "value.format": "json",
        "value.fields-include": "ALL",
        "scan.bounded.mode": "specific-offsets",
        "scan.bounded.specific-offsets": args.bounded,
    }
    sink = {
        "connector": "jdbc",
        "url": f"jdbc:postgresql://{db.hostname}:{db.port}{db.path}?stringtype=unspecified&reWriteBatchedInserts=true",
        "table-name": args.table,
        "username": unquote(db.username or ""),
        "password": unquote(db.password or ""),
        "sink.buffer-flush.max-rows": str(BUFFER_ROWS),
        "sink.buffer-flush.interval": "1 s",
        "sink.parallelism": "2",
    }
    env.execute_sql(f"CREATE TABLE orders_topic ({FIELDS}) WITH ({with_options(source)})")
    env.execute_sql(f"CREATE TABLE orders_table ({FIELDS}) WITH ({with_options(sink)})")
    cols = ", ".join(COLUMNS)
    started = time.monotonic()
    env.execute_sql(f"INSERT INTO orders_table SELECT {cols} FROM orders_topic").wait()
    print(f"flink job seconds={time.monotonic() - started:.3f}", flush=True)  # the job alone, without JVM start/stop


if __name__ == "__main__":
    main()
