"""The reconciliation DAG of a pipeline: per data interval, prove the window's Kafka records
landed in Postgres; a recorded gap can heal itself through the backfill DAG."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final, cast

from airflow.sdk import DAG

from reprocess.airflow.assets import PipelineAssets, reconcile_event_task
from reprocess.airflow.common import app_engine, default_args, epoch, kafka_config, pipeline_spark_task
from reprocess.airflow.faults import pipeline_task
from reprocess.airflow.payloads import PlannedWindow
from reprocess.airflow.window_wait import UNREAD_WAIT, WAIT_TASK, WindowReadSensor, checked_window
from reprocess.core import names
from reprocess.core.errors import ReprocessError
from reprocess.core.ranges import BACKFILL_CONF_KEYS
from reprocess.core.runs import HEALS_WINDOW
from reprocess.core.spec import PipelineSpec
from reprocess.core.stages import describe
from reprocess.core.tasks import Task
from reprocess.core.window_stages import ReadWindow, SnapshotWindow, Verdicts, window_stages

log = logging.getLogger(__name__)

# Each stage of a window check (core.window_stages.window_stages) is one task of this DAG, named by the stage.
_STAGE_DOCS: Final[Mapping[type, str]] = {
    SnapshotWindow: "`SnapshotWindow`: the window's offset range per partition and this attempt's check id; drops "
    "the stages that earlier checks left when they failed.",
    ReadWindow: "`ReadWindow`: the window's newest record per key (the backfill's parse rules and Ordering) and "
    "every invalid record into the check's stage: the backfill's launcher (Spark Connect client or spark-submit).",
    Verdicts: "`Verdicts`: reconciliation's checks (reprocess.checks) over the stage, the target and the ledger in "
    "Postgres; one verdict per partition, with the kinds of gap found.",
}


def _heal_doc(spec: PipelineSpec) -> str:
    if spec.auto_heal:
        return (
            "(triggered automatically, `auto_heal: true`, with the conf stored on this run's gap rows; a run that "
            "fails for another reason, e.g. a broker timeout, records no gap and triggers nothing)"
        )
    return "(set `reconcile.auto_heal: true` in the spec to trigger it)"


def _stages_doc() -> str:
    """The stages of a window check (core.window_stages.window_stages), grouped by the task that runs each."""
    snapshot = SnapshotWindow("<check>", epoch(), epoch())
    return describe((snapshot, *window_stages(snapshot, ())))


def build_reconcile_dag(spec: PipelineSpec, assets: PipelineAssets | None = None) -> DAG:
    """Daily (per ``reconcile.cron``) proof that each window's Kafka records landed in Postgres; with
    ``assets``, a gap-free check emits an asset event on the table with its window and verdict."""
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
Its stages, one task each: `{_stages_doc()}`.
A window the incremental has not read to its end yet (the scheduler starts both DAGs on their own
schedules) is its lag, not a gap: `{WAIT_TASK}` waits for it without holding a worker slot, at most
{UNREAD_WAIT} past the window's end (then the check runs and says "not yet stable").
A gap fails the run with the exact ranges and the backfill conf that closes them
{_heal_doc(spec)}. Once that backfill commits, it triggers this DAG with conf
`{{"window": "<start>/<end>", "healed_by": "<its run>"}}`: the window is checked again, and the calendar
shows it healed by that run (the gap stays in `reprocess.reconciliation_history`); a gap found by that
check fails the run without healing again.
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

        @pipeline_task(task_id=Task.PLAN_WINDOW, first_contact=True, doc_md=_STAGE_DOCS[SnapshotWindow])
        def snapshot_window(data_interval_start: Any = None, data_interval_end: Any = None, run_id: str | None = None,
                        dag_run: Any = None) -> dict[str, Any]:  # fmt: skip
            import uuid

            from reprocess.core.runs import HEALED_BY
            from reprocess.postgres.stage import drop_leftover_check_stages
            from reprocess.runner.evaluate import RunContext, evaluate
            from reprocess.runner.window import WindowCheck

            conf = (dag_run.conf if dag_run is not None else None) or {}
            start, end = checked_window(dag_run, data_interval_start, data_interval_end)
            drop_leftover_check_stages(app_engine(), spec)
            # One id per attempt: the heal reads only what THIS check recorded, never a gap row
            # left by an earlier check of the same window or run.
            check_id = names.check_id(dag.dag_id, run_id or "", uuid.uuid4().hex[:12])
            snapshot = SnapshotWindow(check_id, start, end, conf.get(HEALED_BY) or None)
            check = WindowCheck(kafka=kafka_config())
            evaluate((snapshot,), RunContext(app_engine(), spec, window=check))
            return PlannedWindow.of(snapshot, check.ranges).to_xcom()

        def window(field: str) -> str:
            return "{{ " + PlannedWindow.template(field) + " }}"

        spark = pipeline_spark_task(
            spec, Task.SPARK_WINDOW, _STAGE_DOCS[ReadWindow], "reprocess.runner.window_job:window_job",
            f"reprocess-{spec.name}-reconcile",
            {"check_id": window("check_id"), "starting": window("starting"), "ending": window("ending")},
        )  # fmt: skip

        @pipeline_task(task_id=Task.RECONCILE, doc_md=_STAGE_DOCS[Verdicts])
        def reconcile(planned: dict[str, Any]) -> list[str]:
            from reprocess.airflow.metrics import emit_verdicts
            from reprocess.runner.evaluate import RunContext, evaluate
            from reprocess.runner.window import WindowCheck

            window = PlannedWindow.from_xcom(planned)
            check = WindowCheck()
            try:
                evaluate(window.stages()[1:], RunContext(app_engine(), spec, window=check))
            finally:  # a gap raises: its verdicts are sent too
                emit_verdicts(app_engine(), spec, window.check_id)
            return [f"{v.range}: {v.detail()}" for v in check.verdicts or []]

        waited = WindowReadSensor(
            task_id=WAIT_TASK,
            spec=spec,
            doc_md="Waits, holding no worker slot (reschedule mode), until the incremental has read the window "
            "(the ledger is past its end) and no open transaction holds it; at most "
            f"{UNREAD_WAIT} past the window's end, then the check runs anyway.",
        )
        planned = snapshot_window()
        checked = reconcile(cast(dict[str, Any], planned))
        waited >> planned >> spark >> checked
        if assets is not None:
            reconcile_event_task(spec, assets)(planned, checked)
        if spec.auto_heal:

            @pipeline_task(
                task_id="recorded_gap",
                trigger_rule="all_failed",
                doc_md="The backfill conf stored on this run's gap rows; skips the heal when none was recorded.",
            )
            def recorded_gap(ti: Any = None) -> dict[str, Any]:
                from airflow.sdk.exceptions import AirflowSkipException

                from reprocess.core.runs import window_text
                from reprocess.operations.reconcile import recorded_heal_conf

                planned = ti.xcom_pull(task_ids=PlannedWindow.TASK)
                if not planned:
                    raise AirflowSkipException("the window was never planned: nothing to heal")
                window = PlannedWindow.from_xcom(planned)
                if window.healed_by:  # a heal's own check: never heal again (no loop), the run fails
                    raise AirflowSkipException(f"the heal by {window.healed_by} left a gap; see reconcile's log")
                conf = recorded_heal_conf(app_engine(), spec, window.window_start, window.check_id)
                if conf is None:
                    raise AirflowSkipException("reconcile failed without recording a gap: nothing to heal")
                # gap rows stored before heals_window
                conf.setdefault(HEALS_WINDOW, window_text(window.window_start, window.window_end))
                log.info("healing the recorded gap with %s", conf)
                return conf

            heal = TriggerDagRunOperator(
                task_id="heal_with_backfill",
                trigger_dag_id=spec.dag_id("backfill"),
                conf={
                    k: "{{ ti.xcom_pull(task_ids='recorded_gap')['" + k + "'] }}"
                    for k in (*BACKFILL_CONF_KEYS, HEALS_WINDOW)
                },
            )

            @pipeline_task(
                task_id="check_failed",
                trigger_rule="one_failed",
                retries=0,
                doc_md="Keeps the run failed after a failed check: the heal runs after it, so it is not a leaf.",
            )
            def check_failed() -> None:
                raise ReprocessError(
                    f"{spec.name}: the reconcile task failed (its log and reprocess.reconciliations say why); "
                    "a gap it recorded, if any, was handed to the backfill DAG by heal_with_backfill",
                    pipeline=spec.name,
                )

            checked >> recorded_gap() >> heal
            [checked, heal] >> check_failed()
    return dag
