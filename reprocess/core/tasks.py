"""The Airflow tasks that run stages, named once: the run DAGs' three and the reconcile DAG's three.

A stage names its task (``reprocess.core.stages.for_task``); the DAG files build their tasks from
these values, so a task's id and the stages it runs cannot drift apart.
"""

from __future__ import annotations

import enum


class Task(enum.StrEnum):
    """The Airflow task that runs a stage: of a run DAG (``reprocess.airflow.run_dags``) or of the
    reconcile DAG (``reprocess.airflow.reconcile_dag``)."""

    PLAN = "plan_offsets"
    SPARK = "spark_read_stage"
    COMMIT = "commit_transaction"
    PLAN_WINDOW = "snapshot_window"
    SPARK_WINDOW = "spark_window_stage"
    RECONCILE = "reconcile"
