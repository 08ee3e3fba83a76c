"""Benchmarks: the product against its ceilings and a hand-written baseline, in ONE run.

Every case reads the same Kafka data (or, for the Postgres ceiling, the same parsed rows)
produced at the start of the run, and writes into its own, empty target table in the
database ``reprocess_bench``. Results print as records/s and as ratios (STYLE rule 17),
go to ``docs/benchmarks.md`` (``--write-docs``, on by default) and, raw, to
``bench/results/<tag>.json``.

Cases (each a function below with a docstring saying what it measures):

1. ``ceiling_a_pg_merge``: COPY of the N parsed rows into an UNLOGGED stage + the product's
   merge statement, one transaction, no Kafka, no Spark.
2. ``ceiling_b_kafka_raw``: confluent-kafka consumption of the same offset ranges, no parsing;
   ``reader_alone``: the product's ``read_range`` on the same ranges, without Spark.
3. ``baseline_python_loop``: one Python process, consume → json.loads → newest per key per
   10,000-record batch → ``execute_values`` upsert + offsets, one commit per batch.
4. ``product``: ``plan_run`` → ``spark-submit reprocess/apps/read_stage.py`` → ``commit_run``,
   timed per phase; ``--airflow`` also times the generated DAG under ``airflow dags test``.
5. ``--scale``: the product at N/10, N and 3N; the fixed overhead is a 1,000-record run.

Usage: ``make bench`` or ``python bench/run.py --records 100000 [--scale] [--airflow]``.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras
import yaml
from psycopg2 import sql

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
DOCS = REPO / "docs" / "benchmarks.md"
ORDERS_SPEC = REPO / "pipelines" / "orders.yaml"
BENCH_DB = "reprocess_bench"
PARTITIONS = 4
UPDATES_PER_KEY = 10
FETCH_BATCH = 10_000
STATUSES = ("created", "paid", "packed", "shipped", "delivered", "returned", "refunded", "closed")
T0 = datetime(2026, 11, 1, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)

log = logging.getLogger("bench")


# --------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Dataset:
    """One topic produced for this run; ``ends`` are the exact log ends per partition."""

    topic: str
    records: int
    orders: int
    ends: dict[int, int]
    produce_seconds: float


def _event(i: int, orders: int) -> tuple[int, str, dict[str, Any]]:
    """Record ``i``: order ``i % orders`` gets its ``i // orders``-th update (≈10 per key).

    Deterministic (no RNG state), so the parsed rows of ceiling A are rebuilt from ``i`` alone.
    Updates of one key are produced in order and stay on one partition (``n % 4``).
    """
    n, u = i % orders, i // orders
    oid = f"o-{n:08d}"
    h = (n * 2654435761) & 0xFFFFFFFF
    event = {
        "order_id": oid,
        "customer_id": f"c-{h % max(1, orders // 5):07d}",
        "status": STATUSES[min(u, len(STATUSES) - 1)],
        "amount": f"{(h % 99_900 + 100) / 100 + u:.2f}",
        "currency": "EUR",
        "items": h % 9 + 1,
        "updated_at": (T0 + timedelta(minutes=n % 100_000 + 30 * u)).isoformat().replace("+00:00", "Z"),
        "channel": "web" if h & 1 else "mobile",
        "note": f"bench update {u} of order {n}",
    }
    return n % PARTITIONS, oid, event


def _tail_event(part: int) -> tuple[str, dict[str, Any]]:
    key = f"tail-{part}"
    return key, {"order_id": key, "customer_id": "c-tail", "status": "created", "amount": "1.00",
                 "currency": "EUR", "items": 1, "updated_at": "2026-11-01T00:00:00Z"}  # fmt: skip


def produce_dataset(kafka: dict[str, Any], topic: str, records: int) -> Dataset:
    """Produce ``records`` order events (+1 single-record tail batch per partition) to a new topic.

    The tail record makes the local broker's log end exact (it reports the last batch's base
    offset + 1). Raises when the broker's log ends differ from the counts produced.
    """
    from confluent_kafka import TopicPartition

    from reprocess.demo_data import create_topic
    from reprocess.kafka import make_consumer, make_producer

    orders = max(1, records // UPDATES_PER_KEY)
    create_topic(kafka, topic, PARTITIONS)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    tuning = {"linger.ms": 50, "batch.num.messages": 10_000, "queue.buffering.max.messages": 500_000}
    producer = make_producer(kafka, **tuning)
    counts = [0] * PARTITIONS
    started = time.monotonic()

    def send(part: int, key: str, value: bytes, ts: int) -> None:
        while True:
            try:
                producer.produce(
                    topic, value=value, key=key.encode(), partition=part, timestamp=ts, on_delivery=on_delivery
                )
                break
            except BufferError:
                producer.poll(0.2)
        counts[part] += 1

    for i in range(records):
        part, key, event = _event(i, orders)
        send(part, key, json.dumps(event, separators=(",", ":")).encode(), T0_MS + i)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    for part in range(PARTITIONS):
        key, event = _tail_event(part)
        send(part, key, json.dumps(event).encode(), T0_MS + records + part)
        producer.flush(60)
    seconds = time.monotonic() - started
    if errors:
        raise RuntimeError(f"{len(errors)} messages failed delivery, first: {errors[0]}")
    consumer = make_consumer(kafka)
    try:
        ends = {}
        for part in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=10, cached=False)
            if (low, high) != (0, counts[part]):
                raise RuntimeError(f"{topic}[{part}]: broker says [{low}, {high}), produced {counts[part]} records")
            ends[part] = high
    finally:
        consumer.close()
    log.info("produced topic=%s records=%d seconds=%.1f (%.0f/s)", topic, records, seconds, records / seconds)
    return Dataset(topic, records, orders, ends, seconds)


def parsed_rows(ds: Dataset) -> Iterator[tuple[Any, ...]]:
    """The N parsed rows exactly as Kafka holds them: payload columns + (topic, partition, offset, ts ms)."""
    next_offset = [0] * PARTITIONS
    for i in range(ds.records):
        part, _key, ev = _event(i, ds.orders)
        off = next_offset[part]
        next_offset[part] += 1
        yield (ev["order_id"], ev["customer_id"], ev["status"], ev["amount"], ev["currency"], ev["items"],
               ev["updated_at"], ds.topic, part, off, T0_MS + i)  # fmt: skip
    for part in range(PARTITIONS):
        key, ev = _tail_event(part)
        yield (key, ev["customer_id"], ev["status"], ev["amount"], ev["currency"], ev["items"], ev["updated_at"],
               ds.topic, part, next_offset[part], T0_MS + ds.records + part)  # fmt: skip


# --------------------------------------------------------------------------- environment
@dataclass
class Bench:
    db_url: str
    kafka: dict[str, Any]
    tag: str
    out: Path
    spark_logs: list[Path] = field(default_factory=list)

    def connect(self) -> Any:
        return psycopg2.connect(self.db_url)

    def spec(self, label: str, topic: str) -> Any:
        """A per-case pipeline spec (own name, group and target schema) written under bench/results/."""
        from reprocess.spec import PipelineSpec

        raw = yaml.safe_load(ORDERS_SPEC.read_text())
        name = f"{self.tag}_{label}"
        raw.update({"name": name, "topics": [topic], "consumer_group": f"g-{name}", "target_table": f"{name}.orders"})
        raw.pop("schedule", None)
        raw.pop("reconcile", None)
        path = self.out / "specs" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        return PipelineSpec.from_file(path)


def bench_db_url(app_url: str) -> str:
    """Create ``reprocess_bench`` next to the app DB (same credentials) and migrate it."""
    from reprocess.db import libpq_url, make_engine, migrate

    base = libpq_url(app_url).rsplit("/", 1)[0]
    admin = psycopg2.connect(f"{base}/postgres")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (BENCH_DB,))
        if cur.fetchone() is None:
            cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(BENCH_DB)))
    admin.close()
    url = f"{base}/{BENCH_DB}"
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    return url


def create_target(bench: Bench, spec: Any) -> None:
    from reprocess.target import create_target_sql

    with bench.connect() as conn, conn.cursor() as cur:
        cur.execute(create_target_sql(spec))
    conn.close()


def target_fingerprint(bench: Bench, spec: Any) -> dict[str, Any]:
    """Row count and a checksum of (key, partition, offset): equal across cases ⇔ same result."""
    from reprocess.target import target_identifier

    with bench.connect() as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL(
                "SELECT count(*), coalesce(sum(hashtext(order_id || ':' || _kafka_partition || ':' || _kafka_offset"
                " || ':' || status || ':' || round(amount, 2))::bigint), 0) FROM {}"
            ).format(target_identifier(spec))
        )
        rows, checksum = cur.fetchone()
    conn.close()
    return {"rows": int(rows), "checksum": int(checksum)}


# --------------------------------------------------------------------------- cases
@dataclass
class Result:
    case: str
    records: int
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def ceiling_a_pg_merge(bench: Bench, ds: Dataset) -> Result:
    """Ceiling A: Postgres alone. COPY the N parsed rows (CSV, pre-built in memory) into an
    UNLOGGED stage shaped like the product's, then the product's merge statement
    (``INSERT … SELECT DISTINCT ON (key) … ORDER BY key, newest … ON CONFLICT DO UPDATE``)
    into an empty target, in one transaction. No Kafka, no Spark, no JSON parsing."""
    from reprocess.stage import create_stage, stage_identifier
    from reprocess.target import merge_sql

    spec = bench.spec("ceil_a", ds.topic)
    create_target(bench, spec)
    run_id = f"{spec.name}/ceiling"
    buf = io.StringIO()
    for r in parsed_rows(ds):
        ts = datetime.fromtimestamp(r[10] / 1000, UTC).isoformat()
        buf.write(f"row,{r[0]},{r[1]},{r[2]},{r[3]},{r[4]},{r[5]},{r[6]},{r[7]},{r[8]},{r[9]},{ts},1\n")
    payload = buf.getvalue().encode()
    cols = ["_kind", *(c.name for c in spec.columns), "_kafka_topic", "_kafka_partition", "_kafka_offset",
            "_kafka_timestamp", "_records"]  # fmt: skip
    conn = bench.connect()
    try:
        started = time.monotonic()
        with conn, conn.cursor() as cur:
            create_stage(conn, spec, run_id)
            stage = stage_identifier(spec, run_id)
            copy = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(
                stage, sql.SQL(", ").join(map(sql.Identifier, cols))
            )
            cur.copy_expert(copy.as_string(cur), io.BytesIO(payload), size=1 << 20)
            copied = time.monotonic()
            cur.execute(merge_sql(spec, stage), {"run_id": run_id})
            upserted = cur.rowcount
            cur.execute(sql.SQL("DROP TABLE {}").format(stage))
        done = time.monotonic()
    finally:
        conn.close()
    return Result(
        "ceiling A: COPY + merge (Postgres only)",
        ds.records,
        done - started,
        {"copy": copied - started, "merge+commit": done - copied},
        {"rows_upserted": upserted, "csv_mb": round(len(payload) / 1e6, 1), **target_fingerprint(bench, spec)},
    )


def ceiling_b_kafka_raw(bench: Bench, ds: Dataset) -> Result:
    """Ceiling B: Kafka alone. One confluent-kafka consumer (the product's read_committed
    settings), ``assign`` of all partitions' ``[0, end)`` and ``consume(num_messages=10000)``
    until every partition reached its end. Values are touched (``len``), never parsed."""
    from confluent_kafka import KafkaError, TopicPartition

    from reprocess.kafka import make_consumer

    consumer = make_consumer(bench.kafka)
    pos = dict.fromkeys(ds.ends, 0)
    records = nbytes = 0
    started = time.monotonic()
    try:
        consumer.assign([TopicPartition(ds.topic, p, 0) for p in ds.ends])
        while any(pos[p] < ds.ends[p] for p in pos):
            for msg in consumer.consume(num_messages=FETCH_BATCH, timeout=1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(err.str())
                p, off = msg.partition(), msg.offset()
                if off < ds.ends[p]:
                    records += 1
                    nbytes += len(msg.value())
                    pos[p] = off + 1
    finally:
        consumer.close()
    seconds = time.monotonic() - started
    return Result("ceiling B: raw Kafka consume", records, seconds, detail={"value_mb": round(nbytes / 1e6, 1)})


def reader_alone(bench: Bench, ds: Dataset) -> Result:
    """The product's Kafka reader without Spark: ``reprocess.reader.read_range`` (the body of the
    ``kafka-range`` data source's tasks: consume, per-record Python lists, Arrow batches) over
    the same ranges, one partition after the other in this process. Compare with ceiling B
    (same consumer, no per-record work) and with the product's Spark read stage."""
    from reprocess.ranges import OffsetRange
    from reprocess.reader import read_range

    records = 0
    started = time.monotonic()
    for p, end in ds.ends.items():
        for batch in read_range(bench.kafka, OffsetRange(ds.topic, p, 0, end)):
            records += batch.num_rows
    seconds = time.monotonic() - started
    return Result("product's reader alone (read_range → Arrow, no Spark)", records, seconds)


