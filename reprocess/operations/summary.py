"""A run's summary: what was planned, read, upserted, dead-lettered, lost and committed."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine

from reprocess.core.spec import PipelineSpec
from reprocess.operations.coverage import partitions
from reprocess.operations.plan_report import format_plan, plan_line
from reprocess.operations.preview import load_report
from reprocess.postgres import queries
from reprocess.postgres.evolve import live_version, stale_message, stale_rows
from reprocess.postgres.ledger import ledger_positions


def run_summary(
    engine: Engine, pipeline: str, run_id: str, *, spec: PipelineSpec | None = None, **extra: Any
) -> dict[str, Any]:
    """Built from Postgres alone, so it states what is durably true, not what a task believed.

    With ``spec``, it also says which rows of the target an older spec version derived.
    ``extra`` (e.g. ``dry_run``, ``warnings``) is stored with it.
    """
    with engine.begin() as conn:
        if spec is not None and (version := live_version(conn, spec)) is not None:
            stale = stale_rows(conn, spec, version)
            extra = {**extra, "spec_version": version, "stale_rows": {str(k): n for k, n in stale.items()},
                     "stale_message": stale_message(stale, version)}  # fmt: skip
        run = conn.execute(queries.RUN_COUNTS, {"run_id": run_id}).one()
        ranges = [
            {"topic": r.topic, "partition": r.partition, "start": r.start_offset, "end": r.end_offset}
            for r in conn.execute(queries.RUN_RANGES, {"run_id": run_id})
        ]
        ledger = [
            {"topic": tp.topic, "partition": tp.partition, "next_offset": offset}
            for tp, offset in sorted(ledger_positions(conn, pipeline).items())
        ]
        summary = {
            "run_id": run_id,
            "pipeline": pipeline,
            "state": run.state,
            "planned_ranges": ranges,
            "records_read": run.records_read or 0,
            "rows_upserted": run.rows_upserted or 0,
            "rows_inserted": run.rows_inserted or 0,
            "rows_rederived": run.rows_rederived or 0,
            "rows_newer": (run.rows_upserted or 0) - (run.rows_inserted or 0) - (run.rows_rederived or 0),
            "rows_deleted": run.rows_deleted or 0,
            "records_filtered": run.records_filtered or 0,
            "rows_restamped": run.rows_restamped or 0,
            "values_incomplete": run.values_incomplete or 0,
            # Found in this run's records vs stored now: a replay finds dead letters an earlier run stored.
            "dead_letters": run.dead_letters or 0,
            "dead_letters_new": run.dead_letters_new or 0,
            "lost_ranges": run.lost_ranges or [],
            "committed_offsets": ledger,
            # Partitions whose last stable offset an open transaction holds below the high watermark.
            "held": [held for x in partitions(conn, [pipeline]) if (held := x.held_text())],
            "wall_seconds": round(float(run.seconds), 1),
            "error": run.error,
            **extra,
        }
        if (plan := load_report(conn, run_id)) is not None:  # a plan (reprocess plan, the form's preview)
            summary["plan"] = plan
        conn.execute(queries.SET_SUMMARY, {"run_id": run_id, "summary": json.dumps(summary)})
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    """Markdown for the run note and the demo's console output."""
    lines = [
        f"**{summary['pipeline']}** run `{summary['run_id']}`: **{summary['state']}** in {summary['wall_seconds']} s",
        "",
        f"- records read: {summary['records_read']} ({summary.get('records_filtered', 0)} filtered out by where)",
        f"- rows upserted: {summary['rows_upserted']} ({_kinds(summary)})",
        f"- rows deleted by tombstones: {summary.get('rows_deleted', 0)}",
        f"- rows the current spec version derived to the same values (restamped, _updated_at kept): "
        f"{summary.get('rows_restamped', 0)}",
        f"- dead letters: {summary['dead_letters']} found in this run, {summary.get('dead_letters_new', 0)} "
        "newly stored",
        *(
            [
                f"- incomplete values (left out by the connector, known nowhere; reprocess.incomplete_values): "
                f"{summary['values_incomplete']}"
            ]
            if summary.get("values_incomplete")
            else []
        ),
        f"- lost ranges: {summary['lost_ranges'] or 'none'}",
        *(f"- {held}" for held in summary.get("held", ())),
        *(
            [f"- spec v{summary['spec_version']}: {summary.get('stale_message') or 'every row derived by it'}"]
            if "spec_version" in summary
            else []
        ),
        "",
        "| topic | partition | planned [start, end) | committed next offset |",
        "|---|---|---|---|",
    ]
    ledger = {(x["topic"], x["partition"]): x["next_offset"] for x in summary["committed_offsets"]}
    for r in summary["planned_ranges"]:
        lines.append(
            f"| {r['topic']} | {r['partition']} | [{r['start']}, {r['end']}) | "
            f"{ledger.get((r['topic'], r['partition']), '-')} |"
        )
    if summary.get("plan"):
        lines += ["", format_plan(summary["plan"])]
    if summary.get("error"):
        lines += ["", f"error: {summary['error']}"]
    return "\n".join(lines)


