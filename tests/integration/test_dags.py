"""The DAG folder imports cleanly and every generated DAG's defaults pass Param validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from reprocess.spec import load_specs

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration("airflow")


def test_dag_folder_imports_without_errors_and_yields_every_pipeline_dag(monkeypatch):
    monkeypatch.setenv("REPROCESS_PIPELINES_DIR", str(REPO / "pipelines"))
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    expected = {spec.dag_id(kind) for spec in load_specs(REPO / "pipelines") for kind in ("backfill", "incremental")}
    assert expected <= set(bag.dags)
    for dag_id in expected:
        dag = bag.dags[dag_id]
        dag.params.validate()  # invalid defaults are not caught at parse time
        assert dag.doc_md and dag.max_active_runs == 1
        assert dag.get_task("spark_read_stage").pool == "spark"
