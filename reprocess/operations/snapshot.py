"""A run's snapshot: Kafka's offsets snapshotted, the request resolved into the run's ranges, both stored.

The snapshot is stored before anything is read, so every run can later be explained: what
the log looked like, what was asked, and which ``[start, end)`` it reads per partition (its
:class:`~reprocess.core.runs.RunRanges`; docs/concepts/runs.md names the words). The
broker is asked in :mod:`reprocess.kafka.offsets`; the request is resolved by the pure
:func:`reprocess.core.resolve.resolve`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Engine

from reprocess.core.errors import DataLossError, SpecError
from reprocess.core.ranges import PartitionSnapshot, TopicPartition, retention_risks
from reprocess.core.resolve import resolve
from reprocess.core.runs import RunMode, RunRanges, RunRequest, RunState, parse_timestamp
from reprocess.core.spec import PipelineSpec
from reprocess.kafka.offsets import offsets_for_time, take_snapshot
from reprocess.postgres import queries, store
from reprocess.postgres.ledger import ledger_positions
from reprocess.postgres.stage import drop_leftover_stages

log = logging.getLogger(__name__)


def snapshot_run(
    engine: Engine,
    kafka: Mapping[str, Any],
    spec: PipelineSpec,
    request: RunRequest,
    run_id: str,
    *,
    dag_id: str | None = None,
    dag_run_id: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> RunRanges:
    """Snapshot, resolve and store a run's ranges. A run that already staged or committed keeps its
    ranges, and so does one cut into batches: its batches' ranges are the cut of them. It writes no
    target: the run's stages do (its ``Migrate`` stage migrates the table).

    ``params`` (the trigger form's values) are stored verbatim beside the parsed request.
    """
    request.check_rebuild(spec.topics)
    try:
        version, warnings = store.ensure_pipeline(
            engine, spec, request.mode, acknowledged=request.acknowledge_partition_change, migrate=False
        )  # the run's Migrate stage migrates (a dry run or a preview: nothing)
    except SpecError as refused:  # recorded, so the run note says why, not only the task log
        store.record_failed_request(engine, spec, request.kind, run_id, params, str(refused),
                                    parsed=request.as_dict(), dag_id=dag_id, dag_run_id=dag_run_id,
                                    preview=request.preview)  # fmt: skip
        raise
    drop_leftover_stages(engine, spec)
    with engine.begin() as conn:
        existing = store.run_state(conn, run_id)
        if existing in store.KEPT_RANGES_STATES:
            log.info("plan run_id=%s pipeline=%s already %s: keeping its plan", run_id, spec.name, existing)
            return store.load_ranges(conn, run_id)
        if store.batch_runs(conn, run_id):  # a cleared DAG run of a cut run resumes it (issue 39 item 3)
            log.warning("plan run_id=%s pipeline=%s was cut into batches: keeping its plan and its batches (a "
                        "new plan would leave part of it unread); later records are the next run's",
                        run_id, spec.name)  # fmt: skip
            return store.load_ranges(conn, run_id)
    topics = request.topics or spec.topics
    snapshots = take_snapshot(kafka, spec, topics)
    time_offsets: dict[str, dict[TopicPartition, int]] = {}
    for name, mode, value in (
        ("start", request.start_mode, request.start_value),
        ("end", request.end_mode, request.end_value),
    ):
        if mode == "timestamp" and value:
            ts_ms = int(parse_timestamp(value, f"{name}_value").timestamp() * 1000)
            time_offsets[name] = offsets_for_time(kafka, snapshots, ts_ms)
    with engine.begin() as conn:
        ledger = ledger_positions(conn, spec.name)
        try:
            warnings += _check_partition_counts(conn, spec, request, snapshots)
            ranges, lost = resolve(spec, request, snapshots, ledger, time_offsets)
            warnings += retention_risks(ranges, snapshots)
            error = None
        except (SpecError, DataLossError) as exc:
            ranges, lost, error = [], [], exc
        stored = {"params": dict(params) if params is not None else None, "parsed": request.as_dict()}
        state = RunState.FAILED if error else (RunState.DRY_RUN if request.dry_run else RunState.PLANNED)
        kept = store.save_ranges(
            conn, spec, request.kind, stored, run_id, state=state, snapshots=snapshots, ranges=ranges, lost=lost,
            dag_id=dag_id, dag_run_id=dag_run_id, error=str(error) if error else None, spec_version=version,
        )  # fmt: skip
    if kept is not None:  # another attempt staged this run meanwhile: its plan stands
        return kept
    if error is not None:
        raise error
    for w in warnings:
        log.warning("plan run_id=%s pipeline=%s %s", run_id, spec.name, w)
    plan = RunRanges(
        run_id, spec.name, request.kind, tuple(ranges), tuple(lost), tuple(warnings),
        {r.tp: r.width for r in ranges},
    )  # fmt: skip
    for r in ranges:
        log.info("plan run_id=%s pipeline=%s topic=%s partition=%d offsets=[%d,%d) width=%d",
                 run_id, spec.name, r.topic, r.partition, r.start, r.end, r.width)  # fmt: skip
    return plan


def _check_partition_counts(
    conn: Connection, spec: PipelineSpec, request: RunRequest, snapshots: list[PartitionSnapshot]
) -> list[str]:
    """The ordering's rules for partition-count changes and re-created topics since the last
    committed run (see ordering.py); a rebuild re-reads a re-created topic from its log start."""
    last = {r.topic: r for r in conn.execute(queries.LAST_PARTITION_COUNTS, {"pipeline": spec.name})}
    now: dict[str, int] = {}
    for s in snapshots:
        now[s.topic] = now.get(s.topic, 0) + 1
    acknowledged = request.acknowledge_partition_change
    ids = {s.topic: s.topic_id for s in snapshots if s.topic_id}
    before = {t: r.topic_id for t, r in last.items() if r.topic_id}
    warnings = (
        []
        if request.mode is RunMode.REBUILD
        else spec.ordering.check_topic_ids(spec.name, before, ids, acknowledged=acknowledged)
    )
    counts = {t: r.partitions for t, r in last.items()}
    return warnings + spec.ordering.check_partition_counts(spec.name, counts, now, acknowledged=acknowledged)


__all__ = ["snapshot_run"]
