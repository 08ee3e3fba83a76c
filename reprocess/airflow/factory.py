"""Airflow DAGs generated from pipeline specs: per spec a backfill, an incremental, a reconcile
and a reset DAG (``reprocess_<pipeline>_<kind>``). A DAG file needs two lines::

    from reprocess.airflow.factory import build_dags
    globals().update(build_dags(load_specs(pipelines_dir())))
"""

from __future__ import annotations

from airflow.sdk import DAG

from reprocess.airflow.reconcile_dag import build_reconcile_dag
from reprocess.airflow.reset_dag import build_reset_dag
from reprocess.airflow.run_dags import build_run_dag
from reprocess.core.runs import RunKind
from reprocess.core.spec import PipelineSpec


def build_dags(specs: list[PipelineSpec]) -> dict[str, DAG]:
    """Every DAG of every spec, by dag id (``globals().update(...)`` in a DAG file)."""
    dags = {}
    for spec in specs:
        for dag in (*(build_run_dag(spec, kind) for kind in RunKind), build_reconcile_dag(spec), build_reset_dag(spec)):
            dags[dag.dag_id] = dag
    return dags
