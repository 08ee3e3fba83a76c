"""Debezium's left-out values at scale (issue 58 item 1, review V finding 11): what an incremental
whose updates leave a large column out costs once the pipeline's bookkeeping is big.

Two pipelines read one topic of Debezium change events (JSON envelopes, one partition): a snapshot
of ``keys`` rows with a 2 kB ``note``, then rounds of ``records`` events each: updates that leave
``note`` out (Debezium's placeholder of an unchanged TOASTed value) and one primary-key change in a
hundred (the old key's delete with ``__debezium.newkey``, its tombstone, the new key's create with
``__debezium.oldkey``, ``note`` left out). Each pipeline has a database of its own, created afresh;
in one (``seeded``), after the snapshot's backfill, SQL adds ``values`` incomplete values and
``values`` kept key changes of other keys to ``reprocess.incomplete_values`` and
``reprocess.moved_values``, shaped as the commit writes them (a key's jsonb; old and new keys as the
job's JSON text, a 100-byte moved value), then ANALYZE: what a pipeline holds after a first
backfill past retention and a long life of key changes, without spending that life in the bench.
Then each round runs the incremental into both, interleaved (none, seeded, none, seeded, ...), and
the figure is the ratio of the medians. Both targets are compared with the generator's own account
of the table (an oracle in this module that imports nothing of the product) after every round.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Iterator
from typing import Any, Final

import psycopg2
import yaml
from psycopg2 import sql

from bench.cdc_events import PLACEHOLDER
from bench.context import Bench, Result, bench_db_url
from bench.product import SparkConnect, run_product

REKEY_EVERY: Final = 100  # one event in a hundred of a round is a primary-key change
LEFT_OUT_RECORDS: Final = 10_000  # events per incremental
ROUNDS: Final = 3  # interleaved pairs (none, seeded)
NOTE_BYTES: Final = 2_000
RATIO: Final = "with 10^6 incomplete and moved values ÷ with none"
Event = tuple[str, dict[str, Any] | None, tuple[tuple[str, bytes], ...]]


def _key(k: str) -> bytes:
    return json.dumps({"id": k}, separators=(",", ":")).encode()


def _envelope(op: str, row: dict[str, Any] | None, before: dict[str, Any] | None, ts: int) -> dict[str, Any]:
    return {"before": before, "after": row, "op": op, "source": {"ts_ms": ts, "lsn": ts * 8}, "ts_ms": ts}


@dataclasses.dataclass
class Table:
    """The source table the events describe (the oracle): key → (status, note)."""

    rows: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    ts: int = 1_700_000_000_000

    def snapshot(self, keys: int) -> Iterator[Event]:
        for n in range(keys):
            k, self.ts = f"k{n}", self.ts + 1
            self.rows[k] = ("s0", f"{k} " + "n" * NOTE_BYTES)
            yield k, _envelope("c", {"id": k, "status": "s0", "note": self.rows[k][1]}, None, self.ts), ()

    def round(self, r: int, records: int) -> Iterator[Event]:
        """``records`` events: updates leaving ``note`` out, and key changes (three events each)."""
        keys, i, n = list(self.rows), 0, 0
        while n < records:
            at = i % len(keys)
            k, self.ts, i = keys[at], self.ts + 1, i + 1
            if i % REKEY_EVERY == 0 and records - n >= 3:
                new = keys[at] = f"{k.split('~')[0]}~{r}.{i}"
                self.rows[new] = self.rows.pop(k)
                yield (
                    k,
                    _envelope("d", None, {"id": k, "status": None, "note": None}, self.ts),
                    (("__debezium.newkey", _key(new)),),
                )
                yield k, None, ()
                row = {"id": new, "status": self.rows[new][0], "note": PLACEHOLDER}
                yield new, _envelope("c", row, None, self.ts), (("__debezium.oldkey", _key(k)),)
                n += 3
            else:
                self.rows[k] = (f"s{r}.{i}", self.rows[k][1])
                yield k, _envelope("u", {"id": k, "status": self.rows[k][0], "note": PLACEHOLDER}, None, self.ts), ()
                n += 1

    def wrong(self, conn: Any, target: str) -> int:
        """Rows of ``target`` (schema.table) not equal to the source table's, plus keys missing."""
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, status, note FROM {target}")
            got = {k: (s, n) for k, s, n in cur.fetchall()}
        return sum(got.get(k) != v for k, v in self.rows.items()) + len(got.keys() - self.rows.keys())


def _produce(bench: Bench, topic: str, events: Iterator[Event]) -> int:
    from reprocess.kafka.clients import make_producer

    producer, count = make_producer(bench.kafka, **{"linger.ms": 50}), 0
    for k, value, headers in events:
        body = None if value is None else json.dumps(value, separators=(",", ":")).encode()
        producer.produce(topic, key=_key(k), value=body, partition=0, headers=list(headers))
        producer.poll(0)
        count += 1
    if producer.flush(60):
        raise RuntimeError(f"{topic}: events not delivered")
    return count


def _fresh_db(bench: Bench, name: str) -> str:
    """Drop and create the bench's database ``name``, migrated; its libpq URL."""
    base = bench.db_url.rsplit("/", 1)[0]
    admin = psycopg2.connect(f"{base}/postgres")
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    finally:
        admin.close()
    return bench_db_url(bench.db_url, name)


