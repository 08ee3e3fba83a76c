"""The baseline: the loop a developer would write by hand, in one Python process."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg2.extras
from psycopg2 import sql

from bench.consume import FETCH_BATCH, consume_batches
from bench.context import Bench, Result
from bench.data import Dataset


def baseline_python_loop(bench: Bench, ds: Dataset) -> Result:
    """Baseline: consume(10000) → json.loads + required-field check → newest record per key
    within the batch → ``execute_values`` upsert (the product's newer-than-existing rule), a
    ``DELETE`` of the keys whose newest record is a tombstone (same rule) + the offsets upserted
    into a ledger table in the same transaction, committed once per batch. No deletion markers:
    a replay re-inserts a deleted key until it reaches the key's tombstone again."""
    from reprocess.postgres.target import target_identifier

    spec = bench.spec("baseline", ds.topic)
    bench.create_target(spec)
    ledger = sql.SQL("{}.{}").format(sql.Identifier(spec.target_schema), sql.Identifier("ledger"))
    payload = [c.name for c in spec.columns]
    cols = [*payload, "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_run_id"]
    lineage = ("_kafka_topic", "_kafka_partition", "_kafka_offset")
    upsert = sql.SQL(
        "INSERT INTO {t} AS t ({cols}) VALUES %s ON CONFLICT (order_id) DO UPDATE SET {sets} WHERE ({old}) < ({new})"
    ).format(
        t=target_identifier(spec),
        cols=sql.SQL(", ").join(map(sql.Identifier, cols)),
        sets=sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in cols[1:]),
        old=sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(c)) for c in lineage),
        new=sql.SQL(", ").join(sql.SQL("EXCLUDED.{}").format(sql.Identifier(c)) for c in lineage),
    )
    template = "(" + ", ".join(["%s"] * (len(payload) + 3)) + ", to_timestamp(%s::float8 / 1000), %s)"
    advance = sql.SQL(
        "INSERT INTO {} (topic, partition, next_offset) VALUES %s "
        "ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset"
    ).format(ledger)
    delete = sql.SQL(
        "DELETE FROM {t} AS t USING (VALUES %s) AS d (k, topic, p, o) WHERE t.order_id = d.k "
        "AND (t._kafka_topic, t._kafka_partition, t._kafka_offset) < (d.topic, d.p::int, d.o::bigint)"
    ).format(t=target_identifier(spec))
    required = [c.name for c in spec.columns if c.required]
    records = dead = upserted = deleted = batches = 0
    conn = bench.connect()
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} (topic text, partition int, next_offset bigint, "
                        "PRIMARY KEY (topic, partition))").format(ledger)
            )  # fmt: skip
        started = time.monotonic()
        with conn.cursor() as cur:
            upsert_s, advance_s, delete_s = upsert.as_string(cur), advance.as_string(cur), delete.as_string(cur)
            for batch in consume_batches(bench.kafka, ds):
                newest: dict[str, tuple[Any, ...]] = {}
                gone: dict[str, tuple[Any, ...]] = {}  # keys whose newest record in the batch is a tombstone
                positions: dict[int, int] = {}
                for msg in batch:
                    p, off = msg.partition(), msg.offset()
                    records += 1
                    positions[p] = off + 1
                    if msg.value() is None:
                        key = msg.key().decode()
                        newest.pop(key, None)
                        gone[key] = (key, ds.topic, p, off)
                        continue
                    try:
                        ev = json.loads(msg.value())
                        if not isinstance(ev, dict) or any(ev.get(k) in (None, "") for k in required):
                            raise ValueError("missing required field")
                    except ValueError:
                        dead += 1
                        continue
                    gone.pop(ev["order_id"], None)
                    newest[ev["order_id"]] = (
                        *(ev.get(c) for c in payload), ds.topic, p, off, msg.timestamp()[1], spec.name
                    )  # fmt: skip
                if newest:
                    rows = list(newest.values())
                    psycopg2.extras.execute_values(cur, upsert_s, rows, template, page_size=FETCH_BATCH)
                    upserted += cur.rowcount
                if gone:
                    psycopg2.extras.execute_values(cur, delete_s, list(gone.values()), page_size=FETCH_BATCH)
                    deleted += cur.rowcount
                if positions:
                    psycopg2.extras.execute_values(cur, advance_s, [(ds.topic, p, o) for p, o in positions.items()])
                conn.commit()
                batches += 1
        seconds = time.monotonic() - started
    finally:
        conn.close()
    return Result(
        "baseline: Python loop (consume → json → execute_values)",
        records,
        seconds,
        detail={
            "batches": batches,
            "dead": dead,
            "rows_upserted": upserted,
            "rows_deleted": deleted,
            **bench.fingerprint(spec),
        },
    )
