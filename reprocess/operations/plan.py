"""Snapshot Kafka's offsets, resolve a run request into ranges, and store both.

The snapshot is stored before anything is read, so every run can later be explained: what
the log looked like, what was asked, and which ``[start, end)`` was planned per partition.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final

from sqlalchemy import Connection, Engine

from reprocess.core.errors import DataLossError, OffsetLookupError, SpecError
from reprocess.core.ranges import OffsetRange, PartitionSnapshot, TopicPartition, parse_offsets_json, retention_risks
from reprocess.core.runs import EndMode, LostRange, RunMode, RunPlan, RunRequest, RunState, StartMode, parse_timestamp
from reprocess.core.spec import PipelineSpec
from reprocess.postgres import queries, store
from reprocess.postgres.stage import drop_leftover_stages

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- snapshot
def take_snapshot(kafka: Mapping[str, Any], spec: PipelineSpec, topics: Iterable[str]) -> list[PartitionSnapshot]:
    """Log start, log end (read_committed) and the group's committed offset per partition."""
    from confluent_kafka import IsolationLevel, KafkaException, TopicCollection
    from confluent_kafka import TopicPartition as KTP
    from confluent_kafka.admin import OffsetSpec

    from reprocess.kafka.clients import committed_offsets, make_admin

    admin = make_admin(kafka)
    partitions: list[KTP] = []
    for topic in topics:
        meta = admin.list_topics(topic, timeout=15).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            reason = meta.error.str() if meta is not None and meta.error is not None else "no partitions"
            raise OffsetLookupError(f"{spec.name}: topic {topic!r} is unknown to the broker ({reason})")
        partitions.extend(KTP(topic, p) for p in sorted(meta.partitions))

    def offsets(spec_factory: Any) -> dict[tuple[str, int], int]:
        futures = admin.list_offsets(
            {tp: spec_factory() for tp in partitions},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=30,
        )
        out = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result().offset
            except KafkaException as exc:
                raise OffsetLookupError(
                    f"{spec.name}: list_offsets failed for {tp.topic}[{tp.partition}]: {exc}"
                ) from exc
        return out

    starts, ends = offsets(OffsetSpec.earliest), offsets(OffsetSpec.latest)
    # A topic deleted and re-created under its name gets a new id: its offsets start over.
    described = admin.describe_topics(TopicCollection(list(dict.fromkeys(tp.topic for tp in partitions))))
    ids = {topic: str(fut.result().topic_id) for topic, fut in described.items()}
    committed: dict[tuple[str, int], int] = {}
    try:
        committed = committed_offsets(kafka, spec.consumer_group, [(tp.topic, tp.partition) for tp in partitions])
    except KafkaException as exc:
        log.warning("pipeline=%s group=%s committed offsets unavailable: %s", spec.name, spec.consumer_group, exc)
    return [
        PartitionSnapshot(tp.topic, tp.partition, starts[(tp.topic, tp.partition)], ends[(tp.topic, tp.partition)],
                          committed.get((tp.topic, tp.partition)), ids.get(tp.topic))
        for tp in partitions
    ]  # fmt: skip


PROBE_FETCH_WAIT_MS: Final = 10


def offsets_for_time(
    kafka: Mapping[str, Any], snapshots: list[PartitionSnapshot], ts_ms: int
) -> dict[TopicPartition, int]:
    """The first offset whose record timestamp is >= ``ts_ms``, per partition.

    The broker's answer (``offsets_for_times``) is checked against the records' own
    timestamps and replaced by a binary search over them when inconsistent. Apache Kafka
    itself answers wrong when records carry producer-set timestamps older than their
    transaction's commit: the commit marker holds the broker's clock, so its offset (no
    record) is the answer for every earlier time (tests/integration/test_plan_by_time.py);
    Kafka-compatible brokers without a time index answer 0 for every time. A partition with
    no record at or after the time resolves to its log end.
    """
    from confluent_kafka import TopicPartition as KTP

    from reprocess.kafka.clients import make_consumer

    # Each check and search step reads ONE record at a fresh position: a broker that holds a
    # fetch for its max wait (500 ms by default) would cost that per step.
    consumer = make_consumer({**kafka, "fetch.wait.max.ms": PROBE_FETCH_WAIT_MS})
    try:
        answers = consumer.offsets_for_times([KTP(s.topic, s.partition, ts_ms) for s in snapshots], timeout=15)
        broker = {(a.topic, a.partition): a.offset for a in answers}
        out = {}
        for s in snapshots:
            first_ts = _first_timestamp_at(consumer, s, broker.get((s.topic, s.partition), -1))
            answer = broker.get((s.topic, s.partition), -1)
            answer = s.log_end if answer < 0 else answer
            if _consistent(consumer, s, answer, ts_ms, first_ts):
                out[s.tp] = answer
            else:
                out[s.tp] = _search(consumer, s, ts_ms)
                log.info("offset for time %d on %s: broker said %d, records say %d", ts_ms, s.tp, answer, out[s.tp])
        return out
    finally:
        consumer.close()


