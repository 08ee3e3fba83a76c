"""The audit DAG of a pipeline (``reprocess_<pipeline>_audit``): on ``audit.cron`` (weekly by default), the
whole table against the whole retained log (:mod:`reprocess.operations.audit`), as ``reprocess audit`` does;
with ``audit.auto_heal`` it heals what it finds. Its id is the audit's, so the run note shows its verdict."""

from __future__ import annotations

from typing import Any, Final, cast

from airflow.sdk import DAG

from reprocess.airflow.common import app_engine, default_args, epoch, kafka_config, pipeline_spark_task
from reprocess.airflow.faults import pipeline_task
from reprocess.core import names
from reprocess.core.errors import ReprocessError
from reprocess.core.spec import PipelineSpec

SNAPSHOT_TASK: Final = "snapshot_audit"
SPARK_TASK: Final = "spark_audit_stage"
JUDGE_TASK: Final = "audit"


def _heal_doc(spec: PipelineSpec) -> str:
    if spec.audit_auto_heal:
        return (
            "`audit.auto_heal: true`: the rows found are healed in the same transaction (a run "
            "`<audit id>-heal` of kind `audit heal`, ledger untouched) and the run succeeds, its note saying what "
            "was healed"
        )
    return (
        "the run fails, its note saying what differs; heal with `reprocess audit "
        f"{spec.name} --heal` (or set `audit.auto_heal: true`)"
    )


def build_audit_dag(spec: PipelineSpec) -> DAG:
    """The pipeline's audit DAG: snapshot the audited ranges, stage them on Spark, judge (and heal) in Postgres."""
    from airflow.sdk import CronTriggerTimetable

    dag = DAG(
        dag_id=spec.dag_id("audit"),
        description=f"audit every row of {spec.qualified_target} against the whole retained log",
        doc_md=f"""### {spec.name}: audit

Is every row of `{spec.qualified_target}` what the log says it should be? On `{spec.audit_cron}`, re-derives
the newest record per key from each partition's log start to the ledger through the live spec (Spark, as a
run derives it; Debezium left-out values resolved from the key's earlier records) and compares it with every
row of the table in PostgreSQL, under the daily reconciliation's rules. It counts, apart: rows that
**differ** (columns and examples), **missing** rows, rows that **must not be** (deleted, or produced by no
record), and **unprovable** rows (their record lies below the log start or on a compacted topic). The
daily check reads only its window; this reads the whole table.
Nothing but counts and a few examples leaves PostgreSQL. When something differs, {_heal_doc(spec)}.
Unprovable rows are listed, never healed. `reprocess status` and the coverage page show the last audit.
""",
        schedule=CronTriggerTimetable(spec.audit_cron, timezone="UTC"),
        start_date=epoch(),
        catchup=False,
        max_active_runs=1,
        tags=["reprocess", "audit", *spec.tags],
        default_args=default_args(spec),
    )
    with dag:

        @pipeline_task(
            task_id=SNAPSHOT_TASK, first_contact=True,
            doc_md="Each partition's log start and the ledger: the audited ranges; the topics that compact.",
        )  # fmt: skip
        def snapshot_audit(run_id: str | None = None) -> dict[str, Any]:
            from reprocess.operations.audit import snapshot_audit

            audited = snapshot_audit(app_engine(), kafka_config(), spec)
            return {"audit_id": names.run_key(dag.dag_id, run_id or ""), **audited.to_xcom()}

        def planned(field: str) -> str:
            return "{{ ti.xcom_pull(task_ids='" + SNAPSHOT_TASK + "')['" + field + "'] }}"

        spark = pipeline_spark_task(
            spec, SPARK_TASK,
            "The newest record per key of the audited ranges into the audit's stage: the window check's own job.",
            "reprocess.runner.window_job:window_job", f"reprocess-{spec.name}-audit",
            {"check_id": planned("audit_id"), "starting": planned("starting"), "ending": planned("ending"),
             "bisect": "true"},
        )  # fmt: skip

        @pipeline_task(task_id=JUDGE_TASK, doc_md="Every row against the stage, in Postgres; heals with auto_heal.")
        def audit(plan: dict[str, Any]) -> dict[str, Any]:
            from reprocess.operations.audit import AuditRanges, judge_audit

            report = judge_audit(
                app_engine(), spec, plan["audit_id"], AuditRanges.from_xcom(plan), heal=spec.audit_auto_heal
            )
            if report.verdict == "differences" and report.heal_run is None:
                raise ReprocessError(
                    f"{spec.name}: audit {report.audit_id} found {report.counts}; heal with `reprocess audit "
                    f"{spec.name} --heal`",
                    pipeline=spec.name,
                )
            return report.as_dict()

        plan = snapshot_audit()
        plan >> spark >> audit(cast(dict[str, Any], plan))
    return dag
