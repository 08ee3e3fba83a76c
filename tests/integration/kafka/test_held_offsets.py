"""A producer that leaves a transaction open holds a partition's last stable offset (LSO) below its
high watermark (HW): nothing past the LSO is readable, so the pipeline stalls there. The stall must
be visible: the snapshot keeps the HW, ``reprocess status``, the run report and the lag gauge show
HW − LSO and since when the LSO has been held, and a reconciliation window reaching the held LSO is
"not yet stable", never ok. Once the transaction commits, all is back to normal and the target
equals the oracle (``tests/support/oracle.py``) over every committed record.
"""

from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.core.errors import WindowNotStable
from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.kafka.clients import make_producer
from reprocess.operations.lag import live_lag
from reprocess.operations.summary import run_summary
from tests.support.helpers import (
    ledger,
    oracle_rows,
    orders_spec,
    plan_stage_commit,
    reconcile_over_connect,
    target_rows,
)

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

BASE = datetime(2026, 11, 1, tzinfo=UTC)
WINDOW = (BASE, BASE + timedelta(days=1))
# The broker aborts a transaction left open this long; the test commits it well before.
TRANSACTION_TIMEOUT_MS = 300_000
HELD = 8  # records of the open transaction, all on partition 0


def _open_transaction(kafka: dict[str, Any], topic: str) -> tuple[Any, demo_data.Produced]:
    """A transactional producer that writes HELD orders to partition 0 and leaves its transaction open."""
    producer = make_producer(
        kafka, **{"transactional.id": f"held-{topic}", "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    sent = demo_data.Produced()

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        sent.add(msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1])

    ts = int((BASE + timedelta(hours=2)).timestamp() * 1000)
    for key, ev in demo_data.order_events(HELD, 1, seed=39)[:HELD]:
        held_key = key.replace("o-", "h-")
        producer.produce(topic, value=json.dumps({**ev, "order_id": held_key}).encode(), key=held_key.encode(),
                         partition=0, timestamp=ts, on_delivery=delivered)  # fmt: skip
    producer.flush(30)
    return producer, sent


def _status(pipeline: str) -> tuple[str, dict[str, Any]]:
    def run(*args: str) -> str:
        return subprocess.run(["reprocess", "status", pipeline, *args], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip

    [as_json] = json.loads(run("--json"))
    return run(), as_json


def _verdicts(as_json: dict[str, Any]) -> dict[int, str]:
    """The status's calendar cells of the day, by partition."""
    return {c["partition"]: c["verdict"] for c in as_json["calendar"]}


def test_an_open_transaction_shows_as_held_offsets_since_its_first_snapshot_and_a_not_yet_stable_window(
    kafka_config, engine, unique_name
):
    kafka, topic = kafka_config, unique_name
    spec = orders_spec(unique_name, topic, max_dead_letter_ratio=0.5)
    demo_data.create_topic(kafka, topic, 2)
    first = demo_data.produce(kafka, topic, 2, demo_data.order_events(40, 2, seed=5), base_time=BASE)
    producer, held = _open_transaction(kafka, topic)
    lso = {p: max(o for q, o, *_ in first.messages if q == p) + 1 for p in (0, 1)}
    hw = lso[0] + HELD

    # 1. Two runs while the transaction is open: both stop at the LSO; the second reads nothing.
    plan_stage_commit(engine, kafka, spec, RunRequest.from_params({}), f"{unique_name}-backfill")
    time.sleep(1.1)
    idle = plan_stage_commit(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-idle")
    assert ledger(engine, spec) == lso
    assert {r.partition: (r.start, r.end) for r in idle.ranges if r.width} == {}
    with engine.connect() as conn:
        snaps = conn.execute(
            text("SELECT s.partition, s.log_end, s.high_watermark, s.taken_at FROM reprocess.offset_snapshots s "
                 "JOIN reprocess.runs r ON r.run_id = s.run_id WHERE r.pipeline = :p ORDER BY s.taken_at"),
            {"p": spec.name},
        ).all()  # fmt: skip
    assert {(s.partition, s.log_end, s.high_watermark) for s in snaps} == {(0, lso[0], hw), (1, lso[1], lso[1])}
    since = min(s.taken_at for s in snaps if s.partition == 0)
    assert max(s.taken_at for s in snaps) > since  # the second snapshot did not move "since"

    # The status: lag 0, but partition 0 held by an open transaction since the first snapshot.
    out, as_json = _status(spec.name)
    parts = {x["partition"]: x for x in as_json["partitions"]}
    assert [parts[p]["lag"] for p in (0, 1)] == [0, 0]
    assert [parts[p]["unstable"] for p in (0, 1)] == [HELD, 0]
    assert datetime.fromisoformat(parts[0]["held_since"]) == since and parts[1]["held_since"] is None
    assert as_json["unstable"] == HELD
    stamp = since.isoformat(timespec="seconds")
    assert f"{topic}[0] held by an open transaction since {stamp}: {HELD} offsets" in out
    assert f"{topic}[1] held" not in out
    report = run_summary(engine, spec.name, idle.run_id)
    assert [h.split(": ")[0] for h in report["held"]] == [f"{topic}[0] held by an open transaction since {stamp}"]
    assert {x.partition: x.unstable for x in live_lag(engine, kafka, spec)} == {0: HELD, 1: 0}
    assert target_rows(engine, spec) == oracle_rows(first)

    # 2. The day's reconciliation reaches the held LSO on partition 0: not yet stable, never ok.
    with pytest.raises(WindowNotStable, match=rf"{topic}\[0\] not yet stable: .* at {lso[0]} below .* {hw}"):
        reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-held")
    out, as_json = _status(spec.name)
    assert _verdicts(as_json) == {0: "not yet stable", 1: "ok"} and "1 not yet stable" in out

    # 3. The transaction commits: the next run reads it, nothing is held, the window is ok.
    producer.commit_transaction(30)
    demo_data.wait_for_markers(kafka, topic, {0: hw + 1})
    plan_stage_commit(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-after")
    assert ledger(engine, spec) == {0: hw + 1, 1: lso[1]}
    _, as_json = _status(spec.name)
    assert as_json["unstable"] == 0 and all(x["held_since"] is None for x in as_json["partitions"])
    assert {x.partition: x.unstable for x in live_lag(engine, kafka, spec)} == {0: 0, 1: 0}
    assert all(v.ok for v in reconcile_over_connect(engine, spec, *WINDOW, f"{unique_name}-stable"))
    assert _verdicts(_status(spec.name)[1]) == {0: "ok", 1: "ok"}
    everything = demo_data.Produced(sorted(first.messages + held.messages), {**first.timestamps, **held.timestamps})
    assert target_rows(engine, spec) == oracle_rows(everything)
