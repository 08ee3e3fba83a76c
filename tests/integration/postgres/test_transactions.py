"""Aborted transactions, and transactions still open when a run snapshots the topic, on Apache Kafka.

Their records must be invisible to every read (backfill, incremental, reconciliation window,
redrive, rebuild) while the ledger covers their offsets, so the next run starts after them; an
open transaction's records belong to the run after its commit. The oracle is
``tests/support/oracle.py`` over the records the producers committed (delivery reports of aborted
records are kept apart); the expected ends come from the delivery reports and the rule that
every transaction leaves one marker in each partition it wrote to.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from reprocess.core.runs import RunKind, RunRequest
from reprocess.kafka import demo_data
from reprocess.kafka.clients import make_producer
from reprocess.operations.redrive import plan_redrive
from reprocess.runner.start import commit_stored, start_run
from tests.support import oracle
from tests.support.helpers import (
    ORDERS_SPEC,
    assert_tiled,
    dead_letter_count,
    ledger,
    oracle_rows,
    orders_spec,
    plan_stage_commit,
    reconcile_over_connect,
    run_spark_stage,
    target_rows,
)

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

BASE = datetime(2026, 11, 1, tzinfo=UTC)
NO_CURRENCY = "missing required field currency"


def _order(key: str, status: str, currency: bool = True) -> dict[str, Any]:
    ev = {"order_id": key, "customer_id": "c-t", "status": status, "amount": "2.50", "currency": "EUR",
          "items": 1, "updated_at": "2026-11-01T06:00:00Z"}  # fmt: skip
    return ev if currency else {k: v for k, v in ev.items() if k != "currency"}


class Writer:
    """One producer (plain or transactional) whose delivery reports are kept as a Produced."""

    def __init__(self, kafka: dict[str, Any], topic: str, transactional_id: str | None = None) -> None:
        extra = {"transactional.id": transactional_id} if transactional_id else {}
        self.producer, self.topic, self.sent = make_producer(kafka, **extra), topic, demo_data.Produced()
        if transactional_id:
            self.producer.init_transactions(30)
            self.producer.begin_transaction()

    def send(self, events: list[tuple[str, dict[str, Any], int]], ts: datetime) -> Writer:
        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            self.sent.add(msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1])

        for key, ev, partition in events:
            self.producer.produce(self.topic, value=json.dumps(ev).encode(), key=key.encode(), partition=partition,
                                  timestamp=int(ts.timestamp() * 1000), on_delivery=delivered)  # fmt: skip
        self.producer.flush(30)
        return self


def _both(prefix: str, n: int, status: str) -> list[tuple[str, dict[str, Any], int]]:
    return [(f"{prefix}-{i}", _order(f"{prefix}-{i}", status), i % 2) for i in range(n)]


def _merge(*parts: demo_data.Produced) -> demo_data.Produced:
    out = demo_data.Produced()
    for part in parts:
        for p, o, k, v in part.messages:
            out.add(p, o, k, v, part.timestamps[(p, o)])
    out.messages.sort()
    return out


def _below(produced: demo_data.Produced, ends: dict[int, int]) -> demo_data.Produced:
    return _merge(demo_data.Produced([m for m in produced.messages if m[1] < ends[m[0]]], produced.timestamps))


def test_aborted_and_open_transactions_are_invisible_to_every_read_and_covered_by_the_ledger(
    kafka_config, engine, unique_name
):
    kafka, topic = kafka_config, unique_name
    columns = yaml.safe_load(ORDERS_SPEC.read_text())["columns"]
    required = {**columns, "currency": {**columns["currency"], "required": True}}
    strict = orders_spec(unique_name, topic, columns=required, max_dead_letter_ratio=0.5)
    demo_data.create_topic(kafka, topic, 2)

    # The log, per partition: orders (+ malformed), on p0 an order without currency, an ABORTED
    # transaction on both partitions, another order without currency; more orders; then two
    # transactions left OPEN (one later committed, one later aborted) and orders after them.
    first = demo_data.produce(kafka, topic, 2, demo_data.order_events(60, 3, seed=61), base_time=BASE)
    lacking_a = Writer(kafka, topic).send([("n-0", _order("n-0", "new", currency=False), 0)], BASE + timedelta(hours=1))
    ghost = Writer(kafka, topic, f"ghost-{topic}").send(_both("g", 12, "aborted"), BASE + timedelta(hours=1))
    ghost.producer.abort_transaction(30)
    demo_data.wait_for_markers(
        kafka, topic, {p: max(o for q, o, *_ in ghost.sent.messages if q == p) + 2 for p in (0, 1)}
    )
    lacking_b = Writer(kafka, topic).send([("n-1", _order("n-1", "new", currency=False), 0)], BASE + timedelta(hours=1))
    middle = Writer(kafka, topic).send(_both("m", 10, "paid"), BASE + timedelta(hours=2))
    later_committed = Writer(kafka, topic, f"open-c-{topic}").send(_both("c", 8, "late"), BASE + timedelta(hours=3))
    later_aborted = Writer(kafka, topic, f"open-a-{topic}").send(_both("a", 8, "ghost"), BASE + timedelta(hours=3))
    after = Writer(kafka, topic).send(_both("t", 6, "after"), BASE + timedelta(hours=4))

    visible = _merge(first, lacking_a.sent, lacking_b.sent, middle.sent, after.sent)
    lso = {p: min(o for q, o, *_ in later_committed.sent.messages if q == p) for p in (0, 1)}
    lacking = {"n-0", "n-1"}

    # 1. Backfill while both transactions are open: it ends at the last stable offset (the open
    #    transactions' first offset), reads no aborted record, and its ledger covers the aborted ones.
    backfill = plan_stage_commit(engine, kafka, strict, RunRequest.from_params({}), f"{unique_name}-backfill")
    assert {r.partition: r.end for r in backfill.ranges} == lso
    before_open = _below(visible, lso)
    assert target_rows(engine, strict) == {k: v for k, v in oracle_rows(before_open).items() if k not in lacking}
    assert dead_letter_count(engine, strict) == oracle.invalid_count(before_open) + len(lacking)
    assert ledger(engine, strict) == lso
    assert_tiled(engine, strict, lso)

    # 2. One open transaction commits, the other aborts; the incremental starts at the ledger and
    #    reads the committed one and the orders after both, up to the log end past both markers.
    later_committed.producer.commit_transaction(30)
    later_aborted.producer.abort_transaction(30)
    last = {p: max(o for q, o, *_ in _merge(visible, later_aborted.sent).messages if q == p) for p in (0, 1)}
    ends = {p: last[p] + 3 for p in (0, 1)}  # two markers per partition after its last record
    demo_data.wait_for_markers(kafka, topic, ends)
    incremental = plan_stage_commit(engine, kafka, strict, RunRequest.incremental(), f"{unique_name}-incremental")
    assert {r.partition: (r.start, r.end) for r in incremental.ranges} == {p: (lso[p], ends[p]) for p in (0, 1)}
    everything = _merge(visible, later_committed.sent)
    assert target_rows(engine, strict) == {k: v for k, v in oracle_rows(everything).items() if k not in lacking}
    assert ledger(engine, strict) == ends
    assert_tiled(engine, strict, ends)

    # 3. The reconciliation window over the whole log finds every committed record and no gap.
    verdicts = reconcile_over_connect(engine, strict, BASE, BASE + timedelta(days=1), f"{unique_name}-check")
    assert all(v.ok for v in verdicts), verdicts

    # 4. Redrive after the fix (currency optional): a range on p0 from n-0 to n-1 (or wider: a
    #    malformed message may lack currency too), across the aborted transaction; the two orders
    #    become rows, the aborted records stay unread.
    fixed = orders_spec(unique_name, topic, max_dead_letter_ratio=0.5)
    with engine.connect() as conn:
        redrive = plan_redrive(conn, fixed.name, kind=NO_CURRENCY, max_gap=100)
    n0, n1 = lacking_a.sent.messages[0][1], lacking_b.sent.messages[0][1]
    assert any(r.partition == 0 and r.start <= n0 and n1 < r.end for r in redrive.ranges), redrive.ranges
    assert any(n0 < o < n1 for p, o, *_ in ghost.sent.messages if p == 0)  # the range spans aborted records
    for i, conf in enumerate(redrive.confs):
        plan_stage_commit(
            engine, kafka, fixed, RunRequest.from_params(conf, RunKind.BACKFILL), f"{unique_name}-redrive-{i}"
        )
    assert target_rows(engine, fixed) == oracle_rows(everything)

    # 5. A rebuild from the log start gives the same table.
    rebuild, _ = start_run(engine, kafka, fixed, RunRequest.from_params({"mode": "rebuild"}), f"{unique_name}-rebuild")
    run_spark_stage(fixed, rebuild.run_id)
    commit_stored(engine, fixed, rebuild.run_id)
    assert target_rows(engine, fixed) == oracle_rows(everything)
    assert ledger(engine, fixed) == ends
