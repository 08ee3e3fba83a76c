"""The product's metrics, sent through Airflow's own metrics pipeline (``[metrics]``: StatsD,
Datadog or OpenTelemetry), so a team alerts on a pipeline's lag with the collector it already runs.

Names carry no variables; the pipeline, topic, partition, run kind and verdict are tags (Airflow 3's
convention: StatsD sends them with ``statsd_influxdb_enabled``, Datadog and OpenTelemetry always).
The builders are pure, so names and tags are tested without a collector; ``emit_*`` send them.
Every name is prefixed by Airflow's ``statsd_prefix`` / ``otel_prefix`` (``airflow.`` by default).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Literal

from sqlalchemy import Engine, text

from reprocess.core.errors import ReprocessError
from reprocess.core.spec import PipelineSpec
from reprocess.operations.lag import PartitionLag

log = logging.getLogger(__name__)

LAG: Final = "reprocess.lag.offsets"
OLDEST_UNREAD: Final = "reprocess.lag.oldest_unread_seconds"
UNSTABLE: Final = "reprocess.lag.unstable_offsets"  # HW − LSO: held back by an open transaction
RECORDS_READ: Final = "reprocess.run.records_read"
RECORDS_PER_SECOND: Final = "reprocess.run.records_per_second"
ROWS_UPSERTED: Final = "reprocess.run.rows_upserted"
ROWS_DELETED: Final = "reprocess.run.rows_deleted"
DEAD_LETTERS: Final = "reprocess.run.dead_letters"
RUN_DURATION: Final = "reprocess.run.duration"
VERDICTS: Final = "reprocess.reconcile.verdicts"

# What each of a run summary's counts is sent as (reprocess.operations.summary.run_summary).
_RUN_COUNTS: Final = {
    RECORDS_READ: "records_read",
    ROWS_UPSERTED: "rows_upserted",
    ROWS_DELETED: "rows_deleted",
    DEAD_LETTERS: "dead_letters",
}

# One row per partition of a check, as record_verdicts stored it; "healed" is ok after a gap.
_CHECK_VERDICTS: Final = text(
    "SELECT topic, partition, CASE WHEN healed_by_run IS NOT NULL THEN 'healed' ELSE verdict END AS verdict "
    "FROM reprocess.reconciliations WHERE pipeline = :pipeline AND check_id = :check_id ORDER BY topic, partition"
)


@dataclass(frozen=True, slots=True)
class Metric:
    kind: Literal["gauge", "incr", "timing"]
    name: str
    value: float
    tags: Mapping[str, str]


def run_metrics(summary: Mapping[str, Any], kind: str) -> list[Metric]:
    """A committed run's counts (counters), its records per second (gauge) and wall time (timer, ms).
    A dry run read nothing and sends none."""
    if summary.get("dry_run"):
        return []
    tags = {"pipeline": str(summary["pipeline"]), "kind": kind}
    seconds = float(summary.get("wall_seconds") or 0)
    records = int(summary.get("records_read") or 0)
    return [
        *(Metric("incr", name, int(summary.get(key) or 0), tags) for name, key in _RUN_COUNTS.items()),
        Metric("gauge", RECORDS_PER_SECOND, round(records / seconds, 1) if seconds > 0 else 0.0, tags),
        Metric("timing", RUN_DURATION, seconds * 1000, tags),
    ]


def lag_metrics(pipeline: str, lags: Iterable[PartitionLag]) -> list[Metric]:
    """Per partition: its lag in offsets, its oldest unread record's age and the offsets an open
    transaction holds above its last stable offset (gauges)."""
    out = []
    for p in lags:
        tags = {"pipeline": pipeline, "topic": p.topic, "partition": str(p.partition)}
        out += [
            Metric("gauge", LAG, p.lag, tags),
            Metric("gauge", OLDEST_UNREAD, round(p.oldest_unread_seconds, 1), tags),
            Metric("gauge", UNSTABLE, p.unstable, tags),
        ]
    return out


def verdict_metrics(pipeline: str, verdicts: Iterable[tuple[str, int, str]]) -> list[Metric]:
    """One count per checked partition, tagged with its verdict (ok, gap, healed or not_yet_stable: a
    tag is part of a StatsD name, which Airflow refuses with a space, dropping the metric).

    Examples
    --------
    >>> [m.tags["verdict"] for m in verdict_metrics("p", [("t", 0, "ok"), ("t", 1, "not yet stable")])]
    ['ok', 'not_yet_stable']
    """
    return [
        Metric(
            "incr", VERDICTS, 1, {"pipeline": pipeline, "topic": t, "partition": str(p), "verdict": v.replace(" ", "_")}
        )
        for t, p, v in verdicts
    ]


def emit(metrics: Sequence[Metric]) -> None:
    """Send through Airflow's ``Stats`` (a no-op unless ``[metrics]`` turns a backend on)."""
    from airflow.sdk.observability.stats import Stats

    for m in metrics:
        tags = dict(m.tags)
        if m.kind == "gauge":
            Stats.gauge(m.name, m.value, tags=tags)
        elif m.kind == "incr":
            Stats.incr(m.name, int(m.value), tags=tags)
        else:
            Stats.timing(m.name, timedelta(milliseconds=m.value), tags=tags)


def emit_run(summary: Mapping[str, Any], kind: str) -> None:
    emit(run_metrics(summary, kind))


def emit_lag(engine: Engine, kafka: Mapping[str, Any], spec: PipelineSpec, *, strict: bool = True) -> None:
    """Read the lag live and send it. Not ``strict`` (after a run), a broker that does not answer
    is a warning: the run stands, and the periodic lag task sends it on its next turn."""
    from confluent_kafka import KafkaException

    from reprocess.operations.lag import live_lag

    try:
        emit(lag_metrics(spec.name, live_lag(engine, kafka, spec)))
    except (ReprocessError, KafkaException) as exc:
        if strict:
            raise
        log.warning("pipeline=%s lag not sent (the lag DAG sends it next): %s", spec.name, exc)


def emit_verdicts(engine: Engine, spec: PipelineSpec, check_id: str) -> None:
    """The verdicts a check recorded (none when it failed before recording any)."""
    with engine.connect() as conn:
        rows = conn.execute(_CHECK_VERDICTS, {"pipeline": spec.name, "check_id": check_id}).all()
    emit(verdict_metrics(spec.name, ((r.topic, r.partition, r.verdict) for r in rows)))