def baseline_python_loop(bench: Bench, ds: Dataset) -> Result:
    """Baseline: the hand-written loop in one Python process. consume(10000) → json.loads +
    required-field check → newest record per key within the batch → ``execute_values``
    upsert (same ``WHERE`` newer-than-existing rule as the product) + the offsets upserted
    into a ledger table in the same transaction, committed once per batch."""
    from confluent_kafka import KafkaError, TopicPartition

    from reprocess.kafka import make_consumer
    from reprocess.target import target_identifier

    spec = bench.spec("baseline", ds.topic)
    create_target(bench, spec)
    ledger = sql.SQL("{}.{}").format(sql.Identifier(spec.target_schema), sql.Identifier("ledger"))
    target = target_identifier(spec)
    payload = [c.name for c in spec.columns]
    cols = [*payload, "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_run_id"]
    lineage = ("_kafka_topic", "_kafka_partition", "_kafka_offset")
    upsert = sql.SQL(
        "INSERT INTO {t} AS t ({cols}) VALUES %s ON CONFLICT (order_id) DO UPDATE SET {sets} WHERE ({old}) < ({new})"
    ).format(
        t=target,
        cols=sql.SQL(", ").join(map(sql.Identifier, cols)),
        sets=sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in cols[1:]),
        old=sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(c)) for c in lineage),
        new=sql.SQL(", ").join(sql.SQL("EXCLUDED.{}").format(sql.Identifier(c)) for c in lineage),
    )
    template = "(" + ", ".join(["%s"] * (len(payload) + 3)) + ", to_timestamp(%s::float8 / 1000), %s)"
    advance = sql.SQL(
        "INSERT INTO {} (topic, partition, next_offset) VALUES %s "
        "ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset"
    ).format(ledger)
    conn = bench.connect()
    with conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (topic text, partition int, next_offset bigint, "
                    "PRIMARY KEY (topic, partition))").format(ledger)
        )  # fmt: skip
    consumer = make_consumer(bench.kafka)
    pos = dict.fromkeys(ds.ends, 0)
    records = dead = upserted = batches = 0
    required = [c.name for c in spec.columns if c.required]
    started = time.monotonic()
    try:
        consumer.assign([TopicPartition(ds.topic, p, 0) for p in ds.ends])
        with conn.cursor() as cur:
            upsert_s, advance_s = upsert.as_string(cur), advance.as_string(cur)
            while any(pos[p] < ds.ends[p] for p in pos):
                newest: dict[str, tuple[Any, ...]] = {}
                for msg in consumer.consume(num_messages=FETCH_BATCH, timeout=1.0):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise RuntimeError(err.str())
                    p, off = msg.partition(), msg.offset()
                    if off >= ds.ends[p]:
                        continue
                    records += 1
                    pos[p] = off + 1
                    try:
                        ev = json.loads(msg.value())
                        if not isinstance(ev, dict) or any(ev.get(k) in (None, "") for k in required):
                            raise ValueError("missing required field")
                    except ValueError:
                        dead += 1
                        continue
                    newest[ev["order_id"]] = (
                        *(ev.get(c) for c in payload), ds.topic, p, off, msg.timestamp()[1], spec.name
                    )  # fmt: skip
                if newest:
                    rows = list(newest.values())
                    psycopg2.extras.execute_values(cur, upsert_s, rows, template, page_size=FETCH_BATCH)
                    upserted += cur.rowcount
                psycopg2.extras.execute_values(cur, advance_s, [(ds.topic, p, o) for p, o in pos.items()])
                conn.commit()
                batches += 1
    finally:
        consumer.close()
        conn.close()
    seconds = time.monotonic() - started
    return Result(
        "baseline: Python loop (consume → json → execute_values)",
        records,
        seconds,
        detail={"batches": batches, "dead": dead, "rows_upserted": upserted,
                **target_fingerprint(bench, spec)},
    )  # fmt: skip


