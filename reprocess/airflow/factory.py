"""Airflow DAGs generated from pipeline specs: per spec a backfill, an incremental, a reconcile
and a reset DAG (``reprocess_<pipeline>_<kind>``). A user's DAG file is two lines::

    from reprocess.airflow.factory import dags_from_specs
    globals().update(dags_from_specs("/opt/specs"))  # or ("../pipelines", relative_to=__file__)
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.sdk import DAG

from reprocess.airflow.reconcile_dag import build_reconcile_dag
from reprocess.airflow.reset_dag import build_reset_dag
from reprocess.airflow.run_dags import build_run_dag
from reprocess.core.errors import SpecError
from reprocess.core.runs import RunKind
from reprocess.core.spec import PipelineSpec
from reprocess.core.spec_catalog import PIPELINES_DIR_ENV, load_specs


def dags_from_specs(folder: str | Path, *, relative_to: str | Path | None = None) -> dict[str, DAG]:
    """Every DAG of every ``*.yaml`` spec in ``folder``, by dag id.

    A relative ``folder`` is resolved against the folder of the file ``relative_to`` (pass the DAG
    file's ``__file__``): the DAG processor's working directory is not the DAG file's.
    ``REPROCESS_PIPELINES_DIR``, when set, wins over ``folder``. A broken spec raises
    :class:`~reprocess.core.errors.SpecError` naming the file and field (a DAG import error);
    ``reprocess validate`` reports every problem of a folder at once.
    """
    path = Path(folder)
    if relative_to is not None and not path.is_absolute():
        path = Path(relative_to).resolve().parent / path
    path = Path(os.environ.get(PIPELINES_DIR_ENV) or path)
    try:
        specs = load_specs(path)
    except SpecError as exc:  # an import error shows the first problem; the command shows them all
        raise SpecError(f"{exc}. `reprocess validate {path}` lists every problem with its fix") from exc
    return build_dags(specs)


def build_dags(specs: list[PipelineSpec]) -> dict[str, DAG]:
    """Every DAG of every spec, by dag id."""
    dags = {}
    for spec in specs:
        for dag in (*(build_run_dag(spec, kind) for kind in RunKind), build_reconcile_dag(spec), build_reset_dag(spec)):
            dags[dag.dag_id] = dag
    return dags
