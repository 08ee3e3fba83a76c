"""Who may see what: Airflow's own authentication, and pipelines filtered by DAG access.

A pipeline is readable when the user may read every DAG generated for it (backfill,
incremental, reconcile): its coverage, runs and dead letters are that DAGs' data. The check
goes through the configured auth manager, so it follows whatever roles, teams or per-DAG
permissions the deployment defines.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, HTTPException, status

from reprocess.core.names import DAG_KINDS, pipeline_dag_id

User = Annotated[BaseUser, Depends(get_user)]


def readable_pipelines(user: BaseUser, names: Iterable[str]) -> list[str]:
    """The pipelines among ``names`` whose every DAG the user may read (``GET``)."""
    allowed = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
    return [n for n in names if all(pipeline_dag_id(n, kind) in allowed for kind in DAG_KINDS)]


def require_pipeline(user: BaseUser, name: str, known: Iterable[str]) -> str:
    """``name`` if the user may read it (403 otherwise, before telling whether it exists) and it
    has bookkeeping rows (404 otherwise: its DAGs never ran)."""
    if not readable_pipelines(user, [name]):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"no read access to the DAGs of pipeline {name!r}")
    if name not in set(known):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"pipeline {name!r} has no runs yet")
    return name
