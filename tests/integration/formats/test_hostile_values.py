"""Raw bytes never reach a text column unescaped (issue 27, item 4; review exactly-once-iii, finding 2).

Values a producer can legally write, each of which used to put a NUL into the stage's COPY
stream and stall the pipeline for good: a value framed by Confluent's JSON Schema serializer
(valid UTF-8, not JSON), a tombstone whose key a Java ``LongSerializer`` wrote (8 binary bytes),
and ``"a\\u0000b"`` in a text field; and a timestamp of year 0, which Spark parses and the COPY
refuses. Each must become a dead letter (raw bytes kept, error text escaped) while the run
commits, and Postgres must equal the oracle.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.core.runs import RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.kafka import demo_data
from reprocess.kafka.clients import make_producer
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import assert_matches_oracle, log_ends, orders_spec, run_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

ORDER = {"customer_id": "c1", "status": "paid", "amount": "2.50", "updated_at": "2026-11-01T00:00:00Z"}
# Confluent's JSON Schema serializer: magic byte 0, a 4-byte schema id (5), then the JSON.
FRAMED = b"\x00\x00\x00\x00\x05" + json.dumps({"order_id": "o-framed", **ORDER}).encode()
NUL_IN_TEXT = json.dumps({"order_id": "a\u0000b", **ORDER}).encode()  # JSON's escape: valid JSON and UTF-8
# A year Spark parses and PostgreSQL refuses at the COPY ("date/time field value out of range").
YEAR_ZERO = json.dumps({"order_id": "o-year-0", **ORDER, "updated_at": "0000-01-01T00:00:00Z"}).encode()


def _dead_letters(engine: Any, spec: PipelineSpec) -> list[tuple[bytes | None, bytes | None, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text('SELECT key, value, error FROM reprocess.dead_letters WHERE pipeline = :p ORDER BY "offset"'),
            {"p": spec.name},
        ).all()
    return [(None if k is None else bytes(k), None if v is None else bytes(v), e) for k, v, e in rows]


@pytest.mark.parametrize(
    ("hostile", "error"),
    [
        (FRAMED, r"malformed JSON or not a JSON object: \u0000\u0000\u0000\u0000\u0005{"),
        (
            NUL_IN_TEXT,
            "text error: column order_id holds a NUL character or bytes that are not UTF-8, which "
            "PostgreSQL text cannot store: 0x610062",
        ),
        (YEAR_ZERO, "type error: field updated_at is not timestamptz (years 1-9999): 0000-01-01T00:00:00Z"),
    ],
    ids=["confluent_framed_json", "nul_in_text_field", "timestamp_of_year_zero"],
)
def test_a_value_postgres_cannot_hold_is_a_dead_letter_and_the_run_commits(
    kafka_config, engine, unique_name, hostile, error
):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(60, 3), malformed=(hostile,))
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    run_spark_stage(spec, plan.run_id)
    result = commit_stored(engine, spec, plan.run_id)

    assert result.dead_letters == 1
    assert_matches_oracle(engine, spec, produced, log_ends(produced))  # the oracle rejects both values
    ((_, value, stored_error),) = _dead_letters(engine, spec)
    assert value == hostile  # the raw bytes, exactly as produced (bytea)
    assert error in stored_error and "\x00" not in stored_error


@pytest.mark.parametrize("key_type", ["bigint", "text"])
def test_a_tombstone_keyed_by_a_java_long_serializer_is_a_dead_letter_and_the_run_commits(
    kafka_config, engine, unique_name, key_type
):
    """JSON values keyed by their id as 8 big-endian bytes (Java's LongSerializer): the rows come
    from the values; a tombstone has only that key, which is no text and no decimal number."""
    spec = orders_spec(
        unique_name, unique_name, key=["id"], columns={"id": {"type": key_type, "required": True}, "s": "text"},
        tombstones="delete", max_dead_letter_ratio=0.5,
    )  # fmt: skip
    demo_data.create_topic(kafka_config, unique_name, 1)
    producer = make_producer(kafka_config)
    sent: list[tuple[bytes | None, bytes | None]] = []

    def send(key: bytes | None, value: dict[str, Any] | None) -> None:
        raw = None if value is None else json.dumps(value).encode()
        producer.produce(unique_name, key=key, value=raw)
        producer.flush()  # one record per batch: the local broker's log end is then exact
        sent.append((key, raw))

    for i in range(1, 6):
        send(struct.pack(">q", i), {"id": i, "s": f"v{i}"})
    send(struct.pack(">q", 3), None)  # LongSerializer key: cannot name id 3
    send(b"4", None)  # a text key that names id 4: deletes it
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), unique_name)
    run_spark_stage(spec, plan.run_id)
    result = commit_stored(engine, spec, plan.run_id)

    # The oracle, from what was sent: every value is a row; the tombstone keyed b"4" deletes id 4;
    # the one keyed by 8 binary bytes is a dead letter (its key holds NUL bytes).
    assert (result.records_read, result.dead_letters, result.rows_deleted) == (7, 1, 0)
    with engine.connect() as conn:
        rows = dict(conn.execute(text(f"SELECT id, s FROM {spec.qualified_target}")).all())
        ledger = conn.execute(
            text("SELECT next_offset FROM reprocess.consumer_offsets WHERE pipeline = :p"), {"p": spec.name}
        ).scalar_one()
    as_key = int if key_type == "bigint" else str
    assert rows == {as_key(i): f"v{i}" for i in (1, 2, 3, 5)}
    assert ledger == len(sent)
    ((key, value, error),) = _dead_letters(engine, spec)
    assert (key, value) == (struct.pack(">q", 3), None)
    # No decimal number (bigint): the key maps to no key value; as text it cannot be stored.
    reason = "tombstone key does not map to the key columns: " if key_type == "bigint" else "text error: column id "
    assert error.startswith(reason) and error.endswith(": 0x0000000000000003")
