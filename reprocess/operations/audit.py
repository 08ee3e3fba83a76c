"""``reprocess audit``: is every row of the table what the log says it should be (issue 57)?

The daily reconciliation compares only the rows whose newest record lies in its window; a row last
written before it and changed since is never compared again (review V, finding 7). The audit takes the
whole retained log instead: from each partition's log start to the ledger (what the product has
committed), staged by the window check's own Spark job (:func:`reprocess.spark.job.stage_window`: the
run's read, decode, transforms, ordering and dedupe; Debezium left-out values resolved from the key's
earlier records as a run resolves them), then compared with every target row in PostgreSQL
(:mod:`reprocess.postgres.audit_sql`, values under :mod:`reprocess.postgres.compare`'s rules). The comparison
is a checksum bisection (:mod:`reprocess.core.checksums`): PostgreSQL sums the target's row hashes per key
range, Spark the derived rows' in the same action that stages, and only the rows of the ranges that differ
are staged and compared row by row; the report's ``bisection`` says how many. Per kind:

- *differ*: the row holds other values than its key's newest record derives (columns and examples);
- *missing*: the key's newest record is a row and the target has none;
- *must not be*: the target holds a row whose key's newest record is a tombstone, or that no record of
  the log produced (inserted by hand, a spec that no longer keeps it);
- *unprovable*: the log no longer holds what would prove the row: its record lay below the log start
  (retention, delete-records) or on a compacted topic, or the value its newest record left out.

Only counts and a few examples leave PostgreSQL. ``heal`` rewrites exactly the differing and missing keys
from their newest records and deletes the rows that must not be, as a run of its own (kind
:data:`HEAL_KIND`, ledger untouched), in the audit's transaction; the unprovable rows stay, listed.
Each audit's verdict is kept in ``reprocess.audits`` (``reprocess status`` and the coverage page show
the last one).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from psycopg2 import sql
from sqlalchemy import Connection, Engine, text

from reprocess.core.checksums import MARKER
from reprocess.core.names import heal_run_id, pipeline_dag_id
from reprocess.core.ranges import OffsetRange, TopicPartition, offsets_json, window_ranges
from reprocess.core.spec import PipelineSpec
from reprocess.kafka.clients import make_admin
from reprocess.kafka.offsets import take_snapshot
from reprocess.postgres import audit_sql, store
from reprocess.postgres.checksum_sql import in_ranges_sql
from reprocess.postgres.compare import differing_rows_sql, value_columns
from reprocess.postgres.db import one_row, pg_cursor
from reprocess.postgres.digest import as_writer, rebase_digests
from reprocess.postgres.evolve import live_version
from reprocess.postgres.ledger import ledger_positions
from reprocess.postgres.stage import drop_stage, require_stage
from reprocess.postgres.target import target_identifier

log = logging.getLogger(__name__)

EXAMPLES: Final = 5  # keys listed per kind
HEAL_KIND: Final = "audit heal"  # reprocess.runs.kind of a heal's run
EQUAL: Final = "equal"
DIFFERENCES: Final = "differences"
UNPROVABLE_ONLY: Final = "unprovable"  # nothing differs, but rows the log can no longer prove
_FIRST_COMMITTED = text(
    "SELECT topic, partition, min(start_offset) FROM reprocess.committed_ranges WHERE pipeline = :pipeline "
    "GROUP BY 1, 2"
)
_RECORD = text(
    "INSERT INTO reprocess.audits (audit_id, pipeline, verdict, counts, report, heal_run) VALUES (:audit_id, "
    ":pipeline, :verdict, CAST(:counts AS jsonb), CAST(:report AS jsonb), :heal_run) ON CONFLICT (audit_id) DO "
    "UPDATE SET verdict = EXCLUDED.verdict, counts = EXCLUDED.counts, report = EXCLUDED.report, "
    "heal_run = EXCLUDED.heal_run, audited_at = now()"
)
_LAST = text(
    "SELECT audit_id, verdict, counts, heal_run, audited_at, extract(epoch FROM now() - audited_at) AS age_s "
    "FROM reprocess.audits WHERE pipeline = :pipeline ORDER BY audited_at DESC LIMIT 1"
)
_HEAL_RUN = text(
    "INSERT INTO reprocess.runs (run_id, pipeline, kind, state, request, planned_at, staged_at) VALUES (:run_id, "
    ":pipeline, :kind, 'staged', CAST(:request AS jsonb), now(), now())"
)


@dataclass(frozen=True, slots=True)
class AuditRanges:
    """What the audit reads: per partition ``[log start, ledger)``; ``lost``: the partitions whose first
    committed offset the log no longer holds (their rows from below the log start are unprovable);
    ``compacted``: the topics whose cleanup policy compacts."""

    ranges: list[OffsetRange]
    lost: list[OffsetRange] = field(default_factory=list)
    compacted: list[str] = field(default_factory=list)

    def to_xcom(self) -> dict[str, Any]:
        """As the audit DAG hands it on: the ranges as Spark offset JSONs (the window job's arguments)."""
        return {"starting": offsets_json(self.ranges, "start"), "ending": offsets_json(self.ranges, "end"),
                "lost": [asdict(r) for r in self.lost], "compacted": list(self.compacted)}  # fmt: skip

    @classmethod
    def from_xcom(cls, value: Mapping[str, Any]) -> AuditRanges:
        return cls(
            window_ranges(value["starting"], value["ending"]),
            [OffsetRange(**r) for r in value["lost"]],
            list(value["compacted"]),
        )


@dataclass(frozen=True, slots=True)
class AuditReport:
    """One audit's verdict: keys per kind (:data:`reprocess.postgres.audit_sql.KINDS`), rows per differing
    column, a few examples per kind and of differing values, and what it read."""

    audit_id: str
    pipeline: str
    counts: dict[str, int]
    columns: dict[str, int]
    examples: dict[str, list[dict[str, Any]]]
    values: list[list[Any]]  # [key, column, stored, derived] (compare.differing_rows_sql's examples)
    ranges: list[dict[str, Any]]
    lost: list[dict[str, Any]]
    heal_run: str | None = None
    healed: dict[str, int] = field(default_factory=dict)
    bisection: dict[str, int] = field(default_factory=dict)  # key ranges compared by checksum, differing, rows

    @property
    def verdict(self) -> str:
        if any(self.counts.get(k) for k in audit_sql.HEALED):
            return DIFFERENCES
        return UNPROVABLE_ONLY if self.counts.get(audit_sql.UNPROVABLE) else EQUAL

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}


