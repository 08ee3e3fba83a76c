"""Offset ordering compares records only within one (topic, partition) of one topic incarnation:
a re-created topic (told by its broker id) and one key on two partitions are refused, never
ordered by accident. Numeric values are stored exactly or become dead letters. Expected rows are
written out from the records each test produces.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from sqlalchemy import text

from reprocess.core.errors import OrderingError, StageRefusedError
from reprocess.core.runs import RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import read_spec
from reprocess.kafka import demo_data
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import ledger, run_spark_stage
from tests.support.staging import Record, mark_staged, stage_and_commit, write_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]


def _spec(tmp_path: Path, name: str, **extra: object) -> PipelineSpec:
    """A spec file of its own (the Spark job loads the spec from its file)."""
    raw = {"name": name, "topics": [name], "key": ["id"], "columns": {"id": "text", "s": "text"},
           "target_table": f"{name}.items", **extra}  # fmt: skip
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return read_spec(path)


def _produce(kafka_config, topic: str, values: list[tuple[int, bytes]]) -> None:
    """(partition, value) records with no key (a producer that does not key by the spec's key),
    one batch each so the log end is exact on every broker."""
    from confluent_kafka import Producer

    producer = Producer(kafka_config)
    for partition, value in values:
        producer.produce(topic, value=value, partition=partition)
        assert producer.flush(30) == 0


def _rows(engine, spec: PipelineSpec, columns: str = "id, s") -> dict:
    with engine.connect() as conn:
        return dict(conn.execute(text(f"SELECT {columns} FROM {spec.qualified_target}")).all())


def _run(engine, run_id: str):
    with engine.connect() as conn:
        return conn.execute(text("SELECT state, error FROM reprocess.runs WHERE run_id = :r"), {"r": run_id}).one()


def _event(key: str, s: str) -> bytes:
    return json.dumps({"id": key, "s": s}).encode()


def test_a_topic_recreated_under_its_name_is_refused_by_its_topic_id(engine, db_url, kafka_config, unique_name,
                                                                     tmp_path):  # fmt: skip
    """Issue 25 item 2: a topic deleted, re-created and refilled past the old ledger was read on
    from the ledger (its first offsets skipped) and old rows with higher offsets beat new records."""
    from reprocess.kafka.clients import make_admin

    spec = _spec(tmp_path, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 1)
    _produce(kafka_config, unique_name, [(0, _event("a", f"old-{i}")) for i in range(3)])
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-1")
    staged = write_stage(db_url, spec, plan.run_id, [Record(0, 2, {"id": "a", "s": "old-2"})])
    mark_staged(engine, plan.run_id, staged)
    commit_stored(engine, spec, plan.run_id)
    assert ledger(engine, spec) == {0: 3}

    admin = make_admin(kafka_config)
    for fut in admin.delete_topics([unique_name], request_timeout=15).values():
        fut.result()
    deadline = time.monotonic() + 30
    while unique_name in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the topic deletion did not finish"
        time.sleep(0.5)
    demo_data.create_topic(kafka_config, unique_name, 1)
    _produce(kafka_config, unique_name, [(0, _event("a", f"new-{i}")) for i in range(5)])  # past the old ledger

    with pytest.raises(OrderingError, match=rf"topic {unique_name} was re-created \(id .+ → .+\).*mode=rebuild"):
        snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-2")
    state, error = _run(engine, f"{unique_name}-2")
    assert state == "failed" and "was re-created" in error
    assert ledger(engine, spec) == {0: 3} and _rows(engine, spec) == {"a": "old-2"}


def test_one_key_on_two_partitions_under_offset_ordering_is_refused(engine, db_url, kafka_config, unique_name,
                                                                    tmp_path):  # fmt: skip
    """Issue 25 item 2: a producer that does not key by the spec's key put one key on two
    partitions, and the record on the higher partition won forever, whatever its age."""
    spec = _spec(tmp_path, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    # "k" is written first on partition 1 ("old"), then on partition 0 ("new"); "j" only on partition 0.
    _produce(kafka_config, unique_name, [(1, _event("k", "old")), (0, _event("k", "new")), (0, _event("j", "j"))])
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-1")
    run_spark_stage(spec, plan.run_id)
    where = rf"key 'k' on {unique_name}\[0\], {unique_name}\[1\]"
    with pytest.raises(StageRefusedError, match=rf"{where}.*compares offsets only within one partition"):
        commit_stored(engine, spec, plan.run_id)
    state, error = _run(engine, plan.run_id)
    assert state == "failed" and "more than one partition" in error
    assert _rows(engine, spec) == {} and ledger(engine, spec) == {}

    # Across runs too: the stored row sits on partition 0, a new record of the key on partition 1.
    stage_and_commit(engine, db_url, spec, f"{unique_name}-p0", [Record(0, 1, {"id": "k", "s": "new"})])
    with pytest.raises(StageRefusedError, match=where):
        stage_and_commit(engine, db_url, spec, f"{unique_name}-p1", [Record(1, 0, {"id": "k", "s": "old"})])
    assert _rows(engine, spec) == {"k": "new"}


def test_numeric_values_are_stored_exactly_or_become_dead_letters(engine, db_url, kafka_config, unique_name,
                                                                 tmp_path):  # fmt: skip
    """Issue 25 item 4: numerics went through Spark's decimal(38,9): distinct keys 1.0000000001 and
    1.0000000004 collapsed into one row, amounts were rounded to 9 decimals, and more than 29
    integer digits were type errors. A JSON number is exact up to Spark's 38 digits; a longer value
    keeps every digit as a JSON string, and is a dead letter as a JSON number, never rounded."""
    spec = _spec(tmp_path, unique_name, columns={"id": "numeric", "amount": "numeric"}, max_dead_letter_ratio=0.9)
    demo_data.create_topic(kafka_config, unique_name, 1)
    good = {  # raw JSON → (id, amount) as PostgreSQL numeric holds them
        b'{"id": 1.0000000001, "amount": 0.000000000123456789}': ("1.0000000001", "0.000000000123456789"),
        b'{"id": 1.0000000004, "amount": 12345678901234567890.123456789012345678}':
            ("1.0000000004", "12345678901234567890.123456789012345678"),
        b'{"id": 2, "amount": "123456789012345678901234567890123456789012.5"}':
            ("2", "123456789012345678901234567890123456789012.5"),
        b'{"id": "3", "amount": " -1.50e-3 "}': ("3", "-0.00150"),
    }  # fmt: skip
    bad = [  # JSON numbers of 39 and 42 digits (Spark reads them as doubles), not a number, out of range
        b'{"id": 4, "amount": 12345678901234567890.1234567890123456789}',
        b'{"id": 5, "amount": 123456789012345678901234567890123456789012}',
        b'{"id": 6, "amount": "NaN"}',
        b'{"id": 7, "amount": "1e99999"}',
    ]
    _produce(kafka_config, unique_name, [(0, v) for v in [*good, *bad]])
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-1")
    run_spark_stage(spec, plan.run_id)
    result = commit_stored(engine, spec, plan.run_id)
    assert result.dead_letters == len(bad)
    stored = {str(k): str(v) for k, v in _rows(engine, spec, "id, amount").items()}
    expected = {Decimal(i): Decimal(a) for i, a in good.values()}
    assert {Decimal(k): Decimal(v) for k, v in stored.items()} == expected
    assert len(stored) == len(good)  # distinct keys stay distinct
    with engine.connect() as conn:
        errors = conn.execute(text('SELECT "offset", error FROM reprocess.dead_letters WHERE pipeline = :p '
                                   'ORDER BY 1'), {"p": spec.name}).all()  # fmt: skip
    assert [o for o, _ in errors] == list(range(len(good), len(good) + len(bad)))
    assert ["more than 38 digits" in e for _, e in errors] == [True, True, False, False]
    assert all("field amount" in e for _, e in errors)