def _record_at_or_after(consumer: Any, s: PartitionSnapshot, offset: int) -> tuple[int, int] | None:
    """(offset, timestamp ms) of the first record at or after ``offset`` below the log end."""
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition as KTP

    if offset >= s.log_end:
        return None
    consumer.assign([KTP(s.topic, s.partition, offset)])
    for _ in range(20):
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                return None
            raise OffsetLookupError(f"{s.tp}: reading offset {offset} failed: {msg.error().str()}")
        return (msg.offset(), msg.timestamp()[1]) if msg.offset() < s.log_end else None
    raise OffsetLookupError(f"{s.tp}: no record returned at offset {offset} within 20s")


def _first_timestamp_at(consumer: Any, s: PartitionSnapshot, offset: int) -> int | None:
    rec = _record_at_or_after(consumer, s, max(offset, s.log_start))
    return rec[1] if rec else None


def _consistent(consumer: Any, s: PartitionSnapshot, answer: int, ts_ms: int, first_ts: int | None) -> bool:
    """The answer is right if its record is at/after the time and the one before is not."""
    if answer < s.log_end:
        rec = _record_at_or_after(consumer, s, answer)
        if rec is None or rec[1] < ts_ms:
            return False
    if answer <= s.log_start:
        return True
    previous = _record_at_or_after(consumer, s, answer - 1)
    return previous is None or previous[0] >= answer or previous[1] < ts_ms


def _search(consumer: Any, s: PartitionSnapshot, ts_ms: int) -> int:
    """Binary search for the first offset whose record timestamp is >= ts_ms."""
    low, high = s.log_start, s.log_end  # answer in [low, high]
    while low < high:
        mid = (low + high) // 2
        rec = _record_at_or_after(consumer, s, mid)
        if rec is None or rec[1] >= ts_ms:
            high = mid
        else:
            low = rec[0] + 1
    return low


# --------------------------------------------------------------------------- resolve (pure)
def resolve(
    spec: PipelineSpec,
    request: RunRequest,
    snapshots: list[PartitionSnapshot],
    ledger: Mapping[TopicPartition, int],
    time_offsets: Mapping[str, Mapping[TopicPartition, int]] | None = None,
) -> tuple[list[OffsetRange], list[LostRange]]:
    """Resolve a request against a snapshot into ranges; validation errors name the partition.

    ``time_offsets`` holds the offsets for the request's ``start``/``end`` timestamps.
    """
    by_tp = {s.tp: s for s in snapshots}
    selected = [
        s for s in snapshots
        if (not request.topics or s.topic in request.topics)
        and (not request.partitions or s.partition in request.partitions)
    ]  # fmt: skip
    for topic in request.topics:
        if topic not in spec.topics:
            raise SpecError(f"{spec.name}: topic {topic!r} is not one of the pipeline's topics {list(spec.topics)}")
    for p in request.partitions:
        if not any(s.partition == p for s in selected):
            raise SpecError(
                f"{spec.name}: partition {p} does not exist (topics have {sorted({s.partition for s in snapshots})})"
            )
    asked = (("start", request.start_mode, request.start_value), ("end", request.end_mode, request.end_value))
    explicit = {
        name: parse_offsets_json(value, f"{name}_value") for name, mode, value in asked if mode == "offsets" and value
    }
    for name, mapping in explicit.items():
        for tp in mapping:
            if tp not in by_tp:
                raise SpecError(
                    f"{spec.name}: {name}_value names {tp}, which is not a partition of the pipeline's topics"
                )
    if explicit:
        named = set().union(*(m.keys() for m in explicit.values()))
        selected = [s for s in selected if s.tp in named]
        if not selected:
            raise SpecError(
                f"{spec.name}: start/end offsets name {sorted(map(str, named))}, none of them among the "
                "selected topics/partitions; nothing would be read"
            )

    ranges, lost, gone = [], [], []
    for s in selected:
        start = _start(spec, request, s, ledger, explicit.get("start"), time_offsets)
        end = _end(spec, request, s, explicit.get("end"), time_offsets)
        if end > s.log_end:
            raise SpecError(f"{spec.name} {s.tp}: end {end} is beyond the log end {s.log_end}")
        if start > end:
            raise SpecError(f"{spec.name} {s.tp}: start {start} is after end {end}")
        if start < s.log_start:
            gone.append(f"{s.tp}: start {start} < log start {s.log_start}; offsets [{start}, {s.log_start}) are gone")
            lost.append(LostRange(s.topic, s.partition, start, min(s.log_start, end)))
            start = min(s.log_start, end)
        ranges.append(OffsetRange(s.topic, s.partition, start, end))
    if gone and not request.allow_data_loss:
        # Every partition's loss in one error: retention deletes on all partitions at once.
        raise DataLossError(
            f"{spec.name} {'; '.join(gone)} (deleted or compacted). Re-run with allow_data_loss=true to record "
            "the loss, or start at the log start."
        )
    return ranges, lost


