"""Runs the steps beyond runs (:mod:`tests.adversary.steps`) through the product, as its own tests
drive them: a rebuild through the run's stages and the evaluator (``plan_stage_commit``, the DAG's
path), a spec change by rewriting the spec file and re-deriving, a plan (``preview``) then
``start_apply``, a run whose commit never ran retried under the same run id (a cleared DAG run), a
row changed by SQL then the day's check over Spark Connect. Each step moves the oracle as the step
should; :func:`tests.adversary.driver.check` then compares. Like the driver, this imports the product.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from reprocess.core.errors import ReconciliationGap, StalePlanError
from reprocess.core.runs import RunMode, RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.core.stages import Task, for_task
from reprocess.operations.preview import load_report
from reprocess.postgres import store
from reprocess.runner.evaluate import RunContext, evaluate
from reprocess.runner.preview import start_apply
from reprocess.runner.start import start_run
from tests.adversary import driver, steps
from tests.adversary.model import Step
from tests.adversary.oracle import Oracle, interpret
from tests.adversary.values import Invalid
from tests.support.helpers import plan_stage_commit, reconcile_over_connect, run_spark_stage


def run_step(i: int, step: Step, engine: Engine, kafka: dict[str, Any], spec: PipelineSpec, oracle: Oracle,
             name: str) -> PipelineSpec:  # fmt: skip
    """Run step ``i`` and move the oracle; returns the spec in force after it (a spec change's new one)."""
    run_id = f"{name}-{i}"
    if step.kind == "rebuild":
        _rebuild(engine, kafka, spec, oracle, step.batch_size, run_id)
    elif step.kind == "spec_change":
        oracle.pipeline = steps.after_change(oracle.pipeline, step.change)
        spec = driver.spec_for(oracle.pipeline, name)
        if step.change[0] == "tombstones":  # a decoding change: refused in place, a rebuild takes it
            _rebuild(engine, kafka, spec, oracle, step.batch_size, run_id)
        else:
            _run(i, step, engine, kafka, spec, oracle, run_id)
    elif step.kind == "plan_apply":
        spec = _plan_apply(i, step, engine, kafka, spec, oracle, name)
    elif step.kind == "kill_retry":
        _kill_retry(i, step, engine, kafka, spec, oracle, run_id)
    elif step.kind == "corrupt_reconcile":
        _corrupt_reconcile(i, step, engine, kafka, spec, oracle, name)
    else:
        raise AssertionError(step.kind)
    return spec


def _run(i: int, step: Step, engine: Engine, kafka: dict[str, Any], spec: PipelineSpec, oracle: Oracle,
         run_id: str, **changes: Any) -> None:  # fmt: skip
    """One whole run of the step's base kind (``changes``: the request's other fields)."""
    ranges = oracle.ranges(step)
    request = dataclasses.replace(driver.request_for(_as_run(step), oracle, ranges), **changes)
    try:
        plan_stage_commit(engine, kafka, spec, request, run_id)
    except Exception as exc:
        raise driver.Mismatch(i, step.kind, "the run", "committed", f"{type(exc).__name__}: {exc}") from exc
    oracle.apply(ranges)


def _as_run(step: Step) -> Step:
    return dataclasses.replace(step, kind=steps.base_kind(step))


def _rebuild(engine: Engine, kafka: dict[str, Any], spec: PipelineSpec, oracle: Oracle, size: int | None,
             run_id: str) -> None:  # fmt: skip
    """A rebuild of everything into the shadow, batched by ``size``, verified and swapped."""
    ranges = oracle.ranges(Step("rebuild"))
    request = RunRequest.from_params({"mode": RunMode.REBUILD.value, **({"batch_size": size} if size else {})})
    try:
        plan_stage_commit(engine, kafka, spec, request, run_id)
    except Exception as exc:
        raise driver.Mismatch(-1, "rebuild", "the rebuild", "swapped", f"{type(exc).__name__}: {exc}") from exc
    oracle.apply(ranges)


def _counts(engine: Engine, run_id: str) -> dict[str, int]:
    with engine.connect() as conn:
        row = store.committed_counts(conn, run_id)
    return {k: getattr(row, k) or 0 for k in store.RUN_COUNTS}


def _plan_apply(i: int, step: Step, engine: Engine, kafka: dict[str, Any], spec: PipelineSpec, oracle: Oracle,
                name: str) -> PipelineSpec:  # fmt: skip
    """Plan the step's run, do what ``change[1]`` says in between, apply. The oracle: the apply is
    refused exactly when another run read records into the target since the plan or the spec
    changed; else it commits the plan's ranges and its counts are the plan's."""
    plan_id, ranges = f"{name}-{i}-plan", oracle.ranges(step)
    request = dataclasses.replace(driver.request_for(_as_run(step), oracle, ranges), preview=True)
    try:
        plan_stage_commit(engine, kafka, spec, request, plan_id)
    except Exception as exc:
        raise driver.Mismatch(i, step.kind, "the plan", "made", f"{type(exc).__name__}: {exc}") from exc
    with engine.connect() as conn:
        report = load_report(conn, plan_id)
    if report is None:
        raise driver.Mismatch(i, step.kind, "the plan's report", "stored", None)

    between, stale = step.change[1], False
    if between == "catch_up":
        catch_up = Step("catch_up")
        stale = any(s < e for s, e in oracle.ranges(catch_up).values())
        _run(i, catch_up, engine, kafka, spec, oracle, f"{name}-{i}-between")
    elif between == "tombstones":
        switch = steps.after_change(oracle.pipeline, ("tombstones", _other_rule(oracle.pipeline.tombstones)))
        oracle.pipeline, spec, stale = switch, driver.spec_for(switch, name), True

    apply_id = f"{name}-{i}-apply"
    try:
        _, stages = start_apply(engine, kafka, spec, plan_id, apply_id)  # one that reads nothing: an empty run
        refused = None
    except StalePlanError as exc:
        refused = str(exc)
    except Exception as exc:
        wanted = "refused as stale" if stale else "started"
        raise driver.Mismatch(
            i, step.kind, f"the apply after {between}", wanted, f"{type(exc).__name__}: {exc}"
        ) from exc
    if stale != (refused is not None):
        raise driver.Mismatch(i, step.kind, f"the apply after {between}", "refused as stale" if stale else "applied",
                              refused or "applied")  # fmt: skip
    if refused is None:
        if for_task(stages, Task.SPARK):
            run_spark_stage(spec, apply_id, kafka=kafka)
            evaluate(for_task(stages, Task.COMMIT), RunContext(engine, spec))
        oracle.apply(ranges)
        if _counts(engine, apply_id) != report["apply"]:
            raise driver.Mismatch(i, step.kind, "the apply's counts", report["apply"], _counts(engine, apply_id))
    if between == "tombstones":  # the switch is a decoding change: a rebuild takes it
        _rebuild(engine, kafka, spec, oracle, None, f"{name}-{i}-rebuild")
    return spec


def _other_rule(rule: str) -> str:
    return "dead_letter" if rule == "delete" else "delete"


def _kill_retry(i: int, step: Step, engine: Engine, kafka: dict[str, Any], spec: PipelineSpec, oracle: Oracle,
                run_id: str) -> None:  # fmt: skip
    """The run's task dies after its Spark stage, before its commit; the DAG run is cleared: planned
    again under the same run id, staged again, committed."""
    ranges = oracle.ranges(step)
    request = driver.request_for(_as_run(step), oracle, ranges)
    if step.batch_size:
        request = dataclasses.replace(request, batch_size=step.batch_size)
    try:
        _, stages = start_run(engine, kafka, spec, request, run_id)
        if for_task(stages, Task.SPARK):
            run_spark_stage(spec, run_id, kafka=kafka, batch_size=request.batch_size)
        plan_stage_commit(engine, kafka, spec, request, run_id)  # the retry: every stage again
    except Exception as exc:
        raise driver.Mismatch(i, step.kind, "the retried run", "committed", f"{type(exc).__name__}: {exc}") from exc
    oracle.apply(ranges)


# How to change a value so it differs, per type (else NULL, where the column may be NULL).
_INT = "CASE WHEN {c} > 0 THEN {c} - 1 ELSE coalesce({c}, 0) + 1 END"
_CHANGED = {"text": "coalesce({c}, '') || 'x'", "bigint": _INT, "integer": _INT, "smallint": _INT,
            "boolean": "NOT coalesce({c}, false)"}  # fmt: skip


def _corrupt(engine: Engine, spec: PipelineSpec, oracle: Oracle, how: str) -> None:
    """One row changed by SQL, lineage untouched: a value changed (``update``), a row gone
    (``delete``), or a row brought back for a key whose newest record is a delete (``insert``)."""
    p, table = oracle.pipeline, spec.qualified_target
    found = driver.target(engine, spec, p)
    if not found:
        return
    key = sorted(found, key=repr)[0]
    where = " AND ".join(f'"{c.name}" = CAST(:k{n} AS {c.sql_type})' for n, c in enumerate(p.key))
    bound = {f"k{n}": _pg_text(v) for n, v in enumerate(key)}
    with engine.begin() as conn:
        if how == "delete":
            conn.execute(text(f"DELETE FROM {table} WHERE {where}"), bound)
        elif how == "update":
            for c in p.columns[len(p.key) :]:
                value = found[key][c.name]
                sql = _CHANGED.get(c.type) or ("NULL" if not c.required and value is not None else None)
                if c.name != p.ordering and sql:
                    conn.execute(text(f'UPDATE {table} SET "{c.name}" = {sql.format(c=chr(34) + c.name + chr(34))} '
                                      f"WHERE {where}"), bound)  # fmt: skip
                    return
        elif how == "insert":
            gone = sorted(_deleted_keys(oracle) - set(found), key=repr)
            if gone:  # a copy of a row (lineage and all) under the deleted key
                names = conn.execute(text(_COLUMNS), {"s": spec.target_schema, "t": spec.target_table}).scalars()
                keyed = {c.name: f"CAST(:g{n} AS {c.sql_type})" for n, c in enumerate(p.key)}
                select = ", ".join(keyed.get(n, f'"{n}"') for n in names)
                again = {f"g{n}": _pg_text(v) for n, v in enumerate(gone[0])}
                conn.execute(text(f"INSERT INTO {table} SELECT {select} FROM {table} WHERE {where}"), bound | again)


_COLUMNS = (
    "SELECT column_name FROM information_schema.columns WHERE table_schema = :s AND table_name = :t "
    "ORDER BY ordinal_position"
)


def _deleted_keys(oracle: Oracle) -> set[Any]:
    """Keys read whose newest event is a delete (a tombstone's key without a row)."""
    deleted = set()
    for x in oracle.read():
        found = interpret(oracle.pipeline, x.record)
        if not isinstance(found, Invalid) and found[0] == "delete":
            deleted.add(found[1])
    return deleted - set(oracle.rows())


def _pg_text(v: Any) -> str:
    return str(v[1]) if isinstance(v, tuple) else str(v)


def _corrupt_reconcile(i: int, step: Step, engine: Engine, kafka: dict[str, Any], spec: PipelineSpec,
                       oracle: Oracle, name: str) -> None:  # fmt: skip
    """``change[0]``: update, delete, insert or nothing; then the day's check over every record (the
    ledger is at the log end). Not ok exactly when the table then differs from the oracle; then the
    heal (a backfill of what was read) and the check again: ok."""
    _corrupt(engine, spec, oracle, step.change[0])
    differs = _differs(engine, spec, oracle)
    for attempt in ("check", "heal"):
        if attempt == "heal":
            _run(i, Step("replay_all"), engine, kafka, spec, oracle, f"{name}-{i}-heal")
            differs = False
        start = datetime.now(UTC) - timedelta(days=1)
        try:
            reconcile_over_connect(engine, spec, start, datetime.now(UTC), f"{name}-{i}-{attempt}")
            ok = True
        except ReconciliationGap:
            ok = False
        if ok == differs:
            raise driver.Mismatch(i, step.kind, f"the day's check ({attempt}) after {step.change[0]}",
                                  "not ok" if differs else "ok", "ok" if ok else "not ok")  # fmt: skip


def _differs(engine: Engine, spec: PipelineSpec, oracle: Oracle) -> bool:
    try:
        driver.check(-1, Step("corrupt_reconcile"), engine, spec, oracle, None)
    except driver.Mismatch:
        return True
    return False
