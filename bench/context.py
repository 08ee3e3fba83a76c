"""What every case shares: the bench database, a per-case pipeline spec, the result type."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psycopg2
import yaml
from psycopg2 import sql

from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import read_spec

log = logging.getLogger(__name__)

REPO: Final = Path(__file__).resolve().parent.parent
RESULTS: Final = REPO / "bench" / "results"
ORDERS_SPEC: Final = REPO / "pipelines" / "orders.yaml"
BENCH_DB: Final = "reprocess_bench"


@dataclass
class Result:
    """One measured case. ``phases`` split ``seconds``; ``detail`` holds counts and checks."""

    case: str
    records: int
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


@dataclass
class Bench:
    """The run's environment: bench DB URL (libpq), Kafka config, run tag and output folder."""

    db_url: str
    kafka: dict[str, Any]
    tag: str
    out: Path

    def connect(self) -> Any:
        return psycopg2.connect(self.db_url)

    def spec(
        self,
        label: str,
        topic: str,
        folder: Path | None = None,
        extra_columns: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> PipelineSpec:
        """A per-case copy of ``pipelines/orders.yaml``: own name, group and target schema, no
        schedule, tombstones delete their key (the bench data has them); written to ``folder``
        (default ``<out>/specs``) where a DAG file can find it. ``overrides`` replace spec fields
        (``format``, ``ordering``), ``extra_columns`` add columns."""
        raw = yaml.safe_load(ORDERS_SPEC.read_text())
        name = f"{self.tag}_{label}"
        raw.update({"name": name, "topics": [topic], "consumer_group": f"g-{name}", "target_table": f"{name}.orders",
                    "tombstones": "delete"})  # fmt: skip
        raw.update(overrides)
        raw["columns"].update(extra_columns or {})
        raw.pop("schedule", None)
        raw.pop("reconcile", None)
        path = (folder or self.out / "specs") / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        return read_spec(path)

    def create_target(self, spec: PipelineSpec) -> None:
        from reprocess.postgres.target import create_markers_sql, create_target_sql

        conn = self.connect()
        try:
            with conn, conn.cursor() as cur:
                cur.execute(create_target_sql(spec))
                cur.execute(create_markers_sql(spec))
        finally:
            conn.close()

    def fingerprint(self, spec: PipelineSpec) -> dict[str, int]:
        """Row count and a checksum of (key, partition, offset, status, amount): equal across
        cases ⇔ same final target."""
        from reprocess.postgres.target import target_identifier

        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    sql.SQL(
                        "SELECT count(*), coalesce(sum(hashtext(order_id || ':' || _kafka_partition || ':' "
                        "|| _kafka_offset || ':' || status || ':' || round(amount, 2))::bigint), 0) FROM {}"
                    ).format(target_identifier(spec))
                )
                rows, checksum = cur.fetchone()
        finally:
            conn.close()
        return {"rows": int(rows), "checksum": int(checksum)}


def bench_db_url(app_url: str, name: str = BENCH_DB) -> str:
    """Create database ``name`` (default ``reprocess_bench``) next to the app DB (same credentials),
    migrate it, return its URL."""
    from reprocess.postgres.db import libpq_url, make_engine, migrate

    base = libpq_url(app_url).rsplit("/", 1)[0]
    admin = psycopg2.connect(f"{base}/postgres")
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    finally:
        admin.close()
    url = f"{base}/{name}"
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    return url


def open_bench() -> Bench:
    """A sitting's ``Bench``: a tag named by the time, its results folder, the bench database and the
    Kafka client settings of the Airflow connection (what every ``python -m bench…`` entry point starts with)."""
    import os
    from datetime import UTC, datetime

    from reprocess.airflow.hooks import KafkaConfigHook

    tag = "bench_" + datetime.now(UTC).strftime("%Y%m%d_%H%M%S")
    out = RESULTS / tag
    out.mkdir(parents=True, exist_ok=True)
    return Bench(bench_db_url(os.environ["AIRFLOW_CONN_REPROCESS_DB"]), KafkaConfigHook().client_config(), tag, out)
