"""The reset DAG of a pipeline: move its ledger deliberately from a form (dry run unless ticked)."""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import DAG, Param

from reprocess.airflow.common import app_engine, default_args, kafka_config, topic_partition_params
from reprocess.airflow.faults import pipeline_task
from reprocess.core.choices import described, values
from reprocess.core.spec import PipelineSpec

log = logging.getLogger(__name__)


def reset_params(spec: PipelineSpec) -> dict[str, Param]:
    """The reset form: the ``kafka-consumer-groups --reset-offsets`` scenarios, dry run unless ticked."""
    from reprocess.operations.reset import ResetMode

    return {
        "mode": Param(
            ResetMode.EARLIEST.value,
            type="string",
            enum=values(ResetMode),
            title="Move to",
            description=described(
                {
                    ResetMode.EARLIEST: "log start",
                    ResetMode.LATEST: "log end (skips unread records)",
                    ResetMode.OFFSET: "`value` on every selected partition",
                    ResetMode.DATETIME: "first record at/after `value` (RFC 3339)",
                    ResetMode.SHIFT_BY: "move each position by `value` (negative re-reads)",
                }
            )
            + ". Positions are clamped to the retained log.",
            section="Where",
        ),
        "value": Param(
            None,
            type=["null", "string"],
            title="Value",
            description=f"For {', '.join(m.value for m in ResetMode if m.takes_value)}.",
            section="Where",
        ),
        **topic_partition_params(spec, "Where", "Topics whose positions move.", "Empty means every partition."),
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
CLI: `reprocess reset {spec.name} --to-datetime 2026-11-01T00:00:00Z --dry-run`.
""",
        schedule=None,
        catchup=False,
        max_active_runs=1,
        tags=["reprocess", "reset", *spec.tags],
        default_args={**default_args(spec), "retries": 0},
        params=reset_params(spec),
    )
    with dag:

        @pipeline_task(
            task_id="reset_ledger",
            doc_md="Dry run or apply the reset; the table is in the log and XCom.",
            first_contact=True,
        )
        def reset_ledger(params: dict[str, Any] | None = None, dag_run: Any = None) -> str:
            from reprocess.operations.reset import ResetMode, ResetRequest, execute_reset, format_reset, plan_reset

            p = params or {}
            request = ResetRequest(
                ResetMode(p.get("mode") or ResetMode.EARLIEST.value),
                p.get("value") or None,
                tuple(p.get("topics") or ()),
                tuple(int(x) for x in p.get("partitions") or ()),
            )
            engine = app_engine()
            if p.get("execute"):
                user = getattr(dag_run, "triggering_user_name", None) or "airflow"
                reason = p.get("reason") or ""
                rows = execute_reset(engine, kafka_config(), spec, request, reason=reason, requested_by=user)
            else:
                rows = plan_reset(engine, kafka_config(), spec, request)
            table = format_reset(spec, request, rows, executed=bool(p.get("execute")))
            log.info("reset\n%s", table)
            return table

        reset_ledger()
    return dag
