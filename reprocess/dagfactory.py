"""Airflow DAGs generated from pipeline specs (with ``sparktask``, the only modules that import Airflow).

Each spec yields ``reprocess_<pipeline>_backfill`` (manual, Params-driven) and
``reprocess_<pipeline>_incremental`` (scheduled). Both run the same flow:
plan_offsets → spark_read_stage → commit_transaction → report.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, Final, cast

from airflow.sdk import DAG, Connection, ExceptionRetryPolicy, Param, RetryAction, RetryRule, task

from reprocess.errors import DataLossError, FencedRunError, ReconciliationGap, ReprocessError, SpecError
from reprocess.ranges import BACKFILL_CONF_KEYS
from reprocess.runs import RunKind, RunRequest
from reprocess.sparktask import SPARK_CONN_ID, SparkJobOperator
from reprocess.spec import PipelineSpec

log = logging.getLogger(__name__)

DB_CONN_ID: Final = "reprocess_db"
KAFKA_CONN_ID: Final = "kafka_default"
SPARK_POOL: Final = "spark"

# Validation and fencing errors fail at once: retrying cannot change the answer.
RETRY_POLICY: Final = ExceptionRetryPolicy(
    rules=[
        RetryRule(exception=SpecError, action=RetryAction.FAIL, reason="invalid request or spec"),
        RetryRule(exception=DataLossError, action=RetryAction.FAIL, reason="data loss needs a decision"),
        RetryRule(exception=FencedRunError, action=RetryAction.FAIL, reason="fenced by another run"),
        RetryRule(exception=ReconciliationGap, action=RetryAction.FAIL, reason="a gap needs a backfill, not a retry"),
    ]
)


def default_args(spec: PipelineSpec) -> dict[str, Any]:
    return {
        "owner": spec.owner,
        "retries": 2,
        "retry_delay": timedelta(seconds=30),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(minutes=10),
        "retry_policy": RETRY_POLICY,
    }


def _engine() -> Any:
    from reprocess.db import make_engine, migrate

    engine = make_engine(Connection.get(DB_CONN_ID).get_uri())
    migrate(engine)
    return engine


def _kafka_config() -> dict[str, Any]:
    config = dict(Connection.get(KAFKA_CONN_ID).extra_dejson)
    if not config.get("bootstrap.servers"):
        raise SpecError(f"connection {KAFKA_CONN_ID} must set 'bootstrap.servers' in its extra")
    return config


def _spark_task(
    spec: PipelineSpec, task_id: str, doc_md: str, job: str, name: str, args: dict[str, str]
) -> SparkJobOperator:
    """A pipeline's Spark task: ``job`` gets the spec, ``args`` and the DB and Kafka connections
    as secrets, on the ``spark_default`` launcher and in the Spark pool."""
    return SparkJobOperator(
        task_id=task_id,
        doc_md=doc_md,
        job=job,
        conn_id=SPARK_CONN_ID,
        name=name,
        pool=SPARK_POOL,
        args={"spec": spec.source_file, **args},
        secrets={
            "db_url": "{{ conn." + DB_CONN_ID + ".get_uri() }}",
            "kafka_config": "{{ conn." + KAFKA_CONN_ID + ".extra }}",
        },
    )


def _topic_partition_params(
    spec: PipelineSpec, section: str, topics_help: str, partitions_help: str
) -> dict[str, Param]:
    """The topic and partition pickers shared by the backfill and reset forms."""
    return {
        "topics": Param(
            list(spec.topics),
            type="array",
            items={"type": "string", "enum": list(spec.topics)},
            title="Topics",
            description=topics_help,
            section=section,
        ),
        "partitions": Param(
            [],
            type="array",
            items={"type": "integer", "minimum": 0},
            title="Partitions",
            description=partitions_help,
            section=section,
        ),
    }


def backfill_params(spec: PipelineSpec) -> dict[str, Param]:
    """The trigger form: what to replay, from where to where, and how."""
    offsets_help = 'JSON like `{"orders": {"0": 1200, "1": 900}}`; -2 = earliest, -1 = latest.'
    return {
        **_topic_partition_params(
            spec,
            "What",
            "Topics to replay (all of the pipeline's topics by default).",
            "Partition numbers to replay; empty means every partition.",
        ),
        "start_mode": Param(
            "earliest",
            type="string",
            enum=["earliest", "offsets", "timestamp", "group", "ledger"],
            title="Start from",
            description="earliest: log start; offsets: start_value JSON; timestamp: first record at/after "
            "start_value; group: the consumer group's committed offsets; ledger: the pipeline's committed position.",
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
            "latest",
            type="string",
            enum=["latest", "offsets", "timestamp", "group"],
            title="End at (exclusive)",
            description="latest: the log end when the run is planned; offsets: end_value JSON; timestamp: "
            "first record at/after end_value; group: the consumer group's committed offsets.",
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
            title="Acknowledge partition-count change",
            description="A topic's partition count changed since the last committed run, so keys may have "
            "moved partition. Allowed only for pipelines ordered by a version/event-time column; offset "
            "ordering compares offsets only within one partition.",
            section="Safety",
        ),
        "mode": Param(
            "merge",
            type="string",
            enum=["merge", "rebuild"],
            title="Mode",
            description="merge: upsert the replayed records into the live table (newer records win; the same "
            "record re-derives its row when the spec changed). rebuild: write a complete new table from the log "
            "start into a shadow table (in batches, resumable), verify it against Kafka and swap it in atomically "
            "with the ledger; the live table is served meanwhile and kept under a dated name. Use it for changes "
            "that cannot be applied in place (a type change, a new key, a dropped column).",
            section="Safety",
        ),
        "dry_run": Param(
            False,
            type="boolean",
            title="Dry run",
            description="Plan and store the ranges, show them, read and write nothing.",
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

**Flow**: `plan_offsets` snapshots log start/end and the group's offsets into Postgres and stores
the planned `[start, end)` per partition → `spark_read_stage` reads exactly those offsets
(read_committed), parses and validates them, keeps the newest record per key, COPYs into a
run-scoped stage → `commit_transaction` merges, inserts dead letters and advances the ledger in
ONE transaction (committing twice is a no-op) → `mirror_group_offsets` copies the ledger to the
consumer group `{spec.consumer_group}` → `report` writes the summary (XCom `return_value`).

Spec file: `{spec.source_file}`. Bookkeeping: schema `reprocess` (runs, run_ranges,
offset_snapshots, consumer_offsets, committed_ranges, dead_letters).
"""


