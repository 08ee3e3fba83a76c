"""The soak's oracle: what each target must hold, from the producers' files and the CDC source
table, and the checks against Postgres and Kafka. Imports nothing of the product (only psycopg2,
confluent_kafka and the standard library), so a product defect cannot hide in a shared helper."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from psycopg2 import sql

Row = tuple[str | None, ...]


@dataclass(frozen=True)
class Check:
    what: str
    passed: bool
    detail: str


def _norm(value: Any) -> str | None:
    """One value as text, numbers without trailing zeros, so 12.50 and 12.5 compare equal."""
    if value is None:
        return None
    if isinstance(value, Decimal | float | int) and not isinstance(value, bool):
        return format(Decimal(str(value)).normalize(), "f")
    return str(value)


def _lines(log: Path) -> list[dict[str, Any]]:
    with log.open() as f:
        return sorted((json.loads(line) for line in f), key=lambda r: (r["p"], r["o"]))


def expected_orders(log: Path) -> dict[str, Row]:
    """Offset ordering with deletes: a key's last record in its partition; a tombstone removes it."""
    out: dict[str, Row] = {}
    for r in _lines(log):
        if r["bad"]:
            continue
        if r["v"] is None:
            out.pop(r["k"], None)
            continue
        v = json.loads(r["v"])
        out[r["k"]] = (v["status"], _norm(Decimal(v["amount"])), str(v["seq"]))
    return out


def expected_payments(log: Path) -> dict[str, Row]:
    """Version ordering: a key's highest version, the later offset of equal versions."""
    best: dict[str, tuple[int, Row]] = {}
    for r in _lines(log):
        if r["bad"]:
            continue
        v = json.loads(r["v"])
        if r["k"] not in best or v["version"] >= best[r["k"]][0]:
            best[r["k"]] = (v["version"], (v["status"], _norm(Decimal(v["amount"])), str(v["version"])))
    return {k: row for k, (_, row) in best.items()}


def malformed(log: Path) -> int:
    return sum(1 for r in _lines(log) if r["bad"])


def rows(conn: Any, table: str, key: str, columns: Iterable[str]) -> tuple[dict[str, Row], int]:
    """``table``'s rows by key (as text) and its row count (more rows than keys: a doubled key)."""
    cols = [key, *columns]
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(map(sql.Identifier, cols)), sql.Identifier(*table.split("."))
    )
    with conn.cursor() as cur:
        cur.execute(query)
        fetched = cur.fetchall()
    return {str(r[0]): tuple(_norm(v) for v in r[1:]) for r in fetched}, len(fetched)


def compare(what: str, expected: Mapping[str, Row], actual: Mapping[str, Row], count: int) -> list[Check]:
    """0 lost, 0 doubled, 0 wrong values (a key the oracle does not have is wrong too)."""
    lost = [k for k in expected if k not in actual]
    wrong = [k for k in actual if k not in expected or expected[k] != actual[k]]
    sample = ", ".join(f"{k}: want {expected.get(k)} got {actual.get(k)}" for k in wrong[:3])
    return [
        Check(f"{what}: 0 lost", not lost, f"{len(lost)} of {len(expected)} keys missing {lost[:5]}"),
        Check(f"{what}: 0 doubled", count == len(actual), f"{count} rows for {len(actual)} keys"),
        Check(f"{what}: 0 wrong values", not wrong, f"{len(wrong)} wrong {sample}"),
    ]


def source_rows(dsn_conn: Any, table: str) -> dict[str, Row]:
    """The CDC source table as the target must hold it (``tier_label`` is ``upper(tier)``)."""
    actual, _ = rows(dsn_conn, table, "id", ["name", "balance", "tier", "notes"])
    return {k: (*r, None if r[2] is None else r[2].upper()) for k, r in actual.items()}


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-oracle", "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
    finally:
        consumer.close()


def ledger(conn: Any, pipeline: str) -> dict[int, int]:
    """The product's next offset to read per partition (its table ``reprocess.consumer_offsets``)."""
    with conn.cursor() as cur:
        cur.execute("SELECT partition, next_offset FROM reprocess.consumer_offsets WHERE pipeline = %s", (pipeline,))
        return {int(p): int(o) for p, o in cur.fetchall()}


def lag(conn: Any, bootstrap: str, pipeline: str, topic: str) -> int:
    ends, read = high_watermarks(bootstrap, topic), ledger(conn, pipeline)
    return sum(end - read.get(p, 0) for p, end in ends.items())


def open_runs(conn: Any, pipelines: list[str]) -> list[tuple[str, str]]:
    """Runs left ``planned`` or ``staged``."""
    with conn.cursor() as cur:
        cur.execute("SELECT run_id, state FROM reprocess.runs WHERE pipeline = ANY(%s) "
                    "AND state IN ('planned', 'staged')", (pipelines,))  # fmt: skip
        return [(str(r), str(s)) for r, s in cur.fetchall()]


def stuck_dag_runs(airflow_conn: Any, dag_ids: list[str], minutes: int) -> list[tuple[str, str, str]]:
    """DAG runs queued or running for longer than ``minutes``."""
    with airflow_conn.cursor() as cur:
        cur.execute(
            "SELECT dag_id, run_id, state FROM dag_run WHERE dag_id = ANY(%s) AND state IN ('queued', 'running') "
            "AND coalesce(start_date, queued_at) < now() - make_interval(mins => %s)",
            (dag_ids, minutes),
        )
        return [(str(d), str(r), str(s)) for d, r, s in cur.fetchall()]


def dead_letters(conn: Any, pipeline: str) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM reprocess.dead_letters WHERE pipeline = %s", (pipeline,))
        return int(cur.fetchone()[0])