_STAGE_LOG = re.compile(r"stage run_id=\S+ pipeline=\S+ ranges=\d+ seconds=([0-9.]+)")
_READ_LOG = re.compile(r"read topic=\S+ partition=(\d+) offsets=\[(\d+),(\d+)\) records=(\d+)")


def product(bench: Bench, ds: Dataset, label: str = "product") -> Result:
    """The product, the way the DAG runs it, timed per phase: ``plan_run`` (snapshot + ranges
    + ledger rows), ``spark-submit reprocess/apps/read_stage.py`` (JVM + SparkSession start, the
    one Spark action reading Kafka via the ``kafka-range`` Python data source, parsing with
    Spark SQL, dedupe, COPY to the stage; the action alone is the job's own ``seconds=`` log)
    and ``commit_run`` (the merge transaction). Same spark conf as the DAG, master local[2]."""
    from reprocess.apps import READ_STAGE, app_path
    from reprocess.commit import commit_run
    from reprocess.db import libpq_url, make_engine
    from reprocess.plan import plan_run
    from reprocess.runs import EndMode, RunKind, RunRequest, StartMode
    from reprocess.sparkconf import spark_submit_command

    spec = bench.spec(label, ds.topic)
    engine = make_engine(bench.db_url)
    run_id = f"{spec.name}/bench"
    t0 = time.monotonic()
    plan = plan_run(engine, bench.kafka, spec, RunRequest(RunKind.BACKFILL, StartMode.EARLIEST, EndMode.LATEST), run_id)
    t1 = time.monotonic()
    planned = {r.partition: (r.start, r.end) for r in plan.ranges}
    if planned != {p: (0, e) for p, e in ds.ends.items()}:
        raise RuntimeError(f"{spec.name}: planned {planned}, expected [0, end) for {ds.ends}")
    log_path = bench.out / f"{spec.name}.spark.log"
    env = {**os.environ, "REPROCESS_DB_URL": libpq_url(bench.db_url), "REPROCESS_KAFKA_CONFIG": json.dumps(bench.kafka)}
    cmd = spark_submit_command(
        app_path(READ_STAGE), "--spec", str(spec.source_file), "--run-id", run_id, "--batch-size", str(spec.batch_size)
    )
    with log_path.open("w") as fh:
        proc = subprocess.run(cmd, env=env, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, check=False)
    t2 = time.monotonic()
    if proc.returncode != 0:
        raise RuntimeError(f"spark-submit failed ({proc.returncode}); see {log_path}")
    text = log_path.read_text()
    m = _STAGE_LOG.search(text)
    action = float(m.group(1)) if m else float("nan")
    reads = {int(g[0]): int(g[3]) for g in _READ_LOG.findall(text)}
    result = commit_run(engine, spec, run_id)
    t3 = time.monotonic()
    engine.dispose()
    return Result(
        f"product: plan → Spark → commit ({label})",
        ds.records,
        t3 - t0,
        {"plan": t1 - t0, "spark job total": t2 - t1, "  of which stage action": action,
         "  of which JVM/session/other": (t2 - t1) - action, "commit": t3 - t2},
        {"records_read": result.records_read, "rows_staged": result.rows_staged,
         "rows_upserted": result.rows_upserted, "dead_letters": result.dead_letters, "reads_per_partition": reads,
         "spark_log": str(log_path.relative_to(REPO)), **target_fingerprint(bench, spec)},
    )  # fmt: skip


