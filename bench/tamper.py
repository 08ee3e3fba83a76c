"""The tamper check (``reprocess audit --stored``) over the target a product case loaded: one
PostgreSQL scan recomputing every row's digest and summing the stored ones (issue 57 item 3). Its
time is set against ceiling A's merge of the same records (``docs/benchmarks.md``, Ratios): the
check reads what that merge wrote, once."""

from __future__ import annotations

import time

from bench.context import Bench, Result
from bench.data import Dataset


def tamper_check(bench: Bench, ds: Dataset, label: str) -> Result:
    """Check the target the product case ``label`` committed from ``ds``; it must come out ok (the
    product wrote every row through its commit protocol, and nothing else touched the table)."""
    from reprocess.operations.tamper import check_stored
    from reprocess.postgres.db import make_engine

    spec = bench.spec(label, ds.topic)  # the same spec file the product case wrote
    engine = make_engine(bench.db_url)
    try:
        started = time.monotonic()
        check = check_stored(engine, spec)
        seconds = time.monotonic() - started
    finally:
        engine.dispose()
    if not check.ok:
        raise RuntimeError(f"{spec.name}: the stored check of an untouched target found {check.as_dict()}")
    return Result(
        f"tamper check of the target of {ds.records:,} records ({label}): one scan, {check.rows:,} rows",
        ds.records,
        seconds,
        {"Postgres: one scan": seconds},
        {"rows": check.rows, "recorded_rows": check.recorded_rows},
    )
