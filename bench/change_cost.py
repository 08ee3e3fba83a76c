"""Issue 58 item 1 (review V finding 10): a run's and a window's cost follow the change, not the table.

Two cases, each timed as A B A B A B in one sitting on the same services, the ratio of the medians
reported with the spread:

- :func:`incremental_cost`: an hourly incremental of ``records`` records (plan → Spark → commit →
  the ``report`` task's summary, which counted rows per spec version by a scan of the whole target)
  into a target that already holds ``rows`` rows ÷ the same into a near-empty one. Each round reads
  the next slice of the same topic, produced just before it, into both pipelines.
- :func:`reconcile_cost`: the day's reconciliation (snapshot of the window, Spark's stage of its
  newest records, the checks in PostgreSQL: :func:`bench.reconcile.reconcile_window`) of ``records``
  records on 1,000 partitions ÷ the same records on 10, each target holding ``rows`` rows besides
  (the spec-version check ran once per partition over the whole table).

The big targets are built cheaply and honestly: the window's records go through the product (a
backfill), and ``rows`` more rows are written by SQL ``generate_series`` (:func:`add_history`) with
the lineage of a topic the pipeline read before (``<topic>_before``, partitions and offsets
consistent with one record per row) and no spec version (rows from before spec versions were
recorded), so they count as rows of another version: the spec-version check has rows to look for,
and the report has rows to count. Exactness: :mod:`bench.oracle` (it imports nothing of the product)
counts what the incremental targets got wrong; the reconciliation must find every partition ok.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

from psycopg2 import sql

from bench.context import Bench, Result
from bench.data import PARTITIONS, T0_MS, Dataset, event, produce_dataset
from bench.oracle import Table, count_wrong
from bench.product import Launcher, run_product
from bench.reconcile import reconcile_window

log = logging.getLogger(__name__)

ROUNDS = 3  # A B A B A B
WIDE, NARROW = 1_000, 10  # the reconciliation's partition counts


def add_history(bench: Bench, spec: Any, rows: int, partitions: int) -> float:
    """Write ``rows`` rows into the spec's target by SQL (keys ``h-…``, which no record has), as if
    derived before spec versions from ``<topic>_before``; returns the seconds it took. ANALYZE after,
    as autovacuum would, so the planner knows the table's size."""
    from reprocess.postgres.target import target_identifier

    conn = bench.connect()
    try:
        started = time.monotonic()
        with conn, conn.cursor() as cur:
            cur.execute(
                sql.SQL(
                    "INSERT INTO {t} (order_id, customer_id, status, amount, currency, items, updated_at, "
                    "_kafka_topic, _kafka_partition, _kafka_offset, _kafka_timestamp, _run_id) "
                    "SELECT 'h-' || lpad(i::text, 9, '0'), 'c-' || (i %% 100000), 'delivered', "
                    "(i %% 99900 + 100) / 100.0, 'EUR', i %% 9 + 1, timestamptz '2026-01-01' + i * interval '1 s', "
                    "%(topic)s, i %% %(p)s, i / %(p)s, timestamptz '2026-01-01' + i * interval '1 s', 'bench-history' "
                    "FROM generate_series(0, %(rows)s - 1) AS i"
                ).format(t=target_identifier(spec)),
                {"topic": f"{spec.topics[0]}_before", "p": partitions, "rows": rows},
            )
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql.SQL("VACUUM ANALYZE {}").format(target_identifier(spec)))
        return time.monotonic() - started
    finally:
        conn.close()


def _produce_slice(bench: Bench, topic: str, start: int, records: int, orders: int) -> None:
    """Records ``[start, start + records)`` of :func:`bench.data.event` (the oracle's generator) onto
    ``topic``, appended: each round of the incremental case reads the next slice."""
    from reprocess.kafka.clients import make_producer

    producer = make_producer(bench.kafka, **{"linger.ms": 50, "batch.num.messages": 10_000})
    for i in range(start, start + records):
        part, key, body = event(i, orders)
        value = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        producer.produce(topic, value=value, key=key.encode(), partition=part, timestamp=T0_MS + i)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError(f"{topic}: records of [{start}, {start + records}) not delivered")


def _interleaved(rounds: int, a: Callable[[int], float], b: Callable[[int], float]) -> tuple[list[float], list[float]]:
    """A B A B ... (round i: ``a(i)`` then ``b(i)``, every other round B first so neither always
    runs on the other's warm caches); the seconds of each."""
    times_a: list[float] = []
    times_b: list[float] = []
    for i in range(rounds):
        first, second = ((a, times_a), (b, times_b)) if i % 2 == 0 else ((b, times_b), (a, times_a))
        for call, out in (first, second):
            out.append(call(i))
    return times_a, times_b


