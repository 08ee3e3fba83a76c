"""Plans (``reprocess plan``): see what a replay would change before it writes, and apply exactly that.

A plan is a run whose last stage diffs instead of commits (:class:`reprocess.core.stages.Diff`):
the real Spark read, decode, transforms, ordering and dedupe fill its stage as a run's, then
:func:`diff_run` runs the commit's own statements in a transaction it rolls back, counting their
effect (:mod:`reprocess.postgres.diff`): no target change, no ledger move, no dead letter stored.
The report is stored in ``reprocess.plans``, the stage dropped and the run left ``dry_run``.

A spec that changes the table (a new column) changes it only in that transaction: planning checks
the evolution in a savepoint it rolls back (a refusal names the fix) and the diff migrates before
it counts, so a new column shows as none before, the derived value after. What a plan does keep is
bookkeeping, never the live state: its run, snapshot and report, and the spec's version number in
``reprocess.spec_versions`` (an append-only catalogue keyed by fingerprint, which the run is stamped
with; the live version, ``pipelines.spec_version``, and the registered spec stay until an apply).

:func:`check_fresh` is the apply's guard, as Terraform refuses a stale plan: the spec's fingerprint,
the ledger (for a range that starts at it) and the log starts must still be what the plan saw;
:func:`apply_request` is then the backfill that reads exactly the plan's ranges.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, Final

from sqlalchemy import Connection, Engine, text

from reprocess.core.errors import RunStateError, StageRefusedError, StalePlanError
from reprocess.core.names import parent_run_id
from reprocess.core.ranges import backfill_conf
from reprocess.core.runs import RunKind, RunRanges, RunRequest, RunState
from reprocess.core.spec import PipelineSpec
from reprocess.core.stages import Diff
from reprocess.kafka.offsets import take_snapshot
from reprocess.postgres import queries, store
from reprocess.postgres.commit import check_spec_version
from reprocess.postgres.diff import KINDS, StageDiff, diff_stage
from reprocess.postgres.ledger import ledger_movers, ledger_positions
from reprocess.postgres.stage import drop_stage, stage_identifier

log = logging.getLogger(__name__)

_SAVE: Final = text(
    "INSERT INTO reprocess.plans (plan_id, pipeline, spec_fingerprint, from_ledger, ledger, report, changes, "
    "target_commit) VALUES (:plan_id, :pipeline, :fingerprint, :from_ledger, CAST(:ledger AS jsonb), "
    "CAST(:report AS jsonb), :changes, :target_commit) ON CONFLICT (plan_id) DO UPDATE SET report = EXCLUDED.report, "
    "changes = EXCLUDED.changes, ledger = EXCLUDED.ledger, spec_fingerprint = EXCLUDED.spec_fingerprint, "
    "target_commit = EXCLUDED.target_commit"
)
_LOAD: Final = text(
    "SELECT p.pipeline, p.spec_fingerprint, p.from_ledger, p.ledger, p.report, p.changes, p.applied_run_id, "
    "p.created_at, p.target_commit, "
    "(SELECT a.state FROM reprocess.runs a WHERE a.run_id = p.applied_run_id) AS applied_state "
    "FROM reprocess.plans p JOIN reprocess.runs r ON r.run_id = p.plan_id "
    "WHERE p.plan_id = :plan_id"
)
_LATEST: Final = text("SELECT plan_id FROM reprocess.plans WHERE pipeline = :pipeline ORDER BY created_at DESC LIMIT 1")
_APPLIED: Final = text("UPDATE reprocess.plans SET applied_run_id = :run_id WHERE plan_id = :plan_id")
_READINGS: Final = text("UPDATE reprocess.runs SET avro_readings = CAST(:readings AS jsonb) WHERE run_id = :run_id")
_PLAN_READINGS: Final = text(
    "SELECT p.plan_id, r.avro_readings FROM reprocess.plans p JOIN reprocess.runs r ON r.run_id = p.plan_id "
    "WHERE p.applied_run_id = :run_id"
)


def diff_run(engine: Engine, spec: PipelineSpec, stage: Diff) -> dict[str, Any]:
    """The Diff stage of a staged plan: the diff (rolled back), then the report stored, the run
    ``dry_run`` and its stage dropped. Returns the report (:func:`load_report`'s form).

    A diff that raises (anything but the apply's own refusal, which the report shows) leaves no
    ``staged`` plan behind: the run is marked ``failed`` with the cause and its stage, which no
    commit will ever read, is dropped (the leftover cleanup keeps staged stages).
    """
    run_id = stage.run_id
    try:
        return _diff_run(engine, spec, stage)
    except RunStateError:
        raise  # not a staged plan: nothing of it is this call's to end
    except Exception as exc:
        with engine.begin() as conn:
            store.mark_failed(conn, run_id, f"the plan's diff failed, nothing was written: {exc}")
            drop_stage(conn.connection, spec, run_id)
        raise


def _diff_run(engine: Engine, spec: PipelineSpec, stage: Diff) -> dict[str, Any]:
    run_id = stage.run_id
    refused: str | None = None
    with engine.connect() as conn:
        tx = conn.begin()
        try:
            conn.execute(queries.PIPELINE_LOCK, {"pipeline": spec.name})  # the state a commit would see
            run = store.lock_run(conn, run_id)
            if run is None or run.state != RunState.STAGED:
                raise RunStateError(
                    f"{spec.name}: plan {run_id} is {run.state if run else 'unknown'}, not staged; "
                    "run `reprocess plan` again", pipeline=spec.name, run_id=run_id,
                )  # fmt: skip
            plan = store.load_ranges(conn, run_id)
            target_commit = store.last_target_commit(conn, spec.name)  # the table the diff sees, under the lock
            # The table as the apply will find it (a column the spec adds), undone with the rest; planning
            # only checked that it can be done. ALTER TABLE holds its lock until the rollback.
            store.migrate_live(conn, spec)
            spec_version = check_spec_version(conn, spec, run_id, live=True, step="planned")
            diff = StageDiff(dict.fromkeys(store.RUN_COUNTS, 0), [], {}, {})
            if not plan.is_empty:
                try:
                    diff = diff_stage(
                        conn,
                        spec,
                        run_id,
                        stage_identifier(spec, run_id),
                        spec_version=spec_version,
                        rederives=stage.rederives,
                    )
                except StageRefusedError as exc:
                    refused = str(exc)
        finally:
            tx.rollback()  # the plan writes nothing: target, markers, dead letters and ledger stay
    report = _report(spec, plan, diff, refused)
    with engine.begin() as conn:
        ledger = [[tp.topic, tp.partition, offset] for tp, offset in ledger_positions(conn, spec.name).items()]
        request = conn.execute(text("SELECT request FROM reprocess.runs WHERE run_id = :r"), {"r": run_id}).scalar()
        from_ledger = (request or {}).get("parsed", {}).get("start_mode") == "ledger"
        conn.execute(
            _SAVE,
            {"plan_id": run_id, "pipeline": spec.name, "fingerprint": spec.fingerprint, "from_ledger": from_ledger,
             "ledger": json.dumps(ledger), "report": json.dumps(report, default=str), "changes": report["changes"],
             "target_commit": target_commit},
        )  # fmt: skip
        store.mark_previewed(conn, run_id)
        drop_stage(conn.connection, spec, run_id)
    log.info("plan run_id=%s pipeline=%s changes=%d %s", run_id, spec.name, report["changes"], report["total"])
    return report


def _report(spec: PipelineSpec, plan: RunRanges, diff: StageDiff, refused: str | None) -> dict[str, Any]:
    """The report a plan stores and shows (CLI, JSON, run note, coverage page)."""
    total: dict[str, int] = dict.fromkeys(KINDS, 0)
    total["dead_letters"], total["records_filtered"] = 0, 0
    for p in diff.partitions:
        for kind, n in p.kinds.items():
            total[kind] += n
        total["dead_letters"] += p.dead_letters
        total["records_filtered"] += p.records_filtered
    total["values_incomplete"] = diff.apply.get("values_incomplete", 0)
    a = diff.apply
    changes = 0 if refused else a["rows_upserted"] + a["rows_deleted"] + a["rows_restamped"] + a["dead_letters_new"]
    return {
        "plan_id": plan.run_id,
        "pipeline": spec.name,
        "target": spec.qualified_target,
        "spec_fingerprint": spec.fingerprint,
        "ranges": [[r.topic, r.partition, r.start, r.end] for r in plan.ranges],
        "total": total,
        "columns": diff.columns,
        "partitions": [asdict(p) for p in diff.partitions],
        "samples": diff.samples,
        "apply": diff.apply,
        "refused": refused,
        "changes": changes,
    }


def load_report(conn: Connection, plan_id: str) -> dict[str, Any] | None:
    """A stored plan's report with its state (``applied_run_id``), or None."""
    row = conn.execute(_LOAD, {"plan_id": plan_id}).one_or_none()
    if row is None:
        return None
    return {**row.report, "applied_run_id": row.applied_run_id, "created_at": row.created_at.isoformat()}


def latest_report(conn: Connection, pipeline: str, plan_id: str | None = None) -> dict[str, Any] | None:
    """The coverage page's Plan view: plan ``plan_id`` of the pipeline, else its newest plan."""
    plan_id = plan_id or conn.execute(_LATEST, {"pipeline": pipeline}).scalar()
    report = load_report(conn, plan_id) if plan_id else None
    return report if report is not None and report["pipeline"] == pipeline else None


def check_fresh(conn: Connection, kafka: Mapping[str, Any], spec: PipelineSpec, plan_id: str, run_id: str) -> RunRanges:
    """The plan's ranges, when run ``run_id`` applying them still does what the plan showed.

    The apply's own commits do not make its plan stale: its batches' commits, and the ledger they
    moved, are exempt when a cleared apply resumes under the same run id.

    Raises
    ------
    StalePlanError
        The plan showed a refusal, or it is stale, naming each change: the spec (fingerprint), any
        other run's commit to the target since the diff, the ledger (a range that starts at it), a
        log start moved past a range's start (records gone), or the plan applied already.
    """
    row = conn.execute(_LOAD, {"plan_id": plan_id}).one_or_none()
    if row is None or row.pipeline != spec.name:
        raise StalePlanError(
            f"{spec.name}: no plan {plan_id!r} of this pipeline; make one with `reprocess plan {spec.name}`",
            pipeline=spec.name,
        )
    if row.report.get("refused"):
        raise StalePlanError(
            f"{spec.name}: plan {plan_id} showed its apply refused ({row.report['refused']}). Nothing was applied: "
            f"fix the cause and make a new plan (`reprocess plan {spec.name}`).",
            pipeline=spec.name,
        )
    plan = store.load_ranges(conn, plan_id)

    def own(run: str) -> bool:  # the apply itself or one of its batches
        return parent_run_id(run) == run_id

    changed = []
    if row.applied_state == RunState.COMMITTED:
        changed.append(f"it was applied already by run {row.applied_run_id}")
    if row.spec_fingerprint != spec.fingerprint:
        changed.append(
            f"the spec changed (fingerprint {row.spec_fingerprint[:12]} at planning, {spec.fingerprint[:12]} now)"
        )
    others = [r for r in store.target_commits_since(conn, spec.name, row.target_commit or 0) if not own(r)]
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        changed.append(f"{len(others)} other run(s) committed to {spec.qualified_target} since ({shown})")
    if row.from_ledger:
        then = {(t, p): o for t, p, o in row.ledger}
        now = {
            (tp.topic, tp.partition): (offset, mover) for tp, (offset, mover) in ledger_movers(conn, spec.name).items()
        }
        changed += [f"the ledger of {t}[{p}] moved from {then.get((t, p))} to {o}" for (t, p), (o, mover) in
                    sorted(now.items()) if then.get((t, p)) != o and not own(mover)]  # fmt: skip
    starts = {(s.topic, s.partition): s.log_start for s in take_snapshot(kafka, spec, {r.topic for r in plan.ranges})}
    changed += [
        f"the log start of {r.topic}[{r.partition}] moved to {starts[(r.topic, r.partition)]}, past the plan's "
        f"start {r.start} (those records are gone)"
        for r in plan.ranges
        if r.width and starts.get((r.topic, r.partition), 0) > r.start
    ]
    if changed:
        raise StalePlanError(
            f"{spec.name}: plan {plan_id} is stale: {'; '.join(changed)}. Nothing was applied: make a new plan "
            f"(`reprocess plan {spec.name}` with the same range) and apply that one.",
            pipeline=spec.name,
        )
    return plan


def check_readings(conn: Connection, spec: PipelineSpec, run_id: str, readings: Mapping[str, str]) -> None:
    """Record how run ``run_id`` reads each Avro writer schema id; an apply whose plan read one of
    the plan's ids otherwise (the registry changed a default or an alias since) is stale.

    Raises
    ------
    StalePlanError
        Naming the schema ids; raised before the read, so nothing is staged.
    """
    conn.execute(_READINGS, {"run_id": run_id, "readings": json.dumps(dict(readings))})
    row = conn.execute(_PLAN_READINGS, {"run_id": run_id}).one_or_none()
    if row is None:  # not an apply
        return
    changed = sorted((row.avro_readings or {}).items() - readings.items())
    if changed:
        raise StalePlanError(
            f"{spec.name}: plan {row.plan_id} is stale: the Schema Registry changed how the records of schema id "
            f"{', '.join(sid for sid, _ in changed)} read the spec's fields since the plan (a default, an alias or a "
            f"deleted version). Nothing was applied: make a new plan (`reprocess plan {spec.name}` with the same "
            "range) and apply that one.",
            pipeline=spec.name,
            run_id=run_id,
        )


def apply_request(plan: RunRanges) -> RunRequest:
    """The backfill that reads exactly the plan's ranges (the form's offsets modes), its empty ones
    left out. A plan that reads nothing (the ledger at the log end) is applied as the empty run it
    showed, its ranges as they are: the run commits in its planning task and changes no row."""
    wide = [r for r in plan.ranges if r.width]
    return RunRequest.from_params(backfill_conf(wide or plan.ranges), RunKind.BACKFILL)


def mark_applied(conn: Connection, plan_id: str, run_id: str) -> None:
    conn.execute(_APPLIED, {"plan_id": plan_id, "run_id": run_id})
