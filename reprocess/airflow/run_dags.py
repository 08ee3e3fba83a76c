"""The backfill (manual, Params-driven) and incremental (scheduled) DAGs of a pipeline: both run
plan_offsets → spark_read_stage → commit_transaction → mirror_group_offsets → report. The first
three each evaluate the stages that name them (:class:`reprocess.core.tasks.Task`), and their docs
say which, per kind of run (:func:`reprocess.core.stages.task_doc`)."""

from __future__ import annotations

import logging
from typing import Any, cast

from airflow.sdk import DAG, Param, task

from reprocess.airflow.assets import PipelineAssets, run_event_task
from reprocess.airflow.common import (
    app_engine,
    default_args,
    dry_run_findings,
    epoch,
    kafka_config,
    pipeline_spark_task,
    registry_conn,
    topic_partition_params,
)
from reprocess.airflow.faults import pipeline_task
from reprocess.airflow.lineage import lineage_task
from reprocess.airflow.new_records import incremental_schedule
from reprocess.airflow.payloads import PlannedRun
from reprocess.core import names
from reprocess.core.choices import described, values
from reprocess.core.errors import RunStateError, SpecError
from reprocess.core.runs import (
    DEFAULT_END,
    DEFAULT_MODE,
    DEFAULT_START,
    HEALED_BY,
    PLAN_ID,
    RECHECK_WINDOW,
    EndMode,
    RunKind,
    RunMode,
    RunRequest,
    StartMode,
    window_text,
)
from reprocess.core.spec import PipelineSpec
from reprocess.core.stages import task_doc
from reprocess.core.tasks import Task

log = logging.getLogger(__name__)