def _start(
    spec: PipelineSpec,
    request: RunRequest,
    s: PartitionSnapshot,
    ledger: Mapping[TopicPartition, int],
    explicit: Mapping[TopicPartition, int] | None,
    time_offsets: Mapping[str, Mapping[TopicPartition, int]] | None,
) -> int:
    mode = request.start_mode
    if mode is StartMode.EARLIEST:
        return s.log_start
    if mode is StartMode.OFFSETS:
        assert explicit is not None
        value = explicit.get(s.tp, -2)
        return s.log_start if value == -2 else s.log_end if value == -1 else value
    if mode is StartMode.TIMESTAMP:
        assert time_offsets is not None
        return time_offsets["start"][s.tp]
    if mode is StartMode.GROUP:
        return s.group_committed if s.group_committed is not None else s.log_start
    position = ledger.get(s.tp)
    if position is None:
        return s.log_start
    if position > s.log_end:
        raise SpecError(
            f"{spec.name} {s.tp}: the ledger says next offset {position}, beyond the log end {s.log_end}. "
            f"Was the topic deleted and re-created? Reset the position deliberately: `reprocess "
            f"reset {spec.name} --topic {s.topic} --partitions {s.partition} --to-earliest` shows the move (dry "
            f"run); add `--execute --reason '…'` to apply it, or trigger the {spec.dag_id('reset')} DAG."
        )
    return position


def _end(
    spec: PipelineSpec,
    request: RunRequest,
    s: PartitionSnapshot,
    explicit: Mapping[TopicPartition, int] | None,
    time_offsets: Mapping[str, Mapping[TopicPartition, int]] | None,
) -> int:
    mode = request.end_mode
    if mode is EndMode.LATEST:
        return s.log_end
    if mode is EndMode.OFFSETS:
        assert explicit is not None
        value = explicit.get(s.tp, -1)
        return s.log_end if value == -1 else s.log_start if value == -2 else value
    if mode is EndMode.TIMESTAMP:
        assert time_offsets is not None
        return time_offsets["end"][s.tp]
    if s.group_committed is None:
        raise SpecError(f"{spec.name} {s.tp}: end_mode=group but group {spec.consumer_group!r} has no committed offset")
    return s.group_committed


# --------------------------------------------------------------------------- plan + store
def plan_run(
    engine: Engine,
    kafka: Mapping[str, Any],
    spec: PipelineSpec,
    request: RunRequest,
    run_id: str,
    *,
    dag_id: str | None = None,
    dag_run_id: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> RunPlan:
    """Snapshot, resolve and store a run's plan. A run that already staged or committed keeps its plan.

    ``params`` (the trigger form's values) are stored verbatim beside the parsed request.
    """
    request.check_rebuild(spec.topics)
    try:
        version, warnings = store.ensure_pipeline(
            engine, spec, rebuild=request.mode is RunMode.REBUILD, acknowledged=request.acknowledge_partition_change
        )
    except SpecError as refused:  # recorded, so the run note says why, not only the task log
        store.record_failed_request(engine, spec, request.kind, run_id, params, str(refused),
                                    parsed=request.as_dict(), dag_id=dag_id, dag_run_id=dag_run_id)  # fmt: skip
        raise
    drop_leftover_stages(engine, spec)
    with engine.begin() as conn:
        existing = store.run_state(conn, run_id)
        if existing in store.FINAL_PLAN_STATES:
            log.info("plan run_id=%s pipeline=%s already %s: keeping its plan", run_id, spec.name, existing)
            return store.load_plan(conn, run_id)
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
        ledger = {
            TopicPartition(r.topic, r.partition): r.next_offset
            for r in conn.execute(queries.LEDGER_FOR_PIPELINE, {"pipeline": spec.name})
        }
        try:
            warnings += _check_partition_counts(conn, spec, request, snapshots)
            ranges, lost = resolve(spec, request, snapshots, ledger, time_offsets)
            warnings += retention_risks(ranges, snapshots)
            error = None
        except (SpecError, DataLossError) as exc:
            ranges, lost, error = [], [], exc
        stored = {"params": dict(params) if params is not None else None, "parsed": request.as_dict()}
        state = RunState.FAILED if error else (RunState.DRY_RUN if request.dry_run else RunState.PLANNED)
        kept = store.save_plan(
            conn, spec, request.kind, stored, run_id, state=state, snapshots=snapshots, ranges=ranges, lost=lost,
            dag_id=dag_id, dag_run_id=dag_run_id, error=str(error) if error else None, spec_version=version,
        )  # fmt: skip
    if kept is not None:  # another attempt staged this run meanwhile: its plan stands
        return kept
    if error is not None:
        raise error
    for w in warnings:
        log.warning("plan run_id=%s pipeline=%s %s", run_id, spec.name, w)
    plan = RunPlan(
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


__all__ = ["offsets_for_time", "plan_run", "resolve", "take_snapshot"]
