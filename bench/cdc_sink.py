"""CDC throughput (issue 58 item 2): the product's ``debezium`` format and Debezium's own JDBC sink
on the same change-event topic.

One topic of N Debezium change events (:mod:`bench.cdc_events`: the JSON converter with schemas, a
large column ``body`` left out in a third of the updates) read by both:

- the product, over the warm Spark Connect server: a backfill of the whole topic into an empty
  target, the same range again (the replay) and the first half of each partition (the older
  slice), like the JSON case;
- ``io.debezium.connector.jdbc.JdbcSinkConnector`` on the Kafka Connect worker, as a CDC user runs
  it: the full envelope (no ``ExtractNewRecordState``), ``delete.enabled``, ``primary.key.mode=
  record_key``, upsert, tuned as :mod:`bench.jdbc_sink` says; load, replay, older slice the same
  way (:func:`bench.jdbc_sink.sink_replays`).

Each target is compared with the model source table (:func:`bench.cdc_events.model_states`,
through :func:`bench.oracle.count_wrong` with ``body`` as an extra column): the sink cannot
resolve the placeholder, so it writes it; those rows count under ``other_wrong``, and
``placeholder_written`` says how many of them hold it. ``python -m bench.cdc_sink --records N``
runs this case and ceiling A alone (no docs written).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
from typing import Any, Final

from psycopg2 import sql

from bench.cdc_events import PLACEHOLDER, envelope, model_states
from bench.context import Bench, Result, open_bench
from bench.data import UPDATES_PER_KEY, Dataset, produce_dataset
from bench.jdbc_sink import connect_json_key, sink_replays
from bench.oracle import State, Table, count_wrong
from bench.product import SparkConnect, product
from bench.slices import older_slice

log = logging.getLogger(__name__)

LABEL: Final = "debezium_cdc"
CASE: Final = "product on spark-connect, format debezium, a large column left out in a third of the updates"
SINK_CASE: Final = "Debezium JDBC sink on the same change events (full envelope, upsert, deletes)"
COLUMNS: Final = {"body": {"type": "text"}}  # beside the orders spec's columns


def cdc_dataset(bench: Bench, records: int, **kw: Any) -> Dataset:
    """The change events of ``records`` bench records in a topic of their own (``kw``: e.g. ``limits``)."""
    encode = functools.partial(envelope, orders=max(1, records // UPDATES_PER_KEY))
    topic = f"{bench.tag}_cdc_{records}" + ("_older" if "limits" in kw else "")
    return produce_dataset(bench.kafka, topic, records, encode=encode, encode_key=connect_json_key, **kw)


def _wrong(conn: Any, ds: Dataset, table: Table, states: dict[str, State]) -> dict[str, int]:
    """The oracle's counts against the model table, and the rows holding the placeholder."""
    counts = count_wrong(conn, ds, table, states)
    with conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE {}::text = %s").format(
                sql.Identifier(table.schema, table.name), sql.Identifier("body")
            ),
            (PLACEHOLDER,),
        )
        counts["placeholder_written"] = int(cur.fetchone()[0])
    return counts


def cdc_product(bench: Bench, ds: Dataset, states: dict[str, State]) -> Result:
    """The product's load, replay and older-slice replay of the change events, each counted."""
    launcher, overrides = SparkConnect(), dict[str, Any](format="debezium", extra_columns=COLUMNS)
    table = Table(f"{bench.tag}_{LABEL}", "orders", extra=tuple(COLUMNS))
    conn = bench.connect()
    try:
        first = product(bench, ds, launcher, LABEL, **overrides)
        first.case = f"{CASE} ({LABEL})"
        first.detail["wrong_after_load"] = _wrong(conn, ds, table, states)
        first.detail["replay_seconds"] = product(bench, ds, launcher, LABEL, run_name="replay", **overrides).seconds
        first.detail["wrong_after_replay"] = _wrong(conn, ds, table, states)
        older = product(bench, ds, launcher, LABEL, run_name="older_slice", ends=older_slice(ds.ends), **overrides)
        first.detail["older_slice_seconds"] = older.seconds
        first.detail["wrong_after_older_slice"] = _wrong(conn, ds, table, states)
    finally:
        conn.close()
    return first


