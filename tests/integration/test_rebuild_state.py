"""A rebuild verifies typed keys and deletions, writes only shadow state until its swap, and its
swap carries what hangs off the live table, keeps rows the log no longer holds, and never
commits without swapping.

Real broker, Postgres and Spark (the rebuild's batches run the real Spark job over Connect).
Every expectation is recomputed here from the records the test produced (newest record per key
by offset; a tombstone deletes), with Python's own types; nothing of the product is imported
for it.
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.core.errors import ReprocessError
from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.kafka.clients import make_producer
from reprocess.operations.plan import plan_run
from reprocess.operations.rebuild import swap_in
from reprocess.postgres.commit import commit_run
from tests.integration.helpers import orders_spec, run_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]

REBUILD = {"mode": "rebuild", "batch_size": 4}


class Topic:
    """Records sent one at a time (the local broker's log end is then exact), kept for the oracle."""

    def __init__(self, kafka: dict[str, Any], name: str) -> None:
        demo_data.create_topic(kafka, name, 1)
        self.name, self.producer, self.sent = name, make_producer(kafka), []

    def send(self, key: Any, value: dict[str, Any] | None) -> int:
        raw_key = key.encode() if isinstance(key, str) else json.dumps(key).encode()
        self.producer.produce(self.name, key=raw_key, value=None if value is None else json.dumps(value).encode())
        self.producer.flush()
        self.sent.append((key, value))
        return len(self.sent) - 1  # its offset


def _table(engine, qualified: str, columns: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(f"SELECT {columns} FROM {qualified}")).all()]


def test_typed_keys_and_deleted_keys_verify_and_swap_in(kafka_config, engine, unique_name):
    """numeric, timestamptz and double keys written differently in JSON than Postgres prints
    them (1.5 / 1.500000000, ...Z / +00:00, 5 / 5.0), and keys deleted by tombstones: the shadow
    is right, so the swap must go through, and the new table must equal the oracle."""
    columns = {"n": {"type": "numeric"}, "t": {"type": "timestamptz"}, "d": {"type": "double precision"},
               "s": {"type": "text"}}  # fmt: skip
    spec = orders_spec(unique_name, unique_name, key=["n", "t", "d"], columns=columns, tombstones="delete")
    topic = Topic(kafka_config, unique_name)
    a = {"n": 1.5, "t": "2026-11-01T00:00:00Z", "d": 5}
    b = {"n": 2, "t": "2026-11-01T12:30:00+02:00", "d": 0.25}
    c = {"n": 3.25, "t": "2026-11-02T00:00:00Z", "d": 7}
    for i, key in enumerate([a, b, c, a, c]):
        topic.send(key, {**key, "s": f"v{i}"})
    topic.send(c, None)  # c is deleted
    topic.send(b, {**b, "s": "v6"})

    def typed(key: dict[str, Any]) -> tuple[Decimal, datetime, float]:
        return Decimal(str(key["n"])), datetime.fromisoformat(key["t"].replace("Z", "+00:00")), float(key["d"])

    expected: dict[tuple[Decimal, datetime, float], str | None] = {}
    for key, value in topic.sent:
        expected[typed(key)] = None if value is None else value["s"]
    expected = {k: v for k, v in expected.items() if v is not None}

    live = plan_run(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-live")
    run_spark_stage(spec, live.run_id)
    commit_run(engine, spec, live.run_id)
    rebuild = plan_run(engine, kafka_config, spec, RunRequest.from_params(REBUILD), f"{unique_name}-rebuild")
    run_spark_stage(spec, rebuild.run_id, batch_size=4)
    swap_in(engine, kafka_config, spec, rebuild.run_id)

    rows = _table(engine, spec.qualified_target, "n, t, d, s")
    assert {(n.normalize(), t, d): s for n, t, d, s in rows} == {
        (n.normalize(), t, d): s for (n, t, d), s in expected.items()
    }
