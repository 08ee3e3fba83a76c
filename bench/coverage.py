"""Coverage page at scale: seed a long-lived pipeline's bookkeeping, time every panel's query.

``python -m bench.coverage`` (from the repository root, services up) creates the database
``reprocess_bench_coverage``, seeds 100 partitions × 10,000 runs and prints each panel's time
(median of 5, warm) and the page's total. ``--url`` also times the page over HTTP.

The seed: bookkeeping rows of N hourly incremental runs over P partitions, made in SQL.

Each run i snapshots every partition (log end = (i + 1) * step, retention keeps the last
``retained_runs`` runs' offsets), plans and commits [i * step, (i + 1) * step). On top:
``gap_run`` was never committed on ``gap_partition`` (a gap), the last run is only planned
(a lag), a daily verdict per partition for the last ``days`` days (one gap cell), and dead
letters of three kinds. The committed-range trigger is off during the bulk insert and the
islands are rebuilt once, as a restore would do.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, text

from reprocess.core.names import pipeline_dag_id
from reprocess.operations import coverage
from reprocess.postgres.db import make_engine, migrate


@dataclass(frozen=True)
class Seeded:
    pipeline: str
    topic: str
    partitions: int
    runs: int
    step: int
    gap_run: int
    gap_partition: int
    dead_letters: int
    days: int


def seed(
    engine: Engine, pipeline: str, partitions: int = 100, runs: int = 10_000, step: int = 100,
    dead_letters: int = 3_000, days: int = 31, retained_runs: int = 2_000,
) -> Seeded:  # fmt: skip
    topic = f"{pipeline}_events"
    dag = pipeline_dag_id(pipeline, "incremental")
    s = Seeded(pipeline, topic, partitions, runs, step, runs // 2, 7 % partitions, dead_letters, days)
    p = {"pipeline": pipeline, "topic": topic, "dag": dag, "n": runs, "parts": partitions, "step": step,
         "gap_run": s.gap_run, "gap_part": s.gap_partition, "dead": dead_letters, "days": days,
         "retained": retained_runs * step}  # fmt: skip
    statements = [
        "INSERT INTO reprocess.pipelines (name, target_table, spec) VALUES (:pipeline, 'seeded.' || :pipeline, "
        f"CAST('{json.dumps({'topics': [topic]})}' AS jsonb))",
        # Runs 0..n-1 hourly up to an hour ago, committed in 20 s; run n is planned only (the lag).
        "INSERT INTO reprocess.runs (run_id, pipeline, kind, state, dag_id, dag_run_id, records_read, rows_staged, "
        "rows_upserted, dead_letters, created_at, planned_at, staged_at, committed_at) "
        "SELECT :dag || '/scheduled__' || i, :pipeline, 'incremental', "
        "CASE WHEN i = :n THEN 'planned' ELSE 'committed' END, :dag, 'scheduled__' || i, "
        ":parts * :step, :parts * :step, :parts * :step, 0, now() - make_interval(hours => :n - i), "
        "now() - make_interval(hours => :n - i), now() - make_interval(hours => :n - i) + interval '15 s', "
        "CASE WHEN i < :n THEN now() - make_interval(hours => :n - i) + interval '20 s' END "
        "FROM generate_series(0, :n) i",
        "INSERT INTO reprocess.offset_snapshots (run_id, topic, partition, log_start, log_end, group_committed, "
        "taken_at) SELECT :dag || '/scheduled__' || i, :topic, part, greatest(0, (i + 1) * :step - :retained), "
        "(i + 1) * :step, i * :step, now() - make_interval(hours => :n - i) "
        "FROM generate_series(0, :n) i, generate_series(0, :parts - 1) part",
        "INSERT INTO reprocess.run_ranges (run_id, topic, partition, start_offset, end_offset) "
        "SELECT :dag || '/scheduled__' || i, :topic, part, i * :step, (i + 1) * :step "
        "FROM generate_series(0, :n) i, generate_series(0, :parts - 1) part",
        "ALTER TABLE reprocess.committed_ranges DISABLE TRIGGER committed_ranges_cover",
        "INSERT INTO reprocess.committed_ranges (pipeline, run_id, topic, partition, start_offset, end_offset, "
        "committed_at) SELECT :pipeline, :dag || '/scheduled__' || i, :topic, part, i * :step, (i + 1) * :step, "
        "now() - make_interval(hours => :n - i) FROM generate_series(0, :n - 1) i, generate_series(0, :parts - 1) "
        "part WHERE NOT (i = :gap_run AND part = :gap_part)",
        "ALTER TABLE reprocess.committed_ranges ENABLE TRIGGER committed_ranges_cover",
        "SELECT reprocess.rebuild_covered_ranges(:pipeline, :topic, part) FROM generate_series(0, :parts - 1) part",
        "INSERT INTO reprocess.consumer_offsets (pipeline, topic, partition, next_offset, run_id) "
        "SELECT :pipeline, :topic, part, :n * :step, :dag || '/scheduled__' || (:n - 1) "
        "FROM generate_series(0, :parts - 1) part",
        # Daily verdicts: the window of the gap run is a gap on its partition, the rest are ok.
        "INSERT INTO reprocess.reconciliations (pipeline, window_start, window_end, topic, partition, kafka_start, "
        "kafka_end, committed_end, verdict, detail, heal_conf) "
        "SELECT :pipeline, date_trunc('day', now()) - make_interval(days => d + 1), "
        "date_trunc('day', now()) - make_interval(days => d), :topic, part, greatest(0, (:n - 24 * (d + 2)) * :step), "
        "greatest(0, (:n - 24 * (d + 1)) * :step), greatest(0, (:n - 24 * (d + 1)) * :step), "
        "CASE WHEN part = :gap_part AND d = 1 THEN 'gap' ELSE 'ok' END, "
        "CASE WHEN part = :gap_part AND d = 1 THEN 'uncovered offsets [' || ((:n - 24 * 3) * :step) || ', ' || "
        "((:n - 24 * 3) * :step + :step) || ')' ELSE '2400 records, 0 dead letters, all accounted for' END, "
        "CASE WHEN part = :gap_part AND d = 1 THEN jsonb_build_object('start_mode', 'offsets', 'start_value', "
        "jsonb_build_object(:topic, jsonb_build_object(part::text, (:n - 24 * 3) * :step))::text, 'end_mode', "
        "'offsets', 'end_value', jsonb_build_object(:topic, jsonb_build_object(part::text, (:n - 24 * 3) * :step "
        "+ :step))::text) END "
        "FROM generate_series(0, :days - 1) d, generate_series(0, :parts - 1) part",
        'INSERT INTO reprocess.dead_letters (pipeline, topic, partition, "offset", run_id, key, value, error, '
        "kafka_timestamp, created_at) SELECT :pipeline, :topic, j % :parts, (j / :parts) * 7 + 3, "
        ":dag || '/scheduled__' || (((j / :parts) * 7 + 3) / :step), convert_to('k-' || j, 'UTF8'), "
        "CASE j % 3 WHEN 0 THEN convert_to('{not json ' || j, 'UTF8') WHEN 1 THEN '\\xfffe'::bytea "
        "ELSE convert_to('{\"order_id\": \"o' || j || '\"}', 'UTF8') END, "
        "CASE j % 3 WHEN 0 THEN 'malformed JSON or not a JSON object: {not json' "
        "WHEN 1 THEN 'value is not valid UTF-8' ELSE 'missing required field amount' END, "
        "now() - make_interval(mins => j), now() - make_interval(mins => j) FROM generate_series(0, :dead - 1) j",
    ]
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement), p)
        conn.execute(text("ANALYZE reprocess.runs, reprocess.offset_snapshots, reprocess.run_ranges, "
                          "reprocess.committed_ranges, reprocess.covered_ranges, reprocess.dead_letters"))  # fmt: skip
    return s


def panels(engine: Engine, pipeline: str) -> dict[str, Callable[[], Any]]:
    """The queries one page view runs (the runs panel also at its last page)."""

    def run(query: Callable[[Any], Any]) -> Callable[[], Any]:
        def timed() -> Any:
            with engine.connect() as conn:
                return query(conn)

        return timed

    return {
        "overview (all pipelines)": run(lambda c: coverage.overview(c, coverage.pipeline_names(c))),
        "partitions + facts (one pipeline)": run(lambda c: coverage.overview(c, [pipeline])),
        "runs, first page": run(lambda c: coverage.runs(c, pipeline)),
        "runs, last page": run(lambda c: coverage.runs(c, pipeline, offset=9_950)),
        "reconciliation calendar": run(lambda c: coverage.calendar(c, pipeline)),
        "dead letters, first page": run(lambda c: coverage.dead_letters(c, pipeline)),
        "dead letters, one kind": run(lambda c: coverage.dead_letters(c, pipeline, "value is not valid UTF-8")),
        "dead-letter kinds": run(lambda c: coverage.dead_letter_kinds(c, pipeline)),
    }


def measure(engine: Engine, pipeline: str, repeat: int = 5) -> dict[str, float]:
    """Median milliseconds per panel after one warm-up call."""
    out = {}
    for name, call in panels(engine, pipeline).items():
        call()
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            call()
            times.append((time.perf_counter() - started) * 1000)
        out[name] = statistics.median(times)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--database", default="reprocess_bench_coverage")
    args = parser.parse_args(argv)
    import psycopg2

    base = os.environ["AIRFLOW_CONN_REPROCESS_DB"].rsplit("/", 1)[0]
    admin = psycopg2.connect(base + "/postgres")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{args.database}"')
    admin.close()
    engine = make_engine(f"{base}/{args.database}")
    migrate(engine)
    started = time.perf_counter()
    seeded = seed(engine, "scale", partitions=args.partitions, runs=args.runs)
    print(f"seeded {seeded.partitions} partitions x {seeded.runs} runs in {time.perf_counter() - started:.1f} s")
    timings = measure(engine, seeded.pipeline)
    width = max(map(len, timings))
    for name, ms in timings.items():
        print(f"{name.ljust(width)}  {ms:8.1f} ms")
    page = ("partitions + facts (one pipeline)", "runs, first page", "reconciliation calendar",
            "dead letters, first page", "dead-letter kinds")  # fmt: skip
    print(f"{'one pipeline page, all panels'.ljust(width)}  {sum(timings[k] for k in page):8.1f} ms")
    engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
