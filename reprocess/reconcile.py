"""Daily reconciliation: prove that what Kafka holds for a time window landed in Postgres.

For each partition, the window's Kafka range is ``[offset_for(start), offset_for(end))``
(verified against the records' own timestamps). The check then compares:

(a) Kafka's range with (b) the ledger's committed ranges: every offset must be covered;
(c) the records of the range with the target: for every key, the newest valid record of the
    window must be in the target, or superseded by a newer record (a higher offset, or a
    newer version column); records that are dead letters are accounted for by
    ``reprocess.dead_letters``. Marker and aborted-transaction offsets carry no record, so
    they need no row.

One ``reconciliations`` row per partition holds the verdict; a gap raises
:class:`ReconciliationGap` naming the exact range and the backfill that closes it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg2 import sql
from sqlalchemy import Engine, text

from reprocess.db import pg_cursor
from reprocess.errors import ReconciliationGap, ReprocessError
from reprocess.evolve import stale_in_range
from reprocess.ordering import OrderingMode
from reprocess.plan import offsets_for_time, take_snapshot
from reprocess.ranges import OffsetRange, backfill_conf, healing_range, uncovered
from reprocess.reader import read_range
from reprocess.spec import PipelineSpec
from reprocess.target import target_identifier

log = logging.getLogger(__name__)

_COMMITTED = text(
    "SELECT start_offset, end_offset FROM reprocess.committed_ranges "
    "WHERE pipeline = :pipeline AND topic = :topic AND partition = :partition AND end_offset > :start "
    "AND start_offset < :end ORDER BY start_offset"
)
_DEAD = text(
    'SELECT "offset" FROM reprocess.dead_letters WHERE pipeline = :pipeline AND topic = :topic '
    'AND partition = :partition AND "offset" >= :start AND "offset" < :end'
)
_UPSERT = text(
    "INSERT INTO reprocess.reconciliations (pipeline, window_start, window_end, topic, partition, kafka_start, "
    "kafka_end, committed_end, verdict, detail, check_id, heal_conf) VALUES (:pipeline, :ws, :we, :topic, :partition, "
    ":ks, :ke, :ce, :verdict, :detail, :check_id, CAST(:heal_conf AS jsonb)) "
    "ON CONFLICT (pipeline, window_start, topic, partition) DO UPDATE SET "
    "window_end = EXCLUDED.window_end, kafka_start = EXCLUDED.kafka_start, kafka_end = EXCLUDED.kafka_end, "
    "committed_end = EXCLUDED.committed_end, verdict = EXCLUDED.verdict, detail = EXCLUDED.detail, "
    "check_id = EXCLUDED.check_id, heal_conf = EXCLUDED.heal_conf, checked_at = now()"
)
_RECORDED_HEAL = text(
    "SELECT DISTINCT heal_conf FROM reprocess.reconciliations WHERE pipeline = :pipeline AND window_start = :ws "
    "AND check_id = :check_id AND verdict = 'gap'"
)


@dataclass(frozen=True, slots=True)
class PartitionVerdict:
    range: OffsetRange
    uncovered: list[tuple[int, int]]  # offset ranges of the window the ledger never committed
    missing_keys: int  # keys whose newest window record is neither in the target nor superseded
    records: int
    dead_letters: int
    committed: list[tuple[int, int]]  # the ledger's committed ranges overlapping the window
    stale: str = ""  # rows of the window derived by an older spec version (evolve.stale_in_range)

    @property
    def ok(self) -> bool:
        return not self.uncovered and not self.missing_keys and not self.stale

    def detail(self) -> str:
        if self.ok:
            return f"{self.records} records, {self.dead_letters} dead letters, all accounted for"
        parts = [f"uncovered offsets {', '.join(f'[{a}, {b})' for a, b in self.uncovered)}"] if self.uncovered else []
        if self.missing_keys:
            parts.append(f"{self.missing_keys} keys missing from the target")
        if self.stale:
            parts.append(self.stale)
        return "; ".join(parts)


def _key_of(spec: PipelineSpec, value: bytes | None) -> tuple[Any, ...] | None:
    try:
        doc = json.loads(value or b"")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    key = []
    for c in spec.key_columns:
        node: Any = doc
        for part in c.path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return None
        key.append(str(node))
    return tuple(key)


def _missing_keys(
    engine: Engine, spec: PipelineSpec, kafka: Mapping[str, Any], r: OffsetRange, dead: set[int]
) -> tuple[int, int]:
    """(keys missing from the target, records read) for one partition's window range."""
    newest: dict[tuple[Any, ...], int] = {}
    records = 0
    for batch in read_range(kafka, r):
        for record in batch.select(["offset", "value"]).to_pylist():
            records += 1
            if record["offset"] in dead:
                continue
            key = _key_of(spec, record["value"])
            if key is not None:
                newest[key] = record["offset"]
    if not newest:
        return 0, records
    key_cols = sql.SQL(", ").join(sql.Identifier(k) for k in spec.key)
    query = sql.SQL(
        "SELECT {cols}, _kafka_topic, _kafka_partition, _kafka_offset FROM {target} WHERE ({cols}) IN ({values})"
    )
    found: dict[tuple[Any, ...], tuple[str, int, int]] = {}
    keys = list(newest)
    with engine.connect() as conn:
        raw = pg_cursor(conn)
        for i in range(0, len(keys), 5000):
            chunk = keys[i : i + 5000]
            values = sql.SQL(", ").join(sql.SQL("({})").format(sql.SQL(", ").join(map(sql.Literal, k))) for k in chunk)
            raw.execute(query.format(cols=key_cols, target=target_identifier(spec), values=values))
            for row in raw.fetchall():
                found[tuple(str(x) for x in row[: len(spec.key)])] = row[len(spec.key) :]
    missing = 0
    for key, offset in newest.items():
        found_row = found.get(key)
        # Present and at least as new (same partition, same or later offset), or moved on by
        # another partition's/ordering column's newer record: the target holds a newer version.
        if found_row is None or (
            spec.ordering.mode is OrderingMode.OFFSET
            and found_row[0] == r.topic
            and found_row[1] == r.partition
            and found_row[2] < offset
        ):
            missing += 1
    return missing, records


