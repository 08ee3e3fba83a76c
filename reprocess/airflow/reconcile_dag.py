"""The reconciliation DAG of a pipeline: per data interval, prove the window's Kafka records
landed in Postgres; a recorded gap can heal itself through the backfill DAG."""

from __future__ import annotations

import logging
from typing import Any, cast

from airflow.sdk import DAG, task

from reprocess.airflow.common import app_engine, default_args, epoch, kafka_config, pipeline_spark_task
from reprocess.core.errors import ReprocessError
from reprocess.core.ranges import BACKFILL_CONF_KEYS
from reprocess.core.spec import PipelineSpec

log = logging.getLogger(__name__)


def _heal_doc(spec: PipelineSpec) -> str:
    if spec.auto_heal:
        return (
            "(triggered automatically, `auto_heal: true`, with the conf stored on this run's gap rows; a run that "
            "fails for another reason, e.g. a broker timeout, records no gap and triggers nothing)"
        )
    return "(set `reconcile.auto_heal: true` in the spec to trigger it)"


def build_reconcile_dag(spec: PipelineSpec) -> DAG:
    """Daily (per ``reconcile.cron``) proof that each window's Kafka records landed in Postgres."""
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
    from airflow.sdk import CronDataIntervalTimetable

    dag = DAG(
        dag_id=spec.dag_id("reconcile"),
        description=f"reconcile {', '.join(spec.topics)} with {spec.qualified_target} per window",
        doc_md=f"""### {spec.name}: reconcile

For each data interval `[data_interval_start, data_interval_end)` (a real window:
`CronDataIntervalTimetable("{spec.reconcile_cron}")`), resolves the window's offsets per partition from
the records' timestamps, then checks that (a) every offset is inside a committed range of the ledger
and (b) every key's newest valid record of the window is in `{spec.qualified_target}` or superseded
(dead letters are accounted for). One `reprocess.reconciliations` row per partition holds the verdict.
A gap fails the run with the exact ranges and the backfill conf that closes them
{_heal_doc(spec)}.
Past days: `airflow backfill create --dag-id {spec.dag_id("reconcile")} --from-date … --to-date …`.
""",
        schedule=CronDataIntervalTimetable(spec.reconcile_cron, timezone="UTC"),
        start_date=epoch(),
        catchup=False,
        max_active_runs=1,
        tags=["reprocess", "reconcile", *spec.tags],
        default_args=default_args(spec),
    )
    with dag:

        @task(
            task_id="plan_window",
            doc_md="The window's offset range per partition and this attempt's check id; drops the stages that "
            "earlier checks left when they failed.",
        )
        def plan_window(
            data_interval_start: Any = None, data_interval_end: Any = None, run_id: str | None = None
        ) -> dict[str, str]:
            import uuid

            from reprocess.core.ranges import offsets_json
            from reprocess.operations.reconcile import plan_window as window_of
            from reprocess.postgres.stage import drop_leftover_check_stages

            drop_leftover_check_stages(app_engine(), spec)
            ranges = window_of(kafka_config(), spec, data_interval_start, data_interval_end)
            # One id per attempt: the heal reads only what THIS check recorded, never a gap row
            # left by an earlier check of the same window or run.
            check_id = f"{dag.dag_id}/{run_id}/{uuid.uuid4().hex[:12]}"
            return {
                "check_id": check_id,
                "starting": offsets_json(ranges, "start"),
                "ending": offsets_json(ranges, "end"),
            }

        def window(field: str) -> str:
            return "{{ ti.xcom_pull(task_ids='plan_window')['" + field + "'] }}"

        spark = pipeline_spark_task(
            spec,
            "spark_window_stage",
            "The window's newest record per key (the backfill's parse rules and Ordering) and every invalid "
            "record into the check's stage: the backfill's launcher (Spark Connect client or spark-submit).",
            "reprocess.spark.job:window_job",
            f"reprocess-{spec.name}-reconcile",
            {"check_id": window("check_id"), "starting": window("starting"), "ending": window("ending")},
        )

        @task(
            task_id="reconcile",
            doc_md="Anti-join the staged newest records with the target and the ledger in Postgres; record verdicts.",
        )
        def reconcile(
            window: dict[str, str], data_interval_start: Any = None, data_interval_end: Any = None
        ) -> list[str]:
            from reprocess.core.ranges import window_ranges
            from reprocess.operations.reconcile import record_verdicts

            ranges = window_ranges(window["starting"], window["ending"])
            verdicts = record_verdicts(
                app_engine(), spec, ranges, data_interval_start, data_interval_end, window["check_id"]
            )
            return [f"{v.range}: {v.detail()}" for v in verdicts]

        planned = plan_window()
        checked = reconcile(cast(dict[str, str], planned))
        planned >> spark >> checked
        if spec.auto_heal:

            @task(
                task_id="recorded_gap",
                trigger_rule="all_failed",
                doc_md="The backfill conf stored on this run's gap rows; skips the heal when none was recorded.",
            )
            def recorded_gap(data_interval_start: Any = None, ti: Any = None) -> dict[str, Any]:
                from airflow.sdk.exceptions import AirflowSkipException

                from reprocess.operations.reconcile import recorded_heal_conf

                check_id = (ti.xcom_pull(task_ids="plan_window") or {}).get("check_id")
                conf = recorded_heal_conf(app_engine(), spec, data_interval_start, check_id) if check_id else None
                if conf is None:
                    raise AirflowSkipException("reconcile failed without recording a gap: nothing to heal")
                log.info("healing the recorded gap with %s", conf)
                return conf

            heal = TriggerDagRunOperator(
                task_id="heal_with_backfill",
                trigger_dag_id=spec.dag_id("backfill"),
                conf={k: "{{ ti.xcom_pull(task_ids='recorded_gap')['" + k + "'] }}" for k in BACKFILL_CONF_KEYS},
            )

            @task(
                task_id="check_failed",
                trigger_rule="one_failed",
                retries=0,
                doc_md="Keeps the run failed after a failed check: the heal runs after it, so it is not a leaf.",
            )
            def check_failed() -> None:
                raise ReprocessError(
                    f"{spec.name}: the reconcile task failed (its log and reprocess.reconciliations say why); "
                    "a gap it recorded, if any, was handed to the backfill DAG by heal_with_backfill"
                )

            checked >> recorded_gap() >> heal
            [checked, heal] >> check_failed()
    return dag