def spread(times: list[float]) -> str:
    return f"median {statistics.median(times):.2f} s (min {min(times):.2f}, max {max(times):.2f})"


def incremental_cost(bench: Bench, launcher: Launcher, rows: int, records: int = 10_000) -> tuple[Result, Result]:
    """The incremental case (module doc): (into the big target, into the near-empty one)."""
    from reprocess.core.names import local_run_id
    from reprocess.core.runs import RunRequest
    from reprocess.kafka.demo_data import create_topic
    from reprocess.operations.summary import run_summary
    from reprocess.postgres.db import make_engine

    orders = max(1, records // 10)
    topic = f"{bench.tag}_increments"
    create_topic(bench.kafka, topic, PARTITIONS)  # empty: each round appends its slice
    specs = {label: bench.spec(f"increment_{label}", topic) for label in ("big", "empty")}
    for spec in specs.values():
        bench.create_target(spec)
    setup = add_history(bench, specs["big"], rows, PARTITIONS)
    phases: dict[str, dict[str, list[float]]] = {label: {} for label in specs}

    def increment(label: str) -> Callable[[int], float]:
        def run(i: int) -> float:
            spec = specs[label]
            if label == ("empty" if i % 2 == 0 else "big"):  # the round's first run (_interleaved) produces its slice
                _produce_slice(bench, topic, i * records, records, orders)
            run_id = local_run_id(spec.name, f"increment_{i}")
            done = run_product(bench, spec, RunRequest.incremental(), run_id, launcher, bench.out / f"{spec.name}.log")
            engine = make_engine(bench.db_url)
            try:
                t0 = time.monotonic()
                run_summary(engine, spec.name, run_id, spec=spec)
                report = time.monotonic() - t0
            finally:
                engine.dispose()
            if done.result.records_read != records:
                raise RuntimeError(f"{spec.name}: read {done.result.records_read} records, expected {records}")
            for phase, seconds in (("plan", done.started), ("spark", done.spark), ("commit", done.committed),
                                   ("report", report)):  # fmt: skip
                phases[label].setdefault(phase, []).append(seconds)
            return done.started + done.spark + done.committed + report

        return run

    empty, big = _interleaved(ROUNDS, increment("empty"), increment("big"))
    ds = Dataset(topic, ROUNDS * records, orders, {}, 0.0)
    conn = bench.connect()
    try:
        wrong = {label: count_wrong(conn, ds, Table(spec.target_schema, spec.target_table))
                 for label, spec in specs.items()}  # fmt: skip
    finally:
        conn.close()

    def result(label: str, times: list[float], what: str) -> Result:
        return Result(
            f"incremental of {records:,} records (plan → Spark → commit → report) {what}",
            records,
            statistics.median(times),
            {phase: statistics.median(x) for phase, x in phases[label].items()},
            {"seconds_each": [round(t, 2) for t in times], "spread": spread(times), "wrong_after_load": wrong[label],
             "history_rows": rows if label == "big" else 0, "history_setup_seconds": round(setup, 1)},
        )  # fmt: skip

    return result("big", big, f"into a {rows:,}-row target"), result("empty", empty, "into a near-empty target")


def reconcile_cost(bench: Bench, launcher: Launcher, rows: int, records: int = 10_000) -> tuple[Result, Result]:
    """The reconciliation case (module doc): (1,000 partitions, 10 partitions)."""
    from bench.product import product

    loaded: dict[int, Dataset] = {}
    for partitions in (WIDE, NARROW):
        ds = produce_dataset(bench.kafka, f"{bench.tag}_window_p{partitions}", records, partitions=partitions)
        product(bench, ds, launcher, label=f"window_p{partitions}")
        add_history(bench, bench.spec(f"window_p{partitions}", ds.topic), rows, partitions)
        loaded[partitions] = ds
    timed: dict[int, list[Result]] = {WIDE: [], NARROW: []}

    def check(partitions: int) -> Callable[[int], float]:
        def run(_i: int) -> float:
            with_values, _lineage_only = reconcile_window(bench, loaded[partitions], f"window_p{partitions}")
            timed[partitions].append(with_values)
            return with_values.seconds

        return run

    wide, narrow = _interleaved(ROUNDS, check(WIDE), check(NARROW))

    def result(partitions: int, times: list[float]) -> Result:
        runs = timed[partitions]
        return Result(
            f"the day's reconciliation of {records:,} records on {partitions:,} partitions, the target holding "
            f"{rows:,} rows more",
            records,
            statistics.median(times),
            {phase: statistics.median(r.phases[phase] for r in runs) for phase in runs[0].phases},
            {"seconds_each": [round(t, 2) for t in times], "spread": spread(times),
             "partitions_ok": runs[-1].detail["partitions_ok"], "history_rows": rows},
        )  # fmt: skip

    return result(WIDE, wide), result(NARROW, narrow)