_DAG_TEST_TASK = re.compile(r"^(\S+) .*\[DAG TEST\] (starting|end task) task_id=(\w+)", re.M)


def task_seconds(log_text: str) -> dict[str, float]:
    """Per-task wall seconds from ``airflow dags test`` output (its [DAG TEST] start/end lines)."""
    started: dict[str, datetime] = {}
    out: dict[str, float] = {}
    for stamp, what, task_id in _DAG_TEST_TASK.findall(log_text):
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        if what == "starting":
            started[task_id] = at
        elif task_id in started:
            out[task_id] = (at - started[task_id]).total_seconds()
    return out


def product_airflow(bench: Bench, ds: Dataset, label: str = "airflow") -> Result:
    """The product through Airflow: ``airflow dags test reprocess_<name>_backfill`` (all tasks
    in one process, SparkSubmitOperator for the Spark job), with REPROCESS_PIPELINES_DIR
    holding only this case's spec and AIRFLOW_CONN_REPROCESS_DB pointing at reprocess_bench.
    Phases: each task's wall time from the log; the rest is the CLI (imports, DAG parsing)."""
    spec = bench.spec(label, ds.topic)
    pipelines = bench.out / f"{label}_pipelines"
    pipelines.mkdir(exist_ok=True)
    (pipelines / Path(spec.source_file).name).write_text(Path(spec.source_file).read_text())
    env = {**os.environ, "REPROCESS_PIPELINES_DIR": str(pipelines), "AIRFLOW_CONN_REPROCESS_DB": bench.db_url}
    log_path = bench.out / f"{spec.name}.airflow.log"
    subprocess.run(["airflow", "pools", "set", "spark", "1", "Spark jobs"], env=env, check=True, capture_output=True)
    started = time.monotonic()
    with log_path.open("w") as fh:
        proc = subprocess.run(["airflow", "dags", "test", spec.dag_id("backfill")], env=env, cwd=REPO,
                              stdout=fh, stderr=subprocess.STDOUT, check=False)  # fmt: skip
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"airflow dags test failed ({proc.returncode}); see {log_path}")
    tasks = task_seconds(log_path.read_text())
    phases = {f"task {name}": s for name, s in tasks.items()}
    phases["airflow CLI start, DAG parse, between tasks"] = seconds - sum(tasks.values())
    return Result(f"product via `airflow dags test` ({label})", ds.records, seconds, phases,
                  detail={"log": str(log_path.relative_to(REPO)), **target_fingerprint(bench, spec)})  # fmt: skip