def snapshot_audit(engine: Engine, kafka: Mapping[str, Any], spec: PipelineSpec) -> AuditRanges:
    """The audit's ranges: each partition from its log start to the ledger (a partition the ledger has no
    position for holds no row of the product: nothing to read)."""
    snapshots = take_snapshot(kafka, spec, spec.topics, with_group=False)
    with engine.connect() as conn:
        ledger = ledger_positions(conn, spec.name)
        first = {TopicPartition(t, p): int(o) for t, p, o in conn.execute(_FIRST_COMMITTED, {"pipeline": spec.name})}
    ranges = [
        OffsetRange(s.topic, s.partition, s.log_start, max(s.log_start, ledger.get(s.tp, s.log_start)))
        for s in snapshots
    ]
    lost = [
        OffsetRange(s.topic, s.partition, first[s.tp], s.log_start)
        for s in snapshots
        if s.tp in first and first[s.tp] < s.log_start
    ]
    return AuditRanges(ranges, lost, compacted_topics(kafka, spec.topics))


def compacted_topics(kafka: Mapping[str, Any], topics: Sequence[str]) -> list[str]:
    """The topics whose ``cleanup.policy`` compacts: a record there may be gone below the log end."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = make_admin(kafka)
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics])
    out = []
    for resource, future in futures.items():
        entry = future.result(timeout=30).get("cleanup.policy")
        if entry is not None and "compact" in (entry.value or ""):
            out.append(resource.name)
    return sorted(out)


def judge_audit(
    engine: Engine, spec: PipelineSpec, audit_id: str, audited: AuditRanges, *, heal: bool = False, keep: bool = True
) -> AuditReport:
    """Compare the audit's stage (staged under ``audit_id`` by :func:`reprocess.spark.job.stage_window`
    over ``audited.ranges``) with every target row, in one transaction: classify, count, and with
    ``heal`` rewrite the keys found (a run ``<audit_id>-heal``). ``keep``: record the verdict in
    ``reprocess.audits`` (``--plan`` does not). The stage is dropped."""
    ranges = audited.ranges
    params = {"topics": [r.topic for r in ranges], "partitions": [r.partition for r in ranges],
              "starts": [r.start for r in ranges], "ends": [r.end for r in ranges],
              "compacted": list(audited.compacted)}  # fmt: skip
    with engine.begin() as conn:
        cur = pg_cursor(conn)
        stage = require_stage(cur, spec, audit_id, "audit", "run the audit again")
        bisection, rows = _bisection(cur, spec, stage, params)
        cur.execute(audit_sql.classify_sql(spec, stage, rows), params)
        cur.execute(audit_sql.found_counts_sql())
        counts = {kind: int(n) for kind, n in cur.fetchall()}
        examples: dict[str, list[dict[str, Any]]] = {}
        cur.execute(audit_sql.found_examples_sql(EXAMPLES))
        for kind, key, columns, topic, partition, offset in cur.fetchall():
            lineage = None if topic is None else {"topic": topic, "partition": partition, "offset": offset}
            examples.setdefault(kind, []).append({"key": key, "columns": list(columns), "stored_record": lineage})
        columns, values = _value_detail(cur, spec, stage) if counts.get(audit_sql.DIFFER) else ({}, [])
        report = AuditReport(
            audit_id, spec.name, {k: counts.get(k, 0) for k in audit_sql.KINDS}, columns, examples, values,
            [asdict(r) for r in ranges], [asdict(r) for r in audited.lost], bisection=bisection,
        )  # fmt: skip
        if heal and report.verdict == DIFFERENCES:
            report = _heal(conn, cur, spec, stage, report)
        if keep:
            record = {"audit_id": audit_id, "pipeline": spec.name, "verdict": report.verdict,
                      "counts": json.dumps(report.counts), "report": json.dumps(report.as_dict(), default=str),
                      "heal_run": report.heal_run}  # fmt: skip
            conn.execute(_RECORD, record)
        drop_stage(conn.connection, spec, audit_id)
    log.info("audit pipeline=%s audit_id=%s verdict=%s counts=%s healed=%s", spec.name, audit_id, report.verdict,
             report.counts, report.healed)  # fmt: skip
    return report


def _bisection(
    cur: Any, spec: PipelineSpec, stage: Any, params: dict[str, Any]
) -> tuple[dict[str, int], sql.Composable | None]:
    """What the stage's checksum bisection compared (its marker rows, :mod:`reprocess.spark.checksums`):
    the cut, the ranges that differ and the rows staged for them; and the condition on the target rows that
    lie in those ranges (binds ``range_digits`` and ``ranges`` into ``params``). A stage without markers
    holds every key (nothing was read): every target row is compared."""
    cur.execute(sql.SQL("SELECT _kafka_partition, _kafka_offset FROM {} WHERE _kind = %s").format(stage), (MARKER,))
    markers = cur.fetchall()
    if not markers:
        return {}, None
    ranges = sorted(int(r) for _d, r in markers if r >= 0)
    params.update(range_digits=int(markers[0][0]), ranges=ranges)
    cur.execute(sql.SQL("SELECT count(*) FROM {} WHERE _kind <> %s").format(stage), (MARKER,))
    staged = int(one_row(cur)[0])
    counted = {"range_digits": int(markers[0][0]), "ranges": 16 ** int(markers[0][0]), "ranges_differing": len(ranges),
               "rows_staged": staged}  # fmt: skip
    return counted, in_ranges_sql(spec, "t") if ranges else sql.SQL("FALSE")


def _value_detail(cur: Any, spec: PipelineSpec, stage: Any) -> tuple[dict[str, int], list[list[Any]]]:
    """Rows per differing column and a few [key, column, stored, derived] examples, by the window check's
    own comparison (:func:`~reprocess.postgres.compare.differing_rows_sql` on key alone, one group)."""
    cur.execute(
        differing_rows_sql(spec, audit_sql.newest_sql(spec, stage), target_identifier(spec), match=spec.key, group=())
    )
    row = one_row(cur)
    values = value_columns(spec)
    counts = dict(zip(values, (int(n) for n in row[1 : 1 + len(values)]), strict=True))
    return {c: n for c, n in counts.items() if n}, [list(e) for e in (row[-1] or [])]


def _heal(conn: Connection, cur: Any, spec: PipelineSpec, stage: Any, report: AuditReport) -> AuditReport:
    """Rewrite the differing and missing keys from their newest records and delete the rows that must not
    be, as the run ``<audit_id>-heal`` (committed with its counts; the ledger is not touched)."""
    run_id = heal_run_id(report.audit_id)
    as_writer(conn)  # the product's own write: its rows' digests and the table's sum follow it (the tamper check)
    version = live_version(conn, spec)
    conn.execute(_HEAL_RUN, {"run_id": run_id, "pipeline": spec.name, "kind": HEAL_KIND,
                             "request": json.dumps({"audit": report.audit_id})})  # fmt: skip
    written = []
    for statement in audit_sql.heal_sql(spec, stage):
        cur.execute(statement, {"run_id": run_id, "spec_version": version})
        written.append(cur.rowcount)
    deleted, updated, inserted = written
    # The table is now what the log says: the tamper check's count and sum start over from it, so a row
    # removed by hand and written back here no longer counts as removed (postgres.digest.rebase_digests).
    rebase_digests(cur, target_identifier(spec))
    store.mark_committed(
        conn, run_id,
        {"records_read": 0, "rows_staged": 0, "rows_upserted": updated + inserted, "dead_letters": 0,
         "dead_letters_new": 0, "rows_deleted": deleted, "rows_inserted": inserted, "rows_rederived": updated,
         "records_filtered": 0, "rows_restamped": 0, "values_incomplete": 0},
    )  # fmt: skip
    store.touch_target(conn, run_id)
    healed = {audit_sql.DIFFER: updated, audit_sql.MISSING: inserted, audit_sql.MUST_NOT_BE: deleted}
    log.info("audit heal run_id=%s pipeline=%s rewrote=%d inserted=%d deleted=%d", run_id, spec.name, updated,
             inserted, deleted)  # fmt: skip
    return AuditReport(**{**asdict(report), "heal_run": run_id, "healed": healed})


def last_audit(conn: Connection, pipeline: str) -> dict[str, Any] | None:
    """The pipeline's last audit: id, verdict, counts, heal run, when and its age in seconds."""
    row = conn.execute(_LAST, {"pipeline": pipeline}).mappings().first()
    return None if row is None else {**row, "age_s": float(row["age_s"])}