def format_note(summary: dict[str, Any] | None, state: str, error: str | None) -> str:
    """A compact run note (the UI caps notes at 1000 characters)."""
    if not summary:
        return f"reprocess run {state}" + (f": {error}" if error else "")
    ranges = ", ".join(f"{r['topic']}[{r['partition']}] [{r['start']},{r['end']})" for r in summary["planned_ranges"])
    lost = summary["lost_ranges"] or "none"
    head = "DRY RUN (nothing read or written)" if summary.get("dry_run") else summary["state"]
    if summary.get("plan"):
        plan = summary["plan"]
        return (f"**PLAN `{plan['plan_id']}` (nothing written)** · {plan_line(plan)} · apply it: "
                f"`reprocess apply {plan['plan_id']}` or the backfill form's plan_id\n\nranges: {ranges}")  # fmt: skip
    return (
        f"**{head}** · {summary['records_read']} records read ({summary.get('records_filtered', 0)} filtered) · "
        f"{summary['rows_upserted']} rows upserted "
        f"({_kinds(summary)}) · {summary.get('rows_deleted', 0)} rows deleted · "
        f"{summary['dead_letters']} dead letters found ({summary.get('dead_letters_new', 0)} new) · "
        f"lost: {lost} · {summary['wall_seconds']} s"
        + (f" · {summary['stale_message']}" if summary.get("stale_message") else "")
        + "".join(f" · {held}" for held in summary.get("held", ()))
        + "\n\n"
        f"ranges: {ranges}" + (f"\n\nerror: {error}" if error else "")
    )


def _kinds(summary: dict[str, Any]) -> str:
    """What the upserted rows were: new keys, newer records, rows re-derived from the same record."""
    return (
        f"{summary.get('rows_inserted', 0)} new, {summary.get('rows_newer', 0)} newer, "
        f"{summary.get('rows_rederived', 0)} re-derived"
    )


def failure_text(task_id: str, error: BaseException) -> str:
    """A failed task's error as a run records it: the error kind, where, the reason and the fix.

    The product's own errors say their fix; any other exception is not one the product raises on
    purpose, so its fix is to read the task's log.

    Examples
    --------
    >>> from reprocess.core.errors import SparkConnectError
    >>> failure_text("spark_read_stage", SparkConnectError("no server at h:1. Start it."))
    'SparkConnectError at spark_read_stage: no server at h:1. Start it.'
    >>> failure_text("plan_offsets", KeyError("x")).split(" (")[0]
    "KeyError at plan_offsets: 'x'"
    """
    from reprocess.core.errors import ReprocessError

    text = f"{type(error).__name__} at {task_id}: {error}"
    if isinstance(error, ReprocessError):
        return text
    return (
        f"{text} (not an error reprocess raises on purpose; fix: read the task log of {task_id}, fix the cause, "
        "then clear the task)"
    )
