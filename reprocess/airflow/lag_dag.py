"""The lag DAG (``reprocess_lag``): every minute, each pipeline's lag read live and sent as metrics.

A run sends its pipeline's lag when it ends; this keeps sending it while no run happens (an
incremental paused, failing or stuck), so a stopped pipeline's lag still grows on a dashboard.
It reads the broker's log ends and the ledger only: no Spark, no write, no consumer group.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Final

from airflow.sdk import DAG

from reprocess.airflow.common import epoch
from reprocess.airflow.faults import pipeline_task
from reprocess.core.spec import PipelineSpec

LAG_DAG_ID: Final = "reprocess_lag"
LAG_EVERY: Final = timedelta(minutes=1)


def build_lag_dag(specs: Sequence[PipelineSpec]) -> DAG:
    """One task per pipeline, so one pipeline's unreachable topic fails its own task only."""
    dag = DAG(
        dag_id=LAG_DAG_ID,
        description="every pipeline's lag and oldest unread record, read live, sent to Airflow's [metrics]",
        doc_md=__doc__,
        schedule=LAG_EVERY,
        start_date=epoch(),
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=LAG_EVERY * 5,
        tags=["reprocess", "metrics"],
        default_args={"retries": 0, "execution_timeout": LAG_EVERY * 4},  # the next turn is the retry
    )
    with dag:
        for spec in specs:
            lag_task(spec)
    return dag


def lag_task(spec: PipelineSpec) -> object:
    @pipeline_task(
        task_id=f"lag_{spec.name}",
        doc_md=f"Lag of {spec.name} ({', '.join(spec.topics)}), read live and sent.",
        first_contact=True,
    )
    def send_lag() -> None:
        from reprocess.airflow.common import app_engine, kafka_config
        from reprocess.airflow.metrics import emit_lag

        emit_lag(app_engine(), kafka_config(), spec)

    return send_lag()