def _seed(db_url: str, pipeline: str, topic: str, values: int) -> None:
    """``values`` incomplete values and ``values`` kept key changes of other keys, as the commit writes them."""
    conn = psycopg2.connect(db_url)
    try:
        with conn, conn.cursor() as cur:
            params = {"p": pipeline, "t": topic, "n": values}
            cur.execute(
                'INSERT INTO reprocess.incomplete_values (pipeline, key, "column", topic, partition, "offset", '
                "run_id, reason) SELECT %(p)s, jsonb_build_object('id', 'seed' || i), 'note', %(t)s, 0, i, "
                "'seed', 'seeded by the bench' FROM generate_series(1, %(n)s) AS i",
                params,
            )
            cur.execute(  # the keys' digests where the schema has them (sql/028): as keep_moved_values writes them
                "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'reprocess' "
                "AND table_name = 'moved_values' AND column_name IN ('old_digest', 'new_digest')"
            )
            has_digests = cur.fetchone()[0] == 2
            digests = ", old_digest, new_digest" if has_digests else ""
            digested = ", md5(_o::text), md5(_n::text)" if has_digests else ""
            cur.execute(
                'INSERT INTO reprocess.moved_values (pipeline, old_key, new_key, moved_at, topic, partition, "offset", '
                f'"values", run_id{digests}) SELECT %(p)s, _o::text, _n::text, (1600000000000 + i)::text, %(t)s, 0, i, '
                f"jsonb_build_object('note', repeat('m', 100)), 'seed'{digested} "
                "FROM generate_series(1, %(n)s) AS i, jsonb_build_object('id', 'seed' || i) AS _o, "
                "jsonb_build_object('id', 'seed' || i || '~') AS _n",
                params,
            )
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("ANALYZE reprocess.incomplete_values")
            cur.execute("ANALYZE reprocess.moved_values")
    finally:
        conn.close()


def left_out_incremental(bench: Bench, records: int, values: int, keys: int | None = None) -> Result:
    """Rounds of a ``records``-event incremental into the two pipelines, interleaved; the seeded
    one's median seconds, the ratio and both sides' times in ``detail``."""
    from reprocess.core.runs import EndMode, RunKind, RunRequest, StartMode
    from reprocess.formats.specs import read_spec
    from reprocess.kafka.demo_data import create_topic

    topic = f"{bench.tag}_left_out"
    create_topic(bench.kafka, topic, 1)
    table = Table()
    _produce(bench, topic, table.snapshot(keys or records))
    sides: dict[str, tuple[Any, Bench]] = {}
    for side in ("none", "seeded"):
        db = _fresh_db(bench, f"reprocess_bench_left_out_{side}")
        name = f"{bench.tag}_left_out_{side}"
        raw = {"name": name, "topics": [topic], "consumer_group": f"g-{name}", "key": ["id"], "format": "debezium",
               "encoding": "json", "target_table": f"{name}.t", "tombstones": "delete",
               "columns": {"id": {"type": "text", "required": True}, "status": "text", "note": "text"}}  # fmt: skip
        path = bench.out / "specs" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        spec, there = read_spec(path), dataclasses.replace(bench, db_url=db)
        request = RunRequest(RunKind.BACKFILL, StartMode.EARLIEST, EndMode.LATEST)
        run_product(there, spec, request, f"{name}/snapshot", SparkConnect(), bench.out / f"{name}.spark.log")
        if side == "seeded":
            _seed(db, name, topic, values)
        sides[side] = (spec, there)
    times: dict[str, list[float]] = {"none": [], "seeded": []}
    commits: dict[str, list[float]] = {"none": [], "seeded": []}
    wrong: dict[str, int] = {"none": 0, "seeded": 0}
    incomplete = 0
    for r in range(1, ROUNDS + 1):
        produced = _produce(bench, topic, table.round(r, records))
        for side, (spec, there) in sides.items():
            log_path = bench.out / f"{spec.name}.spark.log"
            run = run_product(there, spec, RunRequest.incremental(), f"{spec.name}/round_{r}", SparkConnect(), log_path)
            if run.result.records_read != produced:
                raise RuntimeError(f"{spec.name}: read {run.result.records_read} records of {produced}")
            times[side].append(run.started + run.spark + run.committed)
            commits[side].append(run.committed)
            incomplete += run.result.values_incomplete
            conn = psycopg2.connect(there.db_url)
            try:
                wrong[side] += table.wrong(conn, f'"{spec.name}".t')
            finally:
                conn.close()
    median = {side: statistics.median(t) for side, t in times.items()}
    return Result(
        f"debezium incremental of {records:,} events leaving a 2 kB column out, into a pipeline with "
        f"{values:,} incomplete and {values:,} moved values (median of {ROUNDS}, interleaved with one with none)",
        records,
        median["seeded"],
        {"commit (median)": statistics.median(commits["seeded"])},
        {"seconds": times, "commit_seconds": commits, "median_none": median["none"], "values": values,
         "ratio": median["seeded"] / median["none"],
         "commit_ratio": statistics.median(commits["seeded"]) / statistics.median(commits["none"]),
         "wrong_after_load": {"total": sum(wrong.values()), **wrong}, "values_incomplete": incomplete},
    )  # fmt: skip