def last_audit_text(pipeline: str, last: Mapping[str, Any] | None) -> str:
    """The last audit's verdict and age in one line (``reprocess status``, the coverage page, a run note).

    >>> last_audit_text("orders", None)
    'AUDIT: never run (`reprocess audit orders`, or its DAG reprocess_orders_audit)'
    >>> last_audit_text("orders", {"audit_id": "a1", "verdict": "differences", "age_s": 7300.0,
    ...     "counts": {"differ": 2, "missing": 0, "must not be": 1, "unprovable": 0}, "heal_run": None})
    'AUDIT differences 2 h ago (a1): differ 2, must not be 1'
    """
    if last is None:
        return f"AUDIT: never run (`reprocess audit {pipeline}`, or its DAG {pipeline_dag_id(pipeline, 'audit')})"
    age = float(last["age_s"])
    ago = f"{age / 86400:.0f} d" if age >= 172800 else f"{age / 3600:.0f} h" if age >= 3600 else f"{age / 60:.0f} min"
    found = ", ".join(f"{kind} {n}" for kind, n in last["counts"].items() if n)
    healed = f"; healed by run {last['heal_run']}" if last["heal_run"] else ""
    return f"AUDIT {last['verdict']} {ago} ago ({last['audit_id']})" + (f": {found}" if found else "") + healed