# --------------------------------------------------------------------------- output
def table(results: list[Result], ceiling_a: Result | None, baseline: Result | None) -> str:
    lines = [
        "| case | records | seconds | records/s | ÷ ceiling A | ÷ baseline | load 1m before→after |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        ra = f"{r.rate / ceiling_a.rate:.3f}" if ceiling_a else ""
        rb = f"{r.rate / baseline.rate:.2f}" if baseline else ""
        load = "→".join(f"{x:.1f}" for x in r.detail.get("loadavg_1m_before_after", []))
        lines.append(f"| {r.case} | {r.records:,} | {r.seconds:.1f} | {r.rate:,.0f} | {ra} | {rb} | {load} |")
    return "\n".join(lines)


def phases_table(results: list[Result]) -> str:
    lines = ["| case | phase | seconds | share |", "|---|---|---:|---:|"]
    for r in results:
        for name, s in r.phases.items():
            lines.append(f"| {r.case} | {name} | {s:.1f} | {s / r.seconds:.0%} |")
    return "\n".join(lines)


def write_docs(report: dict[str, Any], body: str) -> None:
    DOCS.write_text(
        "# Benchmarks\n\n"
        "Produced by `make bench` (`bench/run.py`; raw JSON in `bench/results/`, git-ignored). All cases run in\n"
        "one process on the same data: N JSON order events (~200 bytes, 4 partitions, N/10 order ids, so\n"
        "each key is updated 10 times), on the local services (embedded PostgreSQL, the tansu broker),\n"
        "each case into its own empty target table. Ratios are records/s of the row ÷ records/s of the\n"
        "reference (1.00 = as fast). Re-run to refresh; numbers below are one measured run.\n"
        "What each optimisation bought, and where a small run's time goes: `docs/performance.md`.\n\n"
        f"- date: {report['date']}\n- machine: {report['cores']} cores, {report['platform']}, Python "
        f"{report['python']}\n- command: `{report['command']}`\n- records (N): {report['records']:,}\n\n"
        f"{body}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="N, records per main case (default 1,000,000)")
    parser.add_argument("--scale", action="store_true", help="also run the product at N/10 and 3N")
    parser.add_argument("--airflow", action="store_true", help="also time the product via `airflow dags test`")
    parser.add_argument("--no-docs", dest="docs", action="store_false", help="do not rewrite docs/benchmarks.md")
    parser.add_argument("--keep-topics", action="store_true", help="keep the bench_ topics (default: delete)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if args.records < UPDATES_PER_KEY:
        parser.error("--records must be at least 10")

    from reprocess.kafka import config_from_env

    tag = "bench_" + datetime.now(UTC).strftime("%Y%m%d_%H%M%S")
    out = RESULTS / tag
    out.mkdir(parents=True, exist_ok=True)
    bench = Bench(bench_db_url(os.environ["AIRFLOW_CONN_REPROCESS_DB"]), config_from_env(), tag, out)
    n = args.records
    topics: list[str] = []

    def dataset(records: int) -> Dataset:
        ds = produce_dataset(bench.kafka, f"{tag}_{records}", records)
        topics.append(ds.topic)
        return ds

    def run(case: Callable[..., Result], *a: Any, **kw: Any) -> Result:
        log.info("case %s ...", case.__name__)
        load_before = os.getloadavg()[0]
        r = case(bench, *a, **kw)
        # Other work on the machine skews a case; the 1-minute load average before/after says so.
        r.detail["loadavg_1m_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        log.info("case %s: %.1f s, %.0f records/s %s", case.__name__, r.seconds, r.rate, r.phases)
        return r

    results: list[Result] = []
    failed: list[str] = []
    try:
        small = dataset(1_000)
        main_ds = dataset(n)
        ceil_a = run(ceiling_a_pg_merge, main_ds)
        ceil_b = run(ceiling_b_kafka_raw, main_ds)
        reader = run(reader_alone, main_ds)
        base = run(baseline_python_loop, main_ds)
        prod = run(product, main_ds)
        results += [ceil_a, ceil_b, reader, base, prod]
        fixed = run(product, small, label="fixed_1k")
        results.append(fixed)
        optional: list[tuple[Callable[[], Result], str]] = []
        if args.airflow:
            optional.append((lambda: run(product_airflow, main_ds), "airflow"))
            optional.append((lambda: run(product_airflow, small, label="airflow_1k"), "airflow_1k"))
        scaled: dict[str, Result] = {}
        if args.scale:
            for records, label in ((n // 10, "scale_n_10"), (3 * n, "scale_3n")):

                def scale_case(r: int = records, lb: str = label) -> Result:
                    scaled[lb] = run(product, dataset(r), label=lb)
                    return scaled[lb]

                optional.append((scale_case, label))
        for thunk, label in optional:
            try:
                results.append(thunk())
            except Exception:  # an optional case failing must not lose the measured ones
                log.exception("optional case %s failed", label)
                failed.append(label)
    finally:
        if not args.keep_topics and topics:
            from reprocess.kafka import make_admin

            admin = make_admin(bench.kafka)
            for fut in admin.delete_topics(topics, operation_timeout=30).values():
                try:
                    fut.result()
                except Exception as exc:  # cleanup must not hide the real error
                    log.warning("could not delete topic: %s", exc)

    checks = {
        "baseline target == ceiling A target": {k: base.detail[k] for k in ("rows", "checksum")}
        == {k: ceil_a.detail[k] for k in ("rows", "checksum")},
        "product target == ceiling A target": {k: prod.detail[k] for k in ("rows", "checksum")}
        == {k: ceil_a.detail[k] for k in ("rows", "checksum")},
        "product records_read == N + 4 tail records": prod.detail["records_read"] == n + PARTITIONS,
        **{f"optional case {label} ran": False for label in failed},
    }
    ratios = {
        "product ÷ ceiling A (records/s)": prod.rate / ceil_a.rate,
        "product ÷ ceiling B (records/s)": prod.rate / ceil_b.rate,
        "product ÷ baseline (records/s)": prod.rate / base.rate,
        "baseline ÷ ceiling A (records/s)": base.rate / ceil_a.rate,
        "fixed overhead: 1,000-record product run (s)": fixed.seconds,
        "product time minus fixed overhead, records/s": n / max(1e-9, prod.seconds - fixed.seconds),
    }
    airflow_1k = next((r for r in results if r.case.endswith("(airflow_1k)")), None)
    if airflow_1k is not None:
        ratios["fixed overhead: 1,000-record run through Airflow (s)"] = airflow_1k.seconds
    if "scale_n_10" in scaled:
        # 10x the records should cost at most 11x the time above the fixed overhead.
        ratios["time above fixed overhead, N ÷ N/10 (target ≤ 11)"] = (prod.seconds - fixed.seconds) / max(
            1e-9, scaled["scale_n_10"].seconds - fixed.seconds
        )
    if "scale_3n" in scaled:
        ratios["product at 3N ÷ ceiling A at N (records/s)"] = scaled["scale_3n"].rate / ceil_a.rate
    body = "\n\n".join(
        [
            f"## Throughput (N = {n:,})",
            table(results, ceil_a, base),
            "## Where the product's time goes",
            phases_table([r for r in results if r.phases]),
            "## Ratios",
            "\n".join(f"- {k}: **{v:,.2f}**" for k, v in ratios.items()),
            "## Correctness cross-checks (same final target in every case)",
            "\n".join(f"- {k}: {'yes' if v else 'NO'}" for k, v in checks.items()),
        ]
    )
    print(body)
    report = {
        "tag": tag,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "command": "python bench/run.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "records": n,
        "results": [{**asdict(r), "records_per_s": r.rate} for r in results],
        "ratios": ratios,
        "checks": checks,
    }
    (RESULTS / f"{tag}.json").write_text(json.dumps(report, indent=2, default=str))
    if args.docs:
        write_docs(report, body)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
