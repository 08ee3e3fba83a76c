"""Daily reconciliation: prove that what Kafka holds for a time window landed in Postgres.

For each partition, the window's Kafka range is ``[offset_for(start), offset_for(end))``
(verified against the records' own timestamps). The check then compares:

(a) Kafka's range with (b) the ledger's committed ranges: every offset must be covered;
(c) the window's records with the target: for every key whose newest valid record (by the
    pipeline's :class:`~reprocess.core.ordering.Ordering`) lies in the window, the target row must
    carry exactly that record's lineage (topic, partition, offset), or a record that is newer by
    the same Ordering (a later window's update). A row that is absent is *missing*; a row that
    carries an older record is *stale*. Every invalid record of the window must be in
    ``reprocess.dead_letters``. Marker and aborted-transaction offsets carry no record.
    A window that reaches a last stable offset an open transaction holds (the high watermark above
    it) is *not yet stable*, never ok: its records above the LSO are unreadable until the
    transaction ends (:data:`reprocess.core.runs.NOT_STABLE`). So is a window that reaches past the
    ledger: its records at or above the ledger's next offset are the incremental's lag, not a gap
    (a check racing the incremental, as the scheduler runs them, found false gaps there); only the
    part below the ledger is checked, and the window is checked again once the ledger passes it.
(d) the values of the rows whose newest record lies in the window (a row last written before it
    is not read), a Debezium left-out column only where the window holds its full value: such a row
    must hold what its record derives under the current spec (:mod:`reprocess.checks.values_differ`);
    one that does not *differs* (a person's UPDATE, a decoding bug), named with key, column, stored
    and derived value, and healed by a backfill of those records (:func:`heal_conf`).

Each of these is one check of :mod:`reprocess.checks` (its query, its typed result, its kind, its heal
range). Spark stages the newest record per key with the backfill's own rules (:func:`reprocess.spark.job.
stage_window`); this module snapshots the window's ranges (:func:`snapshot_window`) and runs the checks in Postgres
(:func:`record_verdicts`), so the Airflow worker never reads records or loads Spark.

One ``reconciliations`` row per partition holds the verdict and the kinds of gap its checks found; a gap raises
:class:`ReconciliationGap` naming the exact range and the backfill that closes it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from reprocess.checks import values_differ
from reprocess.checks.base import Window
from reprocess.checks.registry import CHECKS
from reprocess.checks.verdict import PartitionVerdict, judge
from reprocess.core.errors import ReconciliationGap, ReprocessError, WindowNotStable
from reprocess.core.ranges import OffsetRange, backfill_conf
from reprocess.core.runs import HEALS_WINDOW, window_text
from reprocess.core.spec import PipelineSpec
from reprocess.kafka.offsets import offsets_for_time, take_snapshot
from reprocess.postgres.db import pg_cursor
from reprocess.postgres.ledger import ledger_positions
from reprocess.postgres.stage import drop_stage, require_stage

log = logging.getLogger(__name__)

# Every partition's verdict in one statement (one round trip per window, whatever its partition count):
# the cell's latest verdict, then every verdict ever recorded, so a healed window still shows the gap it
# had (sql/013). A cell found ok where it had a gap records the run that healed it (NULL for a check no
# heal asked for); it keeps that run while it stays ok; a gap clears it.
_RECORD = text(
    "WITH v AS (SELECT * FROM jsonb_to_recordset(CAST(:verdicts AS jsonb)) AS x(topic text, partition int, "
    "ks bigint, ke bigint, ce bigint, verdict text, kinds text[], detail text, heal_conf jsonb)), "
    "up AS (INSERT INTO reprocess.reconciliations (pipeline, window_start, window_end, topic, partition, kafka_start, "
    "kafka_end, committed_end, verdict, kinds, detail, check_id, heal_conf) SELECT :pipeline, :ws, :we, topic, "
    "partition, ks, ke, ce, verdict, kinds, detail, :check_id, heal_conf FROM v "
    "ON CONFLICT (pipeline, window_start, topic, partition) DO UPDATE SET "
    "window_end = EXCLUDED.window_end, kafka_start = EXCLUDED.kafka_start, kafka_end = EXCLUDED.kafka_end, "
    "committed_end = EXCLUDED.committed_end, verdict = EXCLUDED.verdict, kinds = EXCLUDED.kinds, "
    "detail = EXCLUDED.detail, "
    "check_id = EXCLUDED.check_id, heal_conf = EXCLUDED.heal_conf, checked_at = now(), "
    "healed_by_run = CASE WHEN EXCLUDED.verdict <> 'ok' THEN NULL "
    "WHEN reprocess.reconciliations.verdict = 'gap' THEN CAST(:healed_by AS text) "
    "ELSE reprocess.reconciliations.healed_by_run END "
    "RETURNING pipeline, window_start, window_end, topic, partition, kafka_start, kafka_end, committed_end, verdict, "
    "kinds, detail, check_id, heal_conf, healed_by_run) "
    "INSERT INTO reprocess.reconciliation_history (pipeline, window_start, window_end, topic, partition, "
    "kafka_start, kafka_end, committed_end, verdict, kinds, detail, check_id, heal_conf, healed_by_run) "
    "SELECT * FROM up"
)
_RECORDED_HEAL = text(
    "SELECT DISTINCT heal_conf FROM reprocess.reconciliations WHERE pipeline = :pipeline AND window_start = :ws "
    "AND check_id = :check_id AND verdict = 'gap'"
)


@dataclass(frozen=True, slots=True)
class WindowRanges:
    ranges: list[OffsetRange]  # the window's offsets per partition, below each last stable offset
    # [LSO, HW) of each partition whose window reaches a last stable offset an open transaction holds
    unstable: list[OffsetRange] = field(default_factory=list)
    # [ledger, window end) of each partition whose window reaches past the ledger: not read yet
    unread: list[OffsetRange] = field(default_factory=list)
    # the window's records on each partition the ledger has no position for: checked whole (a gap),
    # but a first incremental still under way reads them (the reconcile DAG's wait looks at them)
    never_read: list[OffsetRange] = field(default_factory=list)


def snapshot_window(
    engine: Engine, kafka: Mapping[str, Any], spec: PipelineSpec, window_start: datetime, window_end: datetime
) -> WindowRanges:
    """The window's offset range per partition of the spec's topics (from the records' timestamps),
    cut at the ledger where the window reaches past it (the rest is :attr:`WindowRanges.unread`), and
    where it reaches a last stable offset held below the high watermark: the broker resolves a time
    past the LSO to the LSO, so records of the window may lie above it. A partition the ledger has
    no position for is checked whole: nothing of it was ever committed, so its offsets are a gap."""
    snapshots = take_snapshot(kafka, spec, spec.topics)
    starts = offsets_for_time(kafka, snapshots, int(window_start.timestamp() * 1000))
    ends = offsets_for_time(kafka, snapshots, int(window_end.timestamp() * 1000))
    with engine.connect() as conn:
        ledger = ledger_positions(conn, spec.name)
    window = [OffsetRange(s.topic, s.partition, starts[s.tp], max(starts[s.tp], ends[s.tp])) for s in snapshots]
    unread = [
        OffsetRange(r.topic, r.partition, max(r.start, ledger[r.tp]), r.end)
        for r in window
        if r.tp in ledger and ledger[r.tp] < r.end
    ]
    cut = {u.tp: u.start for u in unread}
    ranges = [OffsetRange(r.topic, r.partition, r.start, cut.get(r.tp, r.end)) for r in window]
    held = [
        OffsetRange(s.topic, s.partition, s.log_end, s.log_end + s.unstable)
        for s, r in zip(snapshots, window, strict=True)
        if s.unstable and r.end >= s.log_end
    ]
    never_read = [r for r in window if r.tp not in ledger and r.width]
    return WindowRanges(ranges, held, unread, never_read)


def record_verdicts(
    engine: Engine,
    spec: PipelineSpec,
    ranges: Sequence[OffsetRange],
    window_start: datetime,
    window_end: datetime,
    check_id: str,
    healed_by: str | None = None,
    unstable: Sequence[OffsetRange] = (),
    unread: Sequence[OffsetRange] = (),
    *,
    compare_values: bool = True,
) -> list[PartitionVerdict]:
    """Compare the check's stage (written by :func:`reprocess.spark.job.stage_window`) with the target
    and the ledger, store one verdict row per partition (tagged ``check_id``, the healing backfill
    conf on gap rows) and drop the stage, all in one transaction.

    ``healed_by`` is the backfill run whose commit asked for this check (it healed the window's
    gap): an ok verdict records it, and ``reconciliation_history`` keeps the gap before it.
    ``unstable``, ``unread``: :attr:`WindowRanges.unstable` and :attr:`WindowRanges.unread`, the partitions
    whose verdict is at best not yet stable.
    ``compare_values``: False leaves out the value check (d), the check as it was before it compared
    values; it exists for the bench's baseline (``bench/reconcile.py``), which reports what comparing
    values costs against it in the same run. A daily check always compares values.

    Raises
    ------
    ReconciliationGap
        Offsets of the window are not committed, or rows are missing or stale; the message
        names the ranges and gives the backfill conf that closes them.
    WindowNotStable
        No gap, but an open transaction holds a partition's last stable offset inside the window, or
        the window reaches past the ledger.
    """
    checks = CHECKS if compare_values else tuple(c for c in CHECKS if c is not values_differ.CHECK)
    with engine.begin() as conn:
        cur = pg_cursor(conn)
        stage = require_stage(cur, spec, check_id, "check", "re-run the window's Spark task")
        verdicts = judge(Window(conn, cur, spec, stage, ranges), checks, unstable, unread)
        bad = [v for v in verdicts if v.gap]
        conf = heal_conf(bad, window_start, window_end) if bad else None
        rows = [{"topic": v.range.topic, "partition": v.range.partition, "ks": v.range.start, "ke": v.range.end,
                 "ce": max((b for _, b in v.committed), default=None), "verdict": v.verdict, "kinds": list(v.kinds),
                 "detail": v.detail(), "heal_conf": conf if v.gap else None} for v in verdicts]  # fmt: skip
        conn.execute(_RECORD, {"verdicts": json.dumps(rows), "pipeline": spec.name, "ws": window_start,
                               "we": window_end, "check_id": check_id, "healed_by": healed_by})  # fmt: skip
        for v, row in zip(verdicts, rows, strict=True):
            r = v.range
            log.info("reconcile pipeline=%s topic=%s partition=%d offsets=[%d,%d) verdict=%s %s", spec.name, r.topic,
                     r.partition, r.start, r.end, v.verdict, row["detail"])  # fmt: skip
        drop_stage(conn.connection, spec, check_id)
    if conf is not None:
        raise ReconciliationGap(
            f"{spec.name} window [{window_start.isoformat()}, {window_end.isoformat()}): "
            + "; ".join(f"{v.range.topic}[{v.range.partition}] {v.detail()}" for v in bad)
            + f". Close it with {spec.dag_id('backfill')} and conf {json.dumps(conf)}",
            heal_conf=conf,
            pipeline=spec.name,
        )
    if waiting := [v for v in verdicts if not v.ok]:
        raise WindowNotStable(
            f"{spec.name} window [{window_start.isoformat()}, {window_end.isoformat()}): "
            + "; ".join(f"{v.range.topic}[{v.range.partition}] {v.detail()}" for v in waiting),
            pipeline=spec.name,
        )
    return verdicts


def heal_conf(bad: list[PartitionVerdict], window_start: datetime, window_end: datetime) -> dict[str, Any]:
    """The backfill trigger conf that replays the gaps (each partition's :attr:`PartitionVerdict.heal`: the
    span its checks' heal ranges give, reprocess.checks) and the window it heals, which the backfill has
    checked again once it commits."""
    ranges = (v.heal for v in bad)
    return {**backfill_conf(r for r in ranges if r is not None), HEALS_WINDOW: window_text(window_start, window_end)}


def recorded_heal_conf(
    engine: Engine, spec: PipelineSpec, window_start: datetime, check_id: str
) -> dict[str, Any] | None:
    """The backfill conf stored on the gap rows that check ``check_id`` recorded, or None when it
    recorded no gap (it found none, or it failed before its verdicts: then there is nothing to heal).
    """
    with engine.connect() as conn:
        confs = conn.execute(_RECORDED_HEAL, {"pipeline": spec.name, "ws": window_start, "check_id": check_id}).all()
    if len(confs) > 1:
        raise ReprocessError(
            f"{spec.name}: check {check_id} stored {len(confs)} different heal confs; expected one",
            pipeline=spec.name,
            run_id=check_id,
        )
    return confs[0][0] if confs else None
