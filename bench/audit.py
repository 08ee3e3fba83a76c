"""The whole-table audit (``reprocess audit``) over the target a product case loaded, set against the
reconciliation of the window of all its records (``bench/reconcile.py``): once finding nothing, once
with ten rows corrupted by SQL (issue 57 item 2: the first at most 1.5× the window check, the second at most
1.1× the first). The audit
compares checksums per key range and stages only the rows of the ranges that differ (its ``bisection``
detail says how many). The corrupted
rows are put back by SQL afterwards, untimed, to the values they had (their digests match again, so
the tamper check case after it still finds the table as the product wrote it)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Final

from psycopg2 import sql

from bench.context import Bench, Result
from bench.data import Dataset

CORRUPTED: Final = 10


def audit_table(bench: Bench, ds: Dataset, label: str, corrupt: int = 0) -> Result:
    """Audit the target of the product case ``label`` (Spark over the shared Connect server, then
    PostgreSQL); with ``corrupt``, that many rows get another ``status`` by SQL first and the audit
    must find exactly them. Nothing is recorded or healed (``keep=False``)."""
    from devstack import connect as server
    from reprocess.core import names
    from reprocess.postgres.db import make_engine
    from reprocess.postgres.target import target_identifier
    from reprocess.runner.audit import audit_here
    from reprocess.spark.connect import client_env, shared_session
    from reprocess.spark.job import WindowStager

    spec = bench.spec(label, ds.topic)  # the same spec file the product case wrote
    table, key = target_identifier(spec), sql.Identifier(spec.key[0])
    engine = make_engine(bench.db_url)
    conn = bench.connect()
    try:
        with conn, conn.cursor() as cur:  # a person's UPDATE: no digest kept, values saved to put back
            cur.execute(
                sql.SQL("WITH c AS (SELECT {k}, status FROM {t} ORDER BY {k} LIMIT {n}) UPDATE {t} AS t "
                        "SET status = 'corrupted' FROM c WHERE t.{k} = c.{k} RETURNING c.{k}, c.status")
                .format(k=key, t=table, n=sql.Literal(corrupt))
            )  # fmt: skip
            saved = cur.fetchall()
        started = time.monotonic()
        with client_env(), shared_session(server.url()) as spark:
            stager = WindowStager(spark, bench.db_url, bench.kafka)
            audit_id = names.audit_id(spec.name, datetime.now(UTC), uuid.uuid4().hex[:6])
            audited, report = audit_here(engine, bench.kafka, spec, stager, audit_id, keep=False)
        seconds = time.monotonic() - started
        with conn, conn.cursor() as cur:
            for k, status in saved:
                cur.execute(sql.SQL("UPDATE {t} SET status = %s WHERE {k} = %s").format(t=table, k=key), (status, k))
    finally:
        conn.close()
        engine.dispose()
    found = {kind: n for kind, n in report.counts.items() if n}
    if found != ({"differ": corrupt} if corrupt else {}):
        raise RuntimeError(f"{spec.name}: audit with {corrupt} rows corrupted found {report.counts}")
    return Result(
        f"audit of the target of {ds.records:,} records ({label}), {corrupt or 'no'} rows corrupted",
        ds.records,
        seconds,
        {"snapshot, target checksums, Spark: newest per key, checksums, differing ranges staged; compare": seconds},
        {"counts": report.counts, "ranges": len(audited.ranges), "bisection": report.bisection},
    )
