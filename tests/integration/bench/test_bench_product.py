"""bench's product and plan cases on a tiny dataset: a backfill through the runner (start_run →
read_job over Spark Connect → evaluate) loads every row right by bench's own oracle, and the
plan-then-apply case over the loaded target (a replay of the same range) agrees with its apply. The cases are the
ones ``make bench`` times, at 200 records, so a change of the runner's shape breaks this and not a
benchmark night."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest

from bench.context import RESULTS, Bench
from bench.data import produce_dataset
from bench.oracle import Table, count_wrong
from bench.plan import plan_then_apply
from bench.product import SparkConnect, product

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]
RECORDS = 200  # 20 keys: one deleted by a tombstone, one with a late older version


@pytest.fixture
def bench(db_url: str, kafka_config: dict[str, Any], engine: Any) -> Iterator[Bench]:  # engine: migrated
    from reprocess.postgres.db import libpq_url

    tag = f"bt_{uuid.uuid4().hex[:8]}"
    out = RESULTS / "tests" / tag  # under the repository: a case names its Spark log relative to it
    out.mkdir(parents=True)
    yield Bench(libpq_url(db_url), kafka_config, tag, out)
    shutil.rmtree(out, ignore_errors=True)


def test_bench_product_and_plan_cases_run_through_the_runner_and_load_every_row_right(bench: Bench) -> None:
    ds = produce_dataset(bench.kafka, bench.tag, RECORDS)
    loaded = product(bench, ds, SparkConnect(), label="tiny")
    conn = psycopg2.connect(bench.db_url)
    try:
        wrong = count_wrong(conn, ds, Table(f"{bench.tag}_tiny", "orders"))
    finally:
        conn.close()
    assert wrong["total"] == 0, wrong
    assert loaded.detail["records_read"] == RECORDS

    planned = plan_then_apply(bench, ds, "tiny")  # raises when the apply does not do what the plan said
    assert planned.detail["applied"] == 0  # the same records again change nothing
