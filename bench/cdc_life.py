"""The long life of a CDC table: how many rows a Debezium pipeline holds wrong, per key, against the
source table itself (issue 36: "52 of 2,205 rows wrong").

A seeded random life of the :data:`bench.cdc_source.LIFE_COLUMNS` table (composite key, a large
``text`` and a large ``jsonb`` value stored out of line, REPLICA IDENTITY DEFAULT by default) is
streamed by a real Debezium connector on the embedded Kafka Connect worker: inserts, updates that
leave the large values unchanged, updates that change them, deletes, primary-key changes, re-keys
onto deleted keys, re-inserts of deleted keys (the mix: :meth:`Life.step`), in transactions of 1
to 50 row changes; from the second round on, the worker is SIGKILLed as the round's events arrive
and restarted after some changes made while it is down (it re-sends the events whose offsets it had
not flushed: Debezium is at least once; ``--no-kill`` leaves this out). The product runs as the
DAGs run it, through the runner (start → the Spark task over Spark Connect → commit): a backfill after
the first round, an incremental after each later one.
Then, on the same topic, a whole-range replay of that pipeline (what it writes), and two fresh
pipelines loading the whole topic at once and in batches (``--batch-size``). After each, the
target is compared with the source table, read with psycopg2 (:mod:`bench.cdc_source`, which
imports nothing of the product), and the script prints ``N of M rows wrong``, per kind of cause:
how the row came under its key (snapshot, insert, re-insert, key change, re-key onto a deleted
key) × what is wrong (NULL in place of a value, another value, missing, extra).

Run it with the services up (``make services``; Kafka Connect is started if it is not running)::

    source scripts/env.sh && python scripts/cdc_life.py --seed 36

``--rows`` sets the rows of the first snapshot, ``--transactions`` the transactions per round,
``--rounds`` the runs, ``--identity FULL`` the replica identity. The connector is removed at the
end (its slot would keep WAL); the source table ``public.cdc_life_<seed>_<time>``, its topic and
the targets (database ``reprocess_bench``) stay for inspection. Exit code 0 whatever the count.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import yaml

from bench import cdc_source as cdc
from bench.context import REPO, Bench, bench_db_url
from reprocess.core.names import local_run_id

REGIONS = ("eu", "us", "ap")


@dataclass
class Life:
    """The life's own account of the table: which keys exist, which were deleted, and how each
    present row came under its key (the cause a wrong row is counted under)."""

    table: str
    rng: random.Random
    origin: dict[cdc.Key, str] = field(default_factory=dict)
    deleted: set[cdc.Key] = field(default_factory=set)
    next_id: int = 100_000
    version: int = 0
    ops: Counter[str] = field(default_factory=Counter)

    def fresh_key(self) -> cdc.Key:
        self.next_id += 1
        return (self.rng.choice(REGIONS), self.next_id)

    def row(self, key: cdc.Key) -> cdc.Row:
        self.version += 1
        return cdc.life_row(key[0], key[1], self.version, nulls=self.rng.random() < 0.03)

    def present(self) -> cdc.Key:
        return self.rng.choice(sorted(self.origin))

    def step(self) -> tuple[Any, ...] | None:
        """One row change as (statement, params), applied to the account; None when it cannot be made.
        The mix: 15 % inserts, 65 % updates leaving the large values unchanged, 10 % updates of the
        large text, 5 % deletes, 2 % primary-key changes to a new key, 1 % re-keys onto a deleted key,
        2 % re-inserts of a deleted key."""
        r = self.rng.random()
        if r < 0.15 or not self.origin:
            key = self.fresh_key()
            self.origin[key] = "insert"
            return self._did("insert", cdc.insert(self.table, self.row(key)))
        if r < 0.80:  # the large values left unchanged: Debezium's placeholder under REPLICA IDENTITY DEFAULT
            key, v = self.present(), self.row(("x", 0))
            values = {c: v[c] for c in self.rng.sample(["name", "amount", "seen_at", "flag"], 2)}
            return self._did("update, large values unchanged", cdc.update(self.table, key, values))
        if r < 0.90:
            key, v = self.present(), self.row(("x", 0))
            return self._did("update of the large values", cdc.update(self.table, key, {"body": v["body"]}))
        if r < 0.95:
            key = self.present()
            del self.origin[key]
            self.deleted.add(key)
            return self._did("delete", cdc.delete(self.table, key))
        if r < 0.97:  # a primary-key change to a new key, the large values unchanged
            old, new = self.present(), self.fresh_key()
            return self._rekey(old, new, "key change")
        if r < 0.98:
            if not self.deleted:
                return None
            old, new = self.present(), self.rng.choice(sorted(self.deleted))
            return self._rekey(old, new, "re-key onto a deleted key")
        if not self.deleted:
            return None
        key = self.rng.choice(sorted(self.deleted))
        self.deleted.discard(key)
        self.origin[key] = "re-insert"
        return self._did("re-insert", cdc.insert(self.table, self.row(key)))

    def _rekey(self, old: cdc.Key, new: cdc.Key, kind: str) -> tuple[Any, ...]:
        del self.origin[old]
        self.deleted.add(old)
        self.deleted.discard(new)
        self.origin[new] = kind
        return self._did(kind, cdc.rekey(self.table, old, new))

    def _did(self, kind: str, statement: tuple[Any, ...]) -> tuple[Any, ...]:
        self.ops[kind] += 1
        return statement

    def transaction(self) -> list[tuple[Any, ...]]:
        """1-5 row changes, or (one in twenty) a transaction of 20-50."""
        size = self.rng.randint(20, 50) if self.rng.random() < 0.05 else self.rng.randint(1, 5)
        out = [s for s in (self.step() for _ in range(size)) if s is not None]
        self.ops["transactions"] += 1
        return out


def _spec(bench: Bench, label: str, topic: str, **settings: Any) -> Any:
    from reprocess.formats.specs import read_spec

    name = f"{bench.tag}_{label}"
    columns = {c.name: dict(c.spec) for c in cdc.LIFE_COLUMNS}
    raw = {"name": name, "topics": [topic], "format": "debezium", "encoding": "json", "key": list(cdc.LIFE_KEY),
           "target_table": f"{name}.life", "columns": columns, **settings}  # fmt: skip
    path = bench.out / "specs" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    return read_spec(path)


def _run(bench: Bench, spec: Any, run_id: str, params: dict[str, Any] | None) -> Any:
    """One run as a DAG makes it, through the runner (:func:`bench.product.run_product`, Spark Connect)."""
    from bench.product import SparkConnect, run_product
    from reprocess.core.runs import RunKind, RunRequest

    request = RunRequest.incremental() if params is None else RunRequest.from_params(params, RunKind.BACKFILL)
    log_path = bench.out / f"{run_id.replace('/', '_')}.spark.log"
    return run_product(bench, spec, request, run_id, SparkConnect(), log_path).result


def _verdict(bench: Bench, life: Life, spec: Any, what: str, result: Any) -> int:
    """Print ``N of M rows wrong`` for ``spec``'s target now, per cause; the N."""
    import psycopg2

    expected = cdc.source_rows(life.table)
    conn = psycopg2.connect(bench.db_url)
    try:
        got = cdc.target_rows(conn, spec.target_schema, spec.target_table)
    finally:
        conn.close()
    diffs = cdc.differences(expected, got)
    wrong: dict[cdc.Key, set[str]] = {}
    for d in diffs:
        wrong.setdefault(d.key, set()).add(d.kind)
    causes = Counter(f"{life.origin.get(k, 'deleted in the source')}: {', '.join(sorted(kinds))}"
                     for k, kinds in wrong.items())  # fmt: skip
    print(
        f"\n{what}: {len(wrong)} of {len(expected)} rows wrong ({len(diffs)} wrong values); the run wrote "
        f"upserted={result.rows_upserted} deleted={result.rows_deleted}, dead letters {result.dead_letters}, "
        f"values recorded incomplete {result.values_incomplete}"
    )
    for cause, n in causes.most_common():
        print(f"  {n:5}  {cause}")
    by_origin = Counter(life.origin.values())
    print("  rows per origin: " + ", ".join(f"{k} {n}" for k, n in by_origin.most_common()))
    for d in diffs[:6]:
        print(f"  e.g. {d}")
    return len(wrong)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/cdc_life.py", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=36, help="the life's random seed (default 36)")
    parser.add_argument("--rows", type=int, default=1600, help="rows in the table at the snapshot (default 1600)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of the life, a run after each (default 4)")
    parser.add_argument("--transactions", type=int, default=180, help="transactions per round (default 180)")
    parser.add_argument("--batch-size", type=int, default=400, help="the batched backfill's batch_size (400)")
    parser.add_argument("--identity", choices=("DEFAULT", "FULL"), default="DEFAULT", help="the replica identity")
    parser.add_argument(
        "--no-kill", dest="kill", action="store_false",
        help="do not SIGKILL the Kafka Connect worker after the transactions of rounds 2 and on (it re-sends events)",
    )  # fmt: skip
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from devstack import debezium, kafka_connect
    from reprocess.airflow.hooks import KafkaConfigHook

    args = parse_args(argv)
    started = time.monotonic()
    tag = f"cdc_life_{args.seed}_{datetime.now(UTC):%H%M%S}"
    out = REPO / ".state" / "cdc_life" / tag
    out.mkdir(parents=True, exist_ok=True)
    bench = Bench(bench_db_url(os.environ["AIRFLOW_CONN_REPROCESS_DB"]), KafkaConfigHook().client_config(), tag, out)
    life = Life(tag, random.Random(args.seed))
    topic = f"{tag}.public.{tag}"

    kafka_connect.start()
    debezium.ensure_source()
    first = [(life.rng.choice(REGIONS), i) for i in range(1, args.rows + 1)]
    life.origin.update(dict.fromkeys(first, "snapshot"))
    cdc.source(*cdc.create_table(tag, identity=args.identity))
    for i in range(0, len(first), 200):
        cdc.source(cdc.insert(tag, *(life.row(k) for k in first[i : i + 200])))
    config = debezium.connector_config(tag, [f"public.{tag}"], tag, **{"decimal.handling.mode": "string"})
    debezium.start(tag, config)
    print(f"{tag}: {args.rows} rows snapshotted, seed {args.seed}, REPLICA IDENTITY {args.identity}")
    try:
        live = _spec(bench, "live", topic)
        end = 0
        for n in range(1, args.rounds + 1):
            for _ in range(args.transactions):
                cdc.source(*life.transaction())
            if args.kill and n > 1:  # the worker SIGKILLed as its events arrive: it sends them again
                burst = f"burst-end-{n}"
                cdc.source(cdc.insert(tag, {**cdc.life_row("zz", 100 + n), "name": burst}))
                life.origin[("zz", 100 + n)] = "insert"
                cdc.wait_for(bench.kafka, topic, burst.encode(), seconds=600)
                kafka_connect.kill()
                for _ in range(args.transactions // 10):  # changes while it is down
                    cdc.source(*life.transaction())
                kafka_connect.start()
                kafka_connect.put_connector(tag, config)
            marker = f"end-of-round-{n}"
            cdc.source(cdc.insert(tag, {**cdc.life_row("zz", n), "name": marker}))
            life.origin[("zz", n)] = "insert"
            end = cdc.wait_for(bench.kafka, topic, marker.encode(), seconds=600)
            result = _run(bench, live, local_run_id(live.name, str(n)), {} if n == 1 else None)
            _verdict(bench, life, live, f"round {n} ({'backfill' if n == 1 else 'incremental'}, log end {end})", result)
        print(f"\nthe life: {dict(life.ops)}; {cdc.resent(bench.kafka, topic)} events sent twice")
        whole = {"start_mode": "offsets", "start_value": json.dumps({topic: {"0": 0}}),
                 "end_mode": "offsets", "end_value": json.dumps({topic: {"0": end}})}  # fmt: skip
        result = _run(bench, live, f"{live.name}/replay", whole)
        _verdict(bench, life, live, f"the same pipeline, whole range [0, {end}) replayed", result)
        one = _spec(bench, "one", topic)
        _verdict(
            bench, life, one, "a fresh pipeline, one backfill of the whole topic", _run(bench, one, f"{one.name}/1", {})
        )
        batched = _spec(bench, "batched", topic, batch_size=args.batch_size)
        result = _run(bench, batched, f"{batched.name}/1", {})
        _verdict(bench, life, batched, f"a fresh pipeline, a backfill in batches of {args.batch_size}", result)
    finally:
        debezium.remove(tag)
    print(f"\n{tag}: {time.monotonic() - started:.0f} s; logs and specs in {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
