"""A pipeline's Airflow Assets and the one asset event a committed run emits on its table.

The table is an outlet in the Postgres provider's URI form, ``postgres://host:port/database/schema/table``
(normalised by its ``sanitize_uri``), each topic an inlet in the Kafka provider's
``kafka://host:port/topic`` (the first server of ``bootstrap.servers``; provider 2.1.0 registers the
scheme). Host, port and database come from the ``reprocess_db`` and ``kafka_default`` connections,
read once per parse of the DAG file: an Asset's URI is fixed when the DAG is parsed, and a URI typed
into the spec would drift from the database the runs really write. The read costs two connection
look-ups (environment, secrets backend or the DAG processor's API), no call to Postgres or Kafka.
Without either connection (a fresh install) the DAGs are built without Assets and the DAG processor
logs how to fix it; the next parse after the connection is added declares them.

Airflow emits an event for every Asset outlet of a task that succeeds, whatever the task did. So the
outlets hang on a task of their own, ``emit_asset_event``, after the commit (the reconcile task): it
runs only when that succeeded (a dry run, a run with no new data, a plan and a failed run skip or
fail it upstream), checks in Postgres that the run is committed, and skips otherwise: a skipped task
emits nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from airflow.sdk import Asset

from reprocess.airflow.faults import pipeline_task
from reprocess.airflow.hooks import AppDatabaseHook, KafkaConfigHook, connection
from reprocess.airflow.payloads import PlannedRun, PlannedWindow
from reprocess.core.errors import ConnectionConfigError
from reprocess.core.ranges import OffsetRange
from reprocess.core.spec import PipelineSpec

log = logging.getLogger(__name__)

EVENT_TASK: Final = "emit_asset_event"
COMMITTED: Final = "committed"


@dataclass(frozen=True, slots=True)
class Locations:
    """Where the pipelines' tables and topics live, as their Asset URIs name them."""

    database: str  # host:port/database
    bootstrap: str  # host:port of the first bootstrap server


@dataclass(frozen=True, slots=True)
class PipelineAssets:
    """A pipeline's target table (the outlet) and topics (the inlets)."""

    table: Asset
    topics: tuple[Asset, ...]

    @classmethod
    def of(cls, spec: PipelineSpec, where: Locations) -> PipelineAssets:
        return cls(
            table=Asset(f"postgres://{where.database}/{spec.target_schema}/{spec.target_table}"),
            topics=tuple(Asset(f"kafka://{where.bootstrap}/{topic}") for topic in spec.topics),
        )


def locate() -> Locations | None:
    """The connections' host, port and database, or None (logged with the fix) when one is missing."""
    try:
        db = connection(AppDatabaseHook.default_conn_name, AppDatabaseHook.ADD)
        servers = str(KafkaConfigHook().client_config()["bootstrap.servers"])
    except ConnectionConfigError as exc:
        log.warning("the pipelines' DAGs declare no Assets and emit no asset events until this is fixed: %s", exc)
        return None
    if not db.host or not db.schema:
        log.warning(
            "the pipelines' DAGs declare no Assets: connection `%s` names no host or no database (its schema "
            "field); set both",
            AppDatabaseHook.default_conn_name,
        )
        return None
    first = servers.split(",")[0].strip().rpartition("://")[2]  # a listener's protocol prefix is not the address
    return Locations(database=f"{db.host}:{db.port or 5432}/{db.schema}", bootstrap=first)


def offsets_by_partition(ranges: Iterable[OffsetRange]) -> dict[str, dict[str, dict[str, int]]]:
    """``{topic: {partition: {"start": s, "end": e}}}``, ``end`` exclusive (JSON keys are text).

    >>> offsets_by_partition([OffsetRange("orders", 1, 5, 9)])
    {'orders': {'1': {'start': 5, 'end': 9}}}
    """
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in sorted(ranges):
        out.setdefault(r.topic, {})[str(r.partition)] = {"start": r.start, "end": r.end}
    return out