def reconcile_window(
    engine: Engine,
    kafka: Mapping[str, Any],
    spec: PipelineSpec,
    window_start: datetime,
    window_end: datetime,
    check_id: str,
) -> list[PartitionVerdict]:
    """Check every partition of the spec's topics for ``[window_start, window_end)``; store verdicts.

    The verdicts are stored (tagged ``check_id``) only once the whole window is checked, with the
    healing backfill conf on the gap rows: :func:`recorded_heal_conf` is the one source of auto-heal.

    Raises
    ------
    ReconciliationGap
        Some offsets of the window are not committed, or keys are missing; the message names
        the ranges and gives the backfill conf that closes them.
    """
    snapshots = take_snapshot(kafka, spec, spec.topics)
    starts = offsets_for_time(kafka, snapshots, int(window_start.timestamp() * 1000))
    ends = offsets_for_time(kafka, snapshots, int(window_end.timestamp() * 1000))
    verdicts = []
    with engine.begin() as conn:
        for s in snapshots:
            r = OffsetRange(s.topic, s.partition, starts[s.tp], max(starts[s.tp], ends[s.tp]))
            params = {"pipeline": spec.name, "topic": s.topic, "partition": s.partition, "start": r.start, "end": r.end}
            committed = [(a, b) for a, b in conn.execute(_COMMITTED, params)]
            dead = {o for (o,) in conn.execute(_DEAD, params)}
            missing, records = _missing_keys(engine, spec, kafka, r, dead) if r.width else (0, 0)
            verdicts.append(
                PartitionVerdict(
                    r, uncovered(r.start, r.end, committed), missing, records, len(dead), committed,
                    stale_in_range(conn, spec, r),
                )
            )  # fmt: skip
        bad = [v for v in verdicts if not v.ok]
        conf = heal_conf(bad) if bad else None
        for v in verdicts:
            conn.execute(
                _UPSERT,
                {"pipeline": spec.name, "ws": window_start, "we": window_end, "topic": v.range.topic,
                 "partition": v.range.partition, "ks": v.range.start, "ke": v.range.end,
                 "ce": max((b for _, b in v.committed), default=None), "verdict": "ok" if v.ok else "gap",
                 "detail": v.detail(), "check_id": check_id, "heal_conf": None if v.ok else json.dumps(conf)},
            )  # fmt: skip
            log.info("reconcile pipeline=%s topic=%s partition=%d offsets=[%d,%d) verdict=%s %s", spec.name,
                     v.range.topic, v.range.partition, v.range.start, v.range.end, "ok" if v.ok else "gap",
                     v.detail())  # fmt: skip
    if conf is not None:
        raise ReconciliationGap(
            f"{spec.name} window [{window_start.isoformat()}, {window_end.isoformat()}): "
            + "; ".join(f"{v.range.topic}[{v.range.partition}] {v.detail()}" for v in bad)
            + f". Close it with {spec.dag_id('backfill')} and conf {json.dumps(conf)}",
            heal_conf=conf,
        )
    return verdicts


def heal_conf(bad: list[PartitionVerdict]) -> dict[str, Any]:
    """The backfill trigger conf that replays the gaps: the uncovered span, or the window's whole
    range when rows are missing or stale (their records may lie anywhere in it)."""
    return backfill_conf(v.range if v.missing_keys or v.stale else healing_range(v.range, v.uncovered) for v in bad)


def recorded_heal_conf(
    engine: Engine, spec: PipelineSpec, window_start: datetime, check_id: str
) -> dict[str, Any] | None:
    """The backfill conf stored on the gap rows that check ``check_id`` recorded, or None when it
    recorded no gap (it found none, or it failed before its verdicts: then there is nothing to heal).
    """
    with engine.connect() as conn:
        confs = conn.execute(_RECORDED_HEAL, {"pipeline": spec.name, "ws": window_start, "check_id": check_id}).all()
    if len(confs) > 1:
        raise ReprocessError(f"{spec.name}: check {check_id} stored {len(confs)} different heal confs; expected one")
    return confs[0][0] if confs else None