def backfill_params(spec: PipelineSpec) -> dict[str, Param]:
    """The trigger form: what to replay, from where to where, and how."""
    offsets_help = 'JSON like `{"orders": {"0": 1200, "1": 900}}`; -2 = earliest, -1 = latest.'
    return {
        **topic_partition_params(
            spec,
            "What",
            "Topics to replay (all of the pipeline's topics by default).",
            "Partition numbers to replay; empty means every partition.",
        ),
        "start_mode": Param(
            DEFAULT_START.value,
            type="string",
            enum=values(StartMode),
            title="Start from",
            description=described(
                {
                    StartMode.EARLIEST: "log start",
                    StartMode.OFFSETS: "start_value JSON",
                    StartMode.TIMESTAMP: "first record at/after start_value",
                    StartMode.GROUP: "the consumer group's committed offsets",
                    StartMode.LEDGER: "the pipeline's committed position",
                }
            )
            + ".",
            section="Range",
        ),
        "start_value": Param(
            None,
            type=["null", "string"],
            title="Start value",
            description=f"For offsets: {offsets_help} For timestamp: RFC 3339, e.g. 2026-11-01T00:00:00Z.",
            section="Range",
        ),
        "end_mode": Param(
            DEFAULT_END.value,
            type="string",
            enum=values(EndMode),
            title="End at (exclusive)",
            description=described(
                {
                    EndMode.LATEST: "the log end when the run is planned",
                    EndMode.OFFSETS: "end_value JSON",
                    EndMode.TIMESTAMP: "first record at/after end_value",
                    EndMode.GROUP: "the consumer group's committed offsets",
                }
            )
            + ".",
            section="Range",
        ),
        "end_value": Param(
            None,
            type=["null", "string"],
            title="End value",
            description=f"For offsets: {offsets_help} For timestamp: RFC 3339.",
            section="Range",
        ),
        "allow_data_loss": Param(
            False,
            type="boolean",
            title="Allow data loss",
            description="When the start is below the log start (deleted segments), record the lost range and "
            "continue from the log start instead of failing.",
            section="Safety",
        ),
        "batch_size": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            title="Batch size",
            description=f"Max offsets per partition per batch; each batch commits on its own, so a failure "
            f"resumes after the last committed batch (spec default {spec.batch_size}).",
            section="Safety",
        ),
        "acknowledge_partition_change": Param(
            False,
            type="boolean",
            title="Acknowledge a partition, topic or ordering change",
            description="A topic's partition count changed, a topic was re-created, or the spec changed its "
            "topics or ordering since the last committed run, so stored rows may not compare with new records. "
            "Allowed only for pipelines ordered by a version/event-time column (and, for an ordering change, "
            "one every stored row holds); offset ordering compares offsets only within one partition.",
            section="Safety",
        ),
        "mode": Param(
            DEFAULT_MODE.value,
            type="string",
            enum=values(RunMode),
            title="Mode",
            description=described(
                {
                    RunMode.MERGE: "upsert the replayed records into the live table (newer records win; the same "
                    "record re-derives its row when the spec changed).",
                    RunMode.REBUILD: "write a complete new table from the log start into a shadow table (in batches, "
                    "resumable), verify it against Kafka and swap it in atomically with the ledger; the live table is "
                    "served meanwhile and kept under a dated name. Use it for changes that cannot be applied in place "
                    "(a type change, a new key, a dropped column).",
                },
                separator=" ",
            ),
            section="Safety",
        ),
        "heals_window": Param(
            None,
            type=["null", "string"],
            title="Heals reconciliation window",
            description="Set by a reconciliation's heal conf: the window `<start>/<end>` (RFC 3339) whose gap this "
            "backfill closes. Once it commits, the reconcile DAG checks that window again, and the calendar shows "
            "it healed by this run (the gap stays in its history).",
            section="Safety",
        ),
        "dry_run": Param(
            False,
            type="boolean",
            title="Dry run",
            description="Plan and store the ranges, show them, read and write nothing.",
            section="Safety",
        ),
        "preview": Param(
            False,
            type="boolean",
            title="Preview (plan)",
            description="Read the range as the run would and show, per partition and column, what it would insert, "
            "update, leave, refuse as older and delete, without writing (the run note and the coverage page's Plan "
            "view). Apply exactly that plan with its id in plan_id.",
            section="Safety",
        ),
        "plan_id": Param(
            None,
            type=["null", "string"],
            title="Apply plan",
            description="The id of a preview (or `reprocess plan`): read exactly its ranges. Refused, saying what "
            "changed, when the spec, the ledger or a log start moved or another run committed to the table since the "
            "plan, or when the plan showed a refusal; the range options are ignored, and preview, dry run and "
            "mode=rebuild are refused with it.",
            section="Safety",
        ),
    }


def _doc(spec: PipelineSpec, kind: RunKind) -> str:
    what = {
        RunKind.BACKFILL: "Replays a slice of the pipeline's topics, chosen in the trigger form, into the target.",
        RunKind.INCREMENTAL: "Moves the pipeline from its committed ledger position to the log end seen at the "
        "start of the run. A run with no new data succeeds at once without starting Spark.",
    }[kind]
    return f"""### {spec.name}: {kind.value}

{what}

{spec.description}

**Target** `{spec.qualified_target}` keyed by `{", ".join(spec.key)}`; newer wins by
`{spec.ordering.column or "Kafka offset within a partition"}`, so replays never overwrite newer rows.

**Flow**: `plan_offsets` snapshots log start/end and the group's offsets into Postgres, stores
the run's `[start, end)` per partition and migrates the table → `spark_read_stage` reads exactly
those offsets (read_committed), parses and validates them, keeps the newest record per key, COPYs
into a run-scoped stage → `commit_transaction` merges, inserts dead letters and advances the ledger
in ONE transaction (committing twice is a no-op) → `mirror_group_offsets` copies the ledger to the
consumer group `{spec.consumer_group}` → `report` writes the summary (XCom `return_value`).
A run wider than its batch size commits each batch in `spark_read_stage` and only sums them in
`commit_transaction`; a range with nothing to read commits in `plan_offsets`. Each task's doc lists
its stages for every kind of run.

Spec file: `{spec.source_file}`. Bookkeeping: schema `reprocess` (runs, run_ranges,
offset_snapshots, consumer_offsets, committed_ranges, dead_letters).
"""