def run_event_extra(engine: Any, spec: PipelineSpec, plan: PlannedRun, dag_run_id: str | None) -> dict[str, Any] | None:
    """The event's extra for a committed run, read from Postgres (None when the run did not commit)."""
    from reprocess.postgres import queries
    from reprocess.postgres.evolve import live_version

    with engine.connect() as conn:
        header = conn.execute(queries.RUN_HEADER, {"run_id": plan.run_id}).one_or_none()
        if header is None or header.state != COMMITTED:
            return None
        run = conn.execute(queries.RUN_COUNTS, {"run_id": plan.run_id}).one()
        ranges = [
            OffsetRange(r.topic, r.partition, r.start_offset, r.end_offset)
            for r in conn.execute(queries.RUN_RANGES, {"run_id": plan.run_id})
        ]
        version = live_version(conn, spec)
    return {
        "pipeline": spec.name,
        "run_id": plan.run_id,
        "dag_run_id": dag_run_id,
        "kind": header.kind,
        "mode": plan.mode.value,
        "offsets": offsets_by_partition(ranges),
        "records_read": run.records_read or 0,
        "rows_upserted": run.rows_upserted or 0,
        "rows_deleted": run.rows_deleted or 0,
        "dead_letters": run.dead_letters or 0,
        "spec_version": version,
    }


def reconcile_event_extra(
    spec: PipelineSpec, window: PlannedWindow, verdicts: list[str], spec_version: int | None, dag_run_id: str | None
) -> dict[str, Any]:
    """The event's extra for a reconciliation that found no gap (one with a gap fails and emits none)."""
    from reprocess.core.ranges import window_ranges

    return {
        "pipeline": spec.name,
        "run_id": window.check_id,
        "dag_run_id": dag_run_id,
        "kind": "reconcile",
        "offsets": offsets_by_partition(window_ranges(window.starting, window.ending)),
        "window": {"start": window.window_start.isoformat(), "end": window.window_end.isoformat()},
        "verdict": "healed" if window.healed_by else "ok",
        "healed_by": window.healed_by,
        "partitions": verdicts,
        "spec_version": spec_version,
    }


def _event_task_args(assets: PipelineAssets, doc_md: str) -> dict[str, Any]:
    """The event task's arguments: the table as its outlet, the topics as its inlets, no retries."""
    return {"task_id": EVENT_TASK, "outlets": [assets.table], "inlets": list(assets.topics), "retries": 0,
            "doc_md": doc_md}  # fmt: skip


def run_event_task(spec: PipelineSpec, assets: PipelineAssets) -> Any:
    """The task that emits a committed backfill's or incremental's event on the table."""

    @pipeline_task(**_event_task_args(
        assets, "One asset event on the target table with the committed run's offsets and counts; skipped "
        "(no event) for a run that did not commit."
    ))  # fmt: skip
    def emit_asset_event(planned: dict[str, Any], run_id: str | None = None, outlet_events: Any = None) -> Any:
        from airflow.sdk.exceptions import AirflowSkipException

        from reprocess.airflow.common import app_engine

        plan = PlannedRun.from_xcom(planned)
        extra = run_event_extra(app_engine(), spec, plan, run_id)
        if extra is None:
            raise AirflowSkipException(f"run {plan.run_id} did not commit: no asset event")
        outlet_events[assets.table].extra = extra
        log.info("asset event on %s: %s", assets.table.uri, extra)
        return extra

    return emit_asset_event


def reconcile_event_task(spec: PipelineSpec, assets: PipelineAssets) -> Any:
    """The task that emits a gap-free reconciliation's event on the table."""

    @pipeline_task(
        **_event_task_args(assets, "One asset event on the target table with the reconciled window and its verdict.")
    )
    def emit_asset_event(
        planned: dict[str, Any], verdicts: list[str], run_id: str | None = None, outlet_events: Any = None
    ) -> Any:
        from reprocess.airflow.common import app_engine
        from reprocess.postgres.evolve import live_version

        with app_engine().connect() as conn:
            version = live_version(conn, spec)
        extra = reconcile_event_extra(spec, PlannedWindow.from_xcom(planned), verdicts, version, run_id)
        outlet_events[assets.table].extra = extra
        log.info("asset event on %s: %s", assets.table.uri, extra)
        return extra

    return emit_asset_event
