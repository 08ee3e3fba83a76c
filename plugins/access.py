"""Who may see what: Airflow's own authentication, and pipelines filtered by DAG access.

A pipeline is readable when the user may read every DAG generated for it (backfill,
incremental, reconcile): its coverage, runs and dead letters are that DAGs' data. The check
goes through the configured auth manager, so it follows whatever roles, teams or per-DAG
permissions the deployment defines. A page asked without a login goes to the auth manager's login
page, as Airflow's own UI does; the JSON routes keep answering 401.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Final

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, HTTPException, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import RedirectResponse, Response

from reprocess.core.names import DAG_KINDS, pipeline_dag_id

User = Annotated[BaseUser, Depends(get_user)]
PAGES: Final = frozenset({"overview_page", "pipeline_page", "dag_tab"})  # the HTML routes' names


async def login_or_401(request: Request, exc: HTTPException) -> Response:
    """A page (:data:`PAGES`) without a valid login redirects a browser to the auth manager's login URL,
    which brings it back here after; every other answer, the API's 401 included, is FastAPI's own."""
    route = request.scope.get("route")
    if exc.status_code == status.HTTP_401_UNAUTHORIZED and getattr(route, "name", None) in PAGES:
        return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status.HTTP_303_SEE_OTHER)
    return await http_exception_handler(request, exc)


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