def build_run_dag(spec: PipelineSpec, kind: RunKind) -> DAG:
    """One DAG per (spec, kind); the tasks only call the library."""
    is_backfill = kind is RunKind.BACKFILL
    dag = DAG(
        dag_id=spec.dag_id(kind.value),
        description=f"{kind.value} of {', '.join(spec.topics)} into {spec.qualified_target}",
        doc_md=_doc(spec, kind),
        schedule=None if is_backfill else spec.schedule,
        start_date=None if is_backfill else _epoch(),
        catchup=False,
        max_active_runs=1,
        tags=["reprocess", kind.value, *spec.tags],
        default_args=default_args(spec),
        params=backfill_params(spec) if is_backfill else {},
    )
    with dag:

        @task(task_id="plan_offsets", doc_md="Snapshot offsets into Postgres and store the planned ranges.")
        def plan_offsets(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
            from reprocess.plan import plan_run
            from reprocess.ranges import ranges_to_rows
            from reprocess.store import lost_dict

            run_key = f"{dag.dag_id}/{run_id}"
            engine = _engine()
            try:
                request = RunRequest.from_params(params or {}, kind) if is_backfill else RunRequest.incremental()
            except SpecError as exc:  # recorded, so the run note says why, not only the task log
                from reprocess.store import record_failed_request

                record_failed_request(
                    engine, spec, kind, run_key, params, str(exc), dag_id=dag.dag_id, dag_run_id=run_id
                )
                raise
            plan = plan_run(
                engine, _kafka_config(), spec, request, run_key, dag_id=dag.dag_id, dag_run_id=run_id, params=params
            )
            if plan.is_empty and not request.dry_run:
                from reprocess.commit import commit_empty_run

                commit_empty_run(engine, spec, run_key)
            return {
                "run_id": run_key,
                "ranges": ranges_to_rows(plan.ranges),
                "lost": [lost_dict(x) for x in plan.lost],
                "dry_run": request.dry_run,
                "empty": plan.is_empty,
                "batch_size": request.batch_size or spec.batch_size,
                "warnings": list(plan.warnings),
                "rebuild": request.rebuild,
            }

        @task.short_circuit(task_id="has_work", ignore_downstream_trigger_rules=False)
        def has_work(plan: dict[str, Any]) -> bool:
            """Dry runs and no-new-data runs stop here: Spark is never started for nothing."""
            if plan["dry_run"]:
                log.info("dry run: planned ranges %s; nothing read or written", plan["ranges"])
                return False
            if plan["empty"]:
                log.info("no new data since the last committed position; nothing to do")
                return False
            return True

        spark = _spark_task(
            spec,
            "spark_read_stage",
            "Bounded read of the planned ranges, parse, dedupe, COPY into the run's stage: a Spark Connect "
            "client or spark-submit, as the spark_default connection's type says.",
            "reprocess.job:stage_job",
            f"reprocess-{spec.name}",
            {
                "run_id": "{{ ti.xcom_pull(task_ids='plan_offsets')['run_id'] }}",
                "batch_size": "{{ ti.xcom_pull(task_ids='plan_offsets')['batch_size'] }}",
            },
        )

        @task(task_id="commit_transaction", doc_md="One Postgres transaction: merge, dead letters, ledger.")
        def commit_transaction(plan: dict[str, Any]) -> dict[str, Any]:
            from reprocess.commit import commit_run, result_dict
            from reprocess.rebuild import swap_in

            if plan.get("rebuild"):
                return result_dict(swap_in(_engine(), _kafka_config(), spec, plan["run_id"]))
            return result_dict(commit_run(_engine(), spec, plan["run_id"]))

        @task(
            task_id="mirror_group_offsets",
            doc_md="Copy the committed positions to the Kafka consumer group (for lag tools); idempotent.",
        )
        def mirror(plan: dict[str, Any]) -> dict[str, int]:
            from reprocess.mirror import mirror_group_offsets

            return mirror_group_offsets(_engine(), _kafka_config(), spec)

        @task(task_id="report", trigger_rule="none_failed", doc_md="Summary of the run from Postgres.")
        def report(plan: dict[str, Any]) -> dict[str, Any]:
            from reprocess.summary import format_summary, run_summary

            summary = run_summary(
                _engine(), spec.name, plan["run_id"], spec=spec, dry_run=plan["dry_run"], warnings=plan["warnings"]
            )
            log.info("run summary\n%s", format_summary(summary))
            return summary

        # An XComArg: Airflow hands each downstream task the dict plan_offsets returned.
        planned = cast(dict[str, Any], plan_offsets())
        gate = has_work(planned)
        committed = commit_transaction(planned)
        gate >> spark >> committed >> mirror(planned) >> report(planned)
    return dag


def _epoch() -> Any:
    from datetime import UTC, datetime

    return datetime(2026, 1, 1, tzinfo=UTC)


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
        start_date=_epoch(),
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

            from reprocess.ranges import offsets_json
            from reprocess.reconcile import plan_window as window_of
            from reprocess.stage import drop_leftover_check_stages

            drop_leftover_check_stages(_engine(), spec)
            ranges = window_of(_kafka_config(), spec, data_interval_start, data_interval_end)
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

        spark = _spark_task(
            spec,
            "spark_window_stage",
            "The window's newest record per key (the backfill's parse rules and Ordering) and every invalid "
            "record into the check's stage: the backfill's launcher (Spark Connect client or spark-submit).",
            "reprocess.job:window_job",
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
            from reprocess.ranges import window_ranges
            from reprocess.reconcile import record_verdicts

            ranges = window_ranges(window["starting"], window["ending"])
            verdicts = record_verdicts(
                _engine(), spec, ranges, data_interval_start, data_interval_end, window["check_id"]
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

                from reprocess.reconcile import recorded_heal_conf

                check_id = (ti.xcom_pull(task_ids="plan_window") or {}).get("check_id")
                conf = recorded_heal_conf(_engine(), spec, data_interval_start, check_id) if check_id else None
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


def reset_params(spec: PipelineSpec) -> dict[str, Param]:
    """The reset form: the ``kafka-consumer-groups --reset-offsets`` scenarios, dry run unless ticked."""
    from reprocess.reset import ResetMode

    return {
        "mode": Param(
            ResetMode.EARLIEST.value,
            type="string",
            enum=[m.value for m in ResetMode],
            title="Move to",
            description="to-earliest: log start; to-latest: log end (skips unread records); to-offset: `value` on "
            "every selected partition; to-datetime: first record at/after `value` (RFC 3339); shift-by: move each "
            "position by `value` (negative re-reads). Positions are clamped to the retained log.",
            section="Where",
        ),
        "value": Param(
            None,
            type=["null", "string"],
            title="Value",
            description="For to-offset, to-datetime, shift-by.",
            section="Where",
        ),
        **_topic_partition_params(spec, "Where", "Topics whose positions move.", "Empty means every partition."),
        "reason": Param(
            None,
            type=["null", "string"],
            title="Reason",
            description="Why (required to execute; stored with your user name in reprocess.ledger_resets).",
            section="Apply",
        ),
        "execute": Param(
            False,
            type="boolean",
            title="Execute",
            description="Unticked: a dry run that only shows current → new per partition.",
            section="Apply",
        ),
    }


def build_reset_dag(spec: PipelineSpec) -> DAG:
    """Manual, form-driven reset of the pipeline's ledger (the CLI's ``reset`` as a DAG)."""
    dag = DAG(
        dag_id=spec.dag_id("reset"),
        description=f"move {spec.name}'s committed position deliberately (dry run unless 'execute')",
        doc_md=f"""### {spec.name}: reset the position

Moves the pipeline's ledger (`reprocess.consumer_offsets`), as `kafka-consumer-groups --reset-offsets`
moves a group. Unticked **Execute** is a dry run: the task log shows current → new per partition and
what the next incremental run would read. Executed, the move happens under the pipeline's lock
(an incremental run planned before it is fenced), is recorded with your user name and reason in
`reprocess.ledger_resets`, and is mirrored to the consumer group `{spec.consumer_group}`.
CLI: `python -m reprocess.cli reset {spec.name} --to-datetime 2026-11-01T00:00:00Z --dry-run`.
""",
        schedule=None,
        catchup=False,
        max_active_runs=1,
        tags=["reprocess", "reset", *spec.tags],
        default_args={**default_args(spec), "retries": 0},
        params=reset_params(spec),
    )
    with dag:

        @task(task_id="reset_ledger", doc_md="Dry run or apply the reset; the table is in the log and XCom.")
        def reset_ledger(params: dict[str, Any] | None = None, dag_run: Any = None) -> str:
            from reprocess.reset import ResetMode, ResetRequest, execute_reset, format_reset, plan_reset

            p = params or {}
            request = ResetRequest(
                ResetMode(p.get("mode") or ResetMode.EARLIEST.value),
                p.get("value") or None,
                tuple(p.get("topics") or ()),
                tuple(int(x) for x in p.get("partitions") or ()),
            )
            engine = _engine()
            if p.get("execute"):
                user = getattr(dag_run, "triggering_user_name", None) or "airflow"
                reason = p.get("reason") or ""
                rows = execute_reset(engine, _kafka_config(), spec, request, reason=reason, requested_by=user)
            else:
                rows = plan_reset(engine, _kafka_config(), spec, request)
            table = format_reset(spec, request, rows, executed=bool(p.get("execute")))
            log.info("reset\n%s", table)
            return table

        reset_ledger()
    return dag


def build_dags(specs: list[PipelineSpec]) -> dict[str, DAG]:
    dags = {}
    for spec in specs:
        for dag in (*(build_run_dag(spec, kind) for kind in RunKind), build_reconcile_dag(spec), build_reset_dag(spec)):
            dags[dag.dag_id] = dag
    return dags
