"""``reprocess audit``: the whole table against the whole retained log, and its heal per key (issue 57).

On real Kafka, Spark and Postgres, one pipeline carries a table of cases the day's window check cannot
see, because each key's newest record lies two days before the window: a row changed by SQL, a row deleted
by SQL, a row inserted by SQL, and keys whose records left the log (delete-records moves the log start past
them: their rows are unprovable). The produced messages are the oracle (it imports nothing of the product).
The audit finds each kind (``--plan --json`` through the command, exit 1); the heal rewrites exactly the
keys it may (a run of its own, ledger untouched); the re-audit finds no difference, only the unprovable
keys, listed; the day's window check says ok before and after, as it did.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from sqlalchemy import text

from reprocess.kafka import demo_data
from reprocess.operations.tamper import check_stored
from tests.support import oracle
from tests.support.helpers import PAYMENTS_SPEC, backfill, connect_session, ledger, orders_spec, reconcile_over_connect

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]
BASE = datetime(2026, 11, 1, tzinfo=UTC)
LATER = BASE + timedelta(days=2)  # the window checked daily: the corrupted keys' records lie two days before it
WINDOW = (LATER, LATER + timedelta(days=1))
LEFT_OUT = "__debezium_unavailable_value"  # Debezium's placeholder for an unchanged TOASTed value


def _newest(produced: Any) -> dict[str, tuple[str, Decimal, int, int]]:
    """payment_id → (status, amount, partition, offset) of its highest version (ties: offset)."""
    values = {(p, o): json.loads(v) for p, o, _k, v in produced.messages}
    return {
        key: (values[(p, o)]["status"], Decimal(values[(p, o)]["amount"]), p, o)
        for key, (_v, p, o) in oracle.expected_by_version(produced, "payment_id").items()
    }


def _stored(engine: Any, spec: Any) -> dict[str, tuple[str, Decimal]]:
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT payment_id, status, amount FROM {spec.qualified_target}")).all()
    return {r[0]: (r[1], Decimal(r[2])) for r in rows}


def _audit(engine: Any, kafka: dict[str, Any], spec: Any, audit_id: str, **kw: Any) -> dict[str, Any]:
    from reprocess.runner.audit import audit_here
    from reprocess.spark.job import WindowStager

    started = time.monotonic()
    with connect_session() as spark:
        stager = WindowStager(spark, os.environ["AIRFLOW_CONN_REPROCESS_DB"], kafka)
        _ranges, report = audit_here(engine, kafka, spec, stager, audit_id, **kw)
    print(f"{audit_id}: {report.verdict} {report.counts} in {time.monotonic() - started:.1f} s")
    return report.as_dict()


def test_audit_finds_rows_changed_deleted_and_inserted_by_sql_before_the_window_heals_them_and_lists_the_unprovable(
    kafka_config, engine, unique_name
):
    spec = orders_spec(unique_name, unique_name, base=PAYMENTS_SPEC)
    demo_data.create_topic(kafka_config, unique_name, 2)
    first = demo_data.produce(kafka_config, unique_name, 2, demo_data.payment_events(120), malformed=(), base_time=BASE)
    later = [(k.replace("p-", "q-"), {**e, "payment_id": e["payment_id"].replace("p-", "q-")})
             for k, e in demo_data.payment_events(30, seed=5)]  # fmt: skip
    second = demo_data.produce(kafka_config, unique_name, 2, later, malformed=(), base_time=LATER)
    produced = demo_data.Produced(first.messages + second.messages)
    newest = _newest(produced)
    backfill(engine, kafka_config, spec, f"{unique_name}-load")
    assert _stored(engine, spec) == {k: v[:2] for k, v in newest.items()}
    assert all(v.ok for v in reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-c1"))

    # Partition 1 loses its first 40 offsets (delete-records): the keys whose newest record lay there are
    # unprovable. The SQL changes touch keys of partition 0, last written two days before the window.
    cut = 40
    unprovable = sorted(k for k, (_s, _a, p, o) in newest.items() if p == 1 and o < cut)
    day_one = sorted(k for k, (_s, _a, p, _o) in newest.items() if p == 0 and k.startswith("p-"))
    changed, deleted = day_one[0], day_one[1]
    assert unprovable and changed and deleted
    admin = AdminClient({"bootstrap.servers": kafka_config["bootstrap.servers"]})
    (cut_future,) = admin.delete_records([TopicPartition(unique_name, 1, cut)], operation_timeout=30).values()
    assert cut_future.result(30).low_watermark == cut
    ledger_before = ledger(engine, spec)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {spec.qualified_target} SET status = 'wrong' WHERE payment_id = :k"), {"k": changed})
        conn.execute(text(f"DELETE FROM {spec.qualified_target} WHERE payment_id = :k"), {"k": deleted})
        conn.execute(
            text(f"INSERT INTO {spec.qualified_target} (payment_id, order_id, status, amount, version, _kafka_topic, "
                 "_kafka_partition, _kafka_offset, _run_id) VALUES ('x-inserted', 'o-x', 'settled', 1, 1, :t, 0, 3, "
                 "'by hand')"),
            {"t": unique_name},
        )  # fmt: skip
    tampered = check_stored(engine, spec)
    assert (tampered.changed, tampered.removed, tampered.inserted) == (1, 1, 1), tampered
    # The day's window check does not see any of it (review V, finding 7).
    assert all(v.ok for v in reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-c2"))

    # --plan through the command: every kind found, exit 1, nothing written, no verdict recorded.
    started = time.monotonic()
    cli = subprocess.run([sys.executable, "-m", "reprocess.cli", "audit", spec.name, "--plan", "--json"],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    print(f"audit --plan --json: exit {cli.returncode} in {time.monotonic() - started:.1f} s", cli.stderr[-3000:])
    assert cli.returncode == 1, cli.stdout + cli.stderr[-3000:]
    planned = json.loads(cli.stdout)
    expected = {"differ": 1, "missing": 1, "must not be": 1, "unprovable": len(unprovable)}
    assert planned["counts"] == expected, planned
    assert planned["columns"] == {"status": 1}
    assert planned["values"] == [[changed, "status", "wrong", newest[changed][0]]]
    assert [e["key"] for e in planned["examples"]["missing"]] == [deleted]
    assert [e["key"] for e in planned["examples"]["must not be"]] == ["x-inserted"]
    assert [e["key"] for e in planned["examples"]["unprovable"]] == unprovable[:5]
    assert planned["lost"] == [{"topic": unique_name, "partition": 1, "start": 0, "end": cut}]
    assert planned["heal_run"] is None
    with engine.connect() as conn:
        assert not conn.execute(text("SELECT count(*) FROM reprocess.audits WHERE pipeline = :p"),
                                {"p": spec.name}).scalar()  # fmt: skip

    # The heal: exactly the three keys, a run of its own, the ledger untouched, the unprovable rows left.
    healed = _audit(engine, kafka_config, spec, f"{unique_name}-a1", heal=True)
    assert healed["counts"] == expected
    assert healed["healed"] == {"differ": 1, "missing": 1, "must not be": 1}
    assert _stored(engine, spec) == {k: v[:2] for k, v in newest.items()}
    assert ledger(engine, spec) == ledger_before
    # The heal wrote as the product: the tamper check (`audit --stored`), which found the SQL changes, finds
    # nothing now.
    stored = subprocess.run([sys.executable, "-m", "reprocess.cli", "audit", spec.name, "--stored", "--json"],
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert stored.returncode == 0 and json.loads(stored.stdout)["verdict"] == "ok", stored.stdout + stored.stderr
    with engine.connect() as conn:
        run = conn.execute(text("SELECT kind, state, rows_upserted, rows_deleted FROM reprocess.runs "
                                "WHERE run_id = :r"), {"r": healed["heal_run"]}).one()  # fmt: skip
        healed_by = conn.execute(text(f"SELECT payment_id FROM {spec.qualified_target} WHERE _run_id = :r "
                                      "ORDER BY 1"), {"r": healed["heal_run"]}).scalars().all()  # fmt: skip
    assert tuple(run) == ("audit heal", "committed", 2, 1)
    assert healed_by == sorted([changed, deleted])

    # The re-audit: nothing differs; the unprovable keys stay listed, never "equal".
    again = _audit(engine, kafka_config, spec, f"{unique_name}-a2")
    assert again["counts"] == {"differ": 0, "missing": 0, "must not be": 0, "unprovable": len(unprovable)}
    assert again["verdict"] == "unprovable"
    assert all(v.ok for v in reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-c3"))
    with engine.connect() as conn:
        recorded = conn.execute(text("SELECT audit_id, verdict FROM reprocess.audits WHERE pipeline = :p "
                                     "ORDER BY audited_at"), {"p": spec.name}).all()  # fmt: skip
    assert [tuple(r) for r in recorded] == [(f"{unique_name}-a1", "differences"), (f"{unique_name}-a2", "unprovable")]


def _debezium_spec(name: str) -> Any:
    import yaml

    from reprocess.formats.specs import read_spec

    raw = {"name": name, "topics": [name], "format": "debezium", "key": ["id"], "target_table": f"{name}.items",
           "columns": {"id": "integer", "status": "text", "notes": "text"}}  # fmt: skip
    path = Path(os.environ["REPROCESS_PIPELINES_DIR"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return read_spec(path)


def _debezium(
    kafka: dict[str, Any], topic: str, events: list[tuple[datetime, str, int, str | None, str | None]]
) -> None:
    """(time, op, id, status, notes) change events on one partition; ``d`` is a delete and its tombstone."""
    from reprocess.kafka.clients import make_producer

    demo_data.create_topic(kafka, topic, 1)
    producer = make_producer(kafka)
    for at, op, key, status, notes in events:
        ts = int(at.timestamp() * 1000)
        row = {"id": key, "status": status, "notes": notes}
        before, after = (row, None) if op == "d" else (None, row)
        value = {"before": before, "after": after, "op": op, "source": {"ts_ms": ts}, "ts_ms": ts}
        key_bytes = json.dumps({"id": key}).encode()
        producer.produce(topic, key=key_bytes, value=json.dumps(value).encode(), timestamp=ts)
        if op == "d":
            producer.produce(topic, key=key_bytes, value=None, timestamp=ts)
    producer.flush()


def test_audit_finds_a_debezium_large_value_changed_by_sql_whose_full_value_is_weeks_old_and_a_deleted_key_back(
    kafka_config, engine, unique_name
):
    """The window's records of key 1 leave ``notes`` out (Debezium's placeholder for an unchanged TOASTed
    value); its full value was sent weeks before. The window check cannot compare it; the audit resolves it
    from the whole log, as a run does, and heals it. Key 3 was deleted at the source; a row put back by SQL
    must not be."""
    spec = _debezium_spec(unique_name)
    weeks_ago = LATER - timedelta(days=21)
    big = "full notes " * 500  # a large value: Debezium leaves it out of the changes that keep it
    _debezium(kafka_config, unique_name, [
        (weeks_ago, "c", 1, "new", big),
        (weeks_ago, "c", 2, "new", "two"),
        (weeks_ago, "c", 3, "new", "three"),
        (weeks_ago + timedelta(days=1), "d", 3, "new", "three"),
        *[(LATER + timedelta(minutes=n), "u", 1, f"paid-{n}", LEFT_OUT) for n in range(3)],
    ])  # fmt: skip
    backfill(engine, kafka_config, spec, f"{unique_name}-load")
    expected = {1: ("paid-2", big), 2: ("new", "two")}
    assert _items(engine, spec) == expected
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {spec.qualified_target} SET notes = 'wrong' WHERE id = 1"))
        put_back = (f"INSERT INTO {spec.qualified_target} (id, status, notes, _kafka_topic, _kafka_partition, "
                    "_kafka_offset, _run_id) VALUES (3, 'new', 'three', :t, 0, 2, 'by hand')")  # fmt: skip
        conn.execute(text(put_back), {"t": unique_name})
    assert all(v.ok for v in reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-c1"))

    found = _audit(engine, kafka_config, spec, f"{unique_name}-a1", heal=True)
    assert found["counts"] == {"differ": 1, "missing": 0, "must not be": 1, "unprovable": 0}, found
    assert found["columns"] == {"notes": 1}
    assert found["values"][0][:3] == ["1", "notes", "wrong"]
    assert found["values"][0][3].startswith('"full notes') and found["values"][0][3].endswith("…")  # its JSON, cut
    assert found["healed"] == {"differ": 1, "missing": 0, "must not be": 1}
    assert _items(engine, spec) == expected
    again = _audit(engine, kafka_config, spec, f"{unique_name}-a2")
    assert again["verdict"] == "equal", again
    assert all(v.ok for v in reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-c2"))
    # `reprocess status` shows the last audit's verdict and age (the coverage page shows the same line).
    status = subprocess.run([sys.executable, "-m", "reprocess.cli", "status", spec.name], capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    # The age is the minutes since the audit: 1 or more when the machine is loaded (seen beside a second suite).
    shown = re.search(rf"AUDIT equal (\d+) min ago \({re.escape(unique_name)}-a2\)", status.stdout)
    assert shown and int(shown[1]) <= 10, status.stdout + status.stderr[-2000:]


def _items(engine: Any, spec: Any) -> dict[int, tuple[str, str]]:
    with engine.connect() as conn:
        return {
            r[0]: (r[1], r[2]) for r in conn.execute(text(f"SELECT id, status, notes FROM {spec.qualified_target}"))
        }