def cdc_sink(bench: Bench, ds: Dataset, states: dict[str, State]) -> Result:
    """Debezium's JDBC sink on ``ds``: load, replay, older slice (a topic of its own), each counted."""
    table = Table(f"{bench.tag}_{LABEL}_sink", "orders", extra=tuple(COLUMNS))

    def older() -> Dataset:
        return cdc_dataset(bench, ds.records, limits=older_slice(ds.ends))

    seconds, detail = sink_replays(bench, ds, table, f"{bench.tag}_{LABEL}_sink", False, older,
                                   lambda conn: _wrong(conn, ds, table, states))  # fmt: skip
    return Result(SINK_CASE, ds.records, seconds, detail=detail)


def cdc_cases(bench: Bench, records: int, run: Any = None) -> tuple[Result, Result]:
    """Both cases on one topic of ``records`` change events (deleted after); ``run(case, *args)``
    runs each (bench.cli's, which records the load), default: a plain call."""
    from reprocess.kafka.clients import make_admin

    call = run or (lambda case, *a: case(bench, *a))
    ds = cdc_dataset(bench, records)
    try:
        states = model_states(ds)
        return call(cdc_product, ds, states), call(cdc_sink, ds, states)
    finally:
        admin = make_admin(bench.kafka)  # kept: its futures fail once it is collected
        for fut in admin.delete_topics([ds.topic], operation_timeout=30).values():
            fut.result()


def ratios(prod: Result, sink: Result, ceil_a: Result) -> dict[str, float | str]:
    """The Ratios' lines of this case (bench.figures prints them)."""
    kinds = ("wrong_after_load", "wrong_after_replay", "wrong_after_older_slice")

    def counts(r: Result) -> str:
        return " / ".join(f"{r.detail[k]['total']:,} ({r.detail[k]['placeholder_written']:,})" for k in kinds)

    return {
        "debezium ÷ Debezium JDBC sink on the same change events (records/s, target ≥ 1.5)": prod.rate / sink.rate,
        "debezium ÷ ceiling A (records/s, target ≥ 0.35)": prod.rate / ceil_a.rate,
        "  rows wrong after the load / a replay / an older-slice replay (of which the placeholder written) — "
        "debezium": f"**{counts(prod)}**; Debezium JDBC sink: **{counts(sink)}**",
    }


def main(argv: list[str] | None = None) -> int:
    """This case and ceiling A alone, printed (``python -m bench.cdc_sink``)."""
    from bench.ceilings import ceiling_a_pg_merge

    parser = argparse.ArgumentParser(prog="python -m bench.cdc_sink", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="change events (default 1,000,000)")
    parser.add_argument("--no-sink", dest="sink", action="store_false", help="the product only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    bench = open_bench()
    ds = cdc_dataset(bench, args.records)
    results: list[Result] = []
    try:
        states = model_states(ds)
        for case in (cdc_product, cdc_sink) if args.sink else (cdc_product,):
            before = os.getloadavg()[0]
            r = case(bench, ds, states)
            r.detail["loadavg_1m_before_after"] = [round(before, 2), round(os.getloadavg()[0], 2)]
            results.append(r)
            print(f"{r.case}: {r.seconds:.1f} s, {r.rate:,.0f}/s {json.dumps(r.phases)} {json.dumps(r.detail)}")
    finally:
        from reprocess.kafka.clients import make_admin

        admin = make_admin(bench.kafka)  # kept: its futures fail once it is collected
        for fut in admin.delete_topics([ds.topic], operation_timeout=30).values():
            fut.result()
    if len(results) == 2:
        ceil_a = ceiling_a_pg_merge(bench, ds)  # the same records' plain rows, from bench.data: no topic read
        print(f"ceiling A: {ceil_a.seconds:.1f} s")
        for name, value in ratios(results[0], results[1], ceil_a).items():
            print(f"- {name}: {value if isinstance(value, str) else f'{value:.2f}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