def build_run_dag(spec: PipelineSpec, kind: RunKind, assets: PipelineAssets | None = None) -> DAG:
    """One DAG per (spec, kind); the tasks only call the library. With ``assets``, a committed run
    emits an asset event on the table (:mod:`reprocess.airflow.assets`)."""
    is_backfill = kind is RunKind.BACKFILL
    dag = DAG(
        dag_id=spec.dag_id(kind.value),
        description=f"{kind.value} of {', '.join(spec.topics)} into {spec.qualified_target}",
        doc_md=_doc(spec, kind),
        schedule=None if is_backfill else incremental_schedule(spec),
        start_date=None if is_backfill else epoch(),
        catchup=False,
        max_active_runs=1,
        tags=["reprocess", kind.value, *spec.tags],
        default_args=default_args(spec),
        params=backfill_params(spec) if is_backfill else {},
    )
    with dag:

        @pipeline_task(
            task_id=PlannedRun.TASK,
            doc_md="Snapshot offsets into Postgres, store the run's ranges, build its stages and run the first.\n\n"
            + task_doc(spec, Task.PLAN),
            registry_conn=registry_conn(spec),  # a dry run decodes a sample
            first_contact=True,
        )
        def plan_offsets(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
            from reprocess.core.ranges import ranges_to_rows
            from reprocess.core.stages import describe
            from reprocess.postgres.store import lost_dict
            from reprocess.runner.preview import start_apply
            from reprocess.runner.start import start_run

            run_key = names.run_key(dag.dag_id, run_id or "")
            engine = app_engine()
            try:
                request = RunRequest.from_params(params or {}, kind) if is_backfill else RunRequest.incremental()
            except SpecError as exc:  # recorded, so the run note says why, not only the task log
                from reprocess.postgres.store import record_failed_request

                record_failed_request(
                    engine, spec, kind, run_key, params, str(exc), dag_id=dag.dag_id, dag_run_id=run_id
                )
                raise
            # A dry run checks as `reprocess validate` does, first: its findings are in the log even when
            # planning then refuses (a table the spec cannot alter in place), and in the summary.
            findings = dry_run_findings(spec) if request.dry_run else []
            # An empty plan commits (a rebuild: swaps) here; an empty log still rebuilds by a swap.
            start: dict[str, Any] = {
                "dag_id": dag.dag_id, "dag_run_id": run_id, "params": params
            }  # fmt: skip
            if plan_id := (params or {}).get(PLAN_ID):  # exactly a stored plan's ranges, unless it is stale
                plan, stages = start_apply(engine, kafka_config(), spec, plan_id, run_key, **start)
            else:
                plan, stages = start_run(engine, kafka_config(), spec, request, run_key, **start)
            warnings = [*plan.warnings, *(f"validate: {f.render()}" for f in findings if f.severity != "ok")]
            return PlannedRun(
                run_id=run_key,
                ranges=ranges_to_rows(plan.ranges),
                lost=[lost_dict(x) for x in plan.lost],
                dry_run=request.dry_run,
                empty=plan.is_empty,
                batch_size=request.batch_size or spec.batch_size,
                warnings=warnings,
                mode=request.mode,
                stages=describe(stages),
                heals_window=window_text(*request.heals_window) if request.heals_window else None,
            ).to_xcom()

        @task.short_circuit(task_id="has_work", ignore_downstream_trigger_rules=False)
        def has_work(planned: dict[str, Any]) -> bool:
            """Dry runs and no-new-data runs stop here: Spark is never started for nothing."""
            plan = PlannedRun.from_xcom(planned)
            if plan.dry_run:
                log.info("dry run: planned ranges %s; nothing read or written", plan.ranges)
                return False
            if plan.empty:
                log.info("no new data since the last committed position; nothing to do")
                return False
            log.info("stages: %s", plan.stages)
            return True

        spark = pipeline_spark_task(
            spec,
            "spark_read_stage",
            "The run's reads (bounded read of its ranges, parse, dedupe, COPY into a stage) and a batched run's "
            "batches' commits: a Spark Connect client or spark-submit, as the spark_default connection's type says.\n\n"
            + task_doc(spec, Task.SPARK),
            "reprocess.runner.spark_run:read_job",
            f"reprocess-{spec.name}",
            {
                "run_id": "{{ " + PlannedRun.template("run_id") + " }}",
                "batch_size": "{{ " + PlannedRun.template("batch_size") + " }}",
            },
            lineage_target=spec.qualified_target,
        )

        @lineage_task(
            task_id="commit_transaction",
            doc_md="The run's own commit, in one transaction (a rebuild: verified, then swapped in; a preview: "
            "its diff, rolled back).\n\n" + task_doc(spec, Task.COMMIT),
            lineage_target=spec.qualified_target,
        )
        def commit_transaction(planned: dict[str, Any]) -> dict[str, Any]:
            from reprocess.core.stages import Diff, for_task
            from reprocess.postgres.commit import result_dict
            from reprocess.runner.evaluate import RunContext, evaluate
            from reprocess.runner.start import stored_stages

            plan, engine = PlannedRun.from_xcom(planned), app_engine()
            stages = for_task(stored_stages(engine, spec, plan.run_id, plan.batch_size), Task.COMMIT)
            result = evaluate(stages, RunContext(engine, spec))
            if result is None and stages and isinstance(stages[-1], Diff):  # a preview: its report is stored
                return {"plan_id": plan.run_id}
            if result is None:
                raise RunStateError(
                    f"{spec.name}: run {plan.run_id} has no commit left to do ({plan.stages})",
                    pipeline=spec.name,
                    run_id=plan.run_id,
                )
            return result_dict(result)

        @pipeline_task(
            task_id="mirror_group_offsets",
            doc_md="Copy the committed positions to the Kafka consumer group (for lag tools); idempotent.",
        )
        def mirror(planned: dict[str, Any]) -> dict[str, int]:
            from reprocess.operations.mirror import mirror_group_offsets

            return mirror_group_offsets(app_engine(), kafka_config(), spec)

        @pipeline_task(task_id="report", trigger_rule="none_failed", doc_md="Summary of the run from Postgres.")
        def report(planned: dict[str, Any]) -> dict[str, Any]:
            from reprocess.airflow import metrics
            from reprocess.operations.summary import format_summary, run_summary

            plan = PlannedRun.from_xcom(planned)
            summary = run_summary(
                app_engine(), spec.name, plan.run_id, spec=spec, dry_run=plan.dry_run, warnings=plan.warnings
            )
            log.info("run summary\n%s", format_summary(summary))
            metrics.emit_run(summary, kind.value)
            metrics.emit_lag(app_engine(), kafka_config(), spec, strict=False)
            return summary

        # An XComArg: Airflow hands each downstream task the dict plan_offsets returned.
        planned = cast(dict[str, Any], plan_offsets())
        gate = has_work(planned)
        committed = commit_transaction(planned)
        gate >> spark >> committed >> mirror(planned) >> report(planned)
        if assets is not None:
            committed >> run_event_task(spec, assets)(planned)
        if is_backfill:
            committed >> heals_a_window(planned) >> reconcile_healed_window(spec)
    return dag


@task.short_circuit(task_id="heals_a_window")
def heals_a_window(planned: dict[str, Any]) -> bool:
    """A backfill that heals a reconciliation window (``heals_window``) has it checked again once it committed."""
    return PlannedRun.from_xcom(planned).heals_window is not None


def reconcile_healed_window(spec: PipelineSpec) -> Any:
    """Trigger the reconcile DAG for the healed window, naming this run as the one that healed it."""
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

    return TriggerDagRunOperator(
        task_id="reconcile_healed_window",
        trigger_dag_id=spec.dag_id("reconcile"),
        conf={
            RECHECK_WINDOW: "{{ " + PlannedRun.template("heals_window") + " }}",
            HEALED_BY: "{{ " + PlannedRun.template("run_id") + " }}",
        },
        doc_md="The healed window, reconciled again: its calendar cell turns from gap to healed by this run.",
    )
