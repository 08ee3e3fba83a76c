"""Routes of the coverage page: thin, each one authenticated, each panel one ``coverage`` call.

HTML is rendered by Jinja with autoescaping on, so every value from the database is escaped;
chart data travels as JSON inside a ``<script type="application/json">`` block (``tojson``
escapes ``<``, ``>`` and ``&``) and the page's script only ever puts text into the DOM.
Request values reach SQL only as bound parameters of ``reprocess.operations.coverage``'s queries.
"""

from __future__ import annotations

import functools
import json
import time
import urllib.parse
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Final

from airflow.api_fastapi.core_api.security import requires_authenticated
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlalchemy import Engine

from reprocess.core.names import pipeline_dag_id, pipeline_of_dag
from reprocess.operations import coverage, preview, progress, redrive
from reprocess.operations.audit import last_audit, last_audit_text
from reprocess.operations.plan_report import PLAN_COLUMNS

from .access import User, login_or_401, readable_pipelines, require_pipeline

URL_PREFIX: Final = "/reprocess"
HERE: Final = Path(__file__).resolve().parent
STATIC: Final = {
    "coverage.js": (HERE / "static" / "coverage.js", "text/javascript"),
    "coverage.css": (HERE / "static" / "coverage.css", "text/css"),
    "coverage.svg": (HERE / "static" / "coverage.svg", "image/svg+xml"),
    "progress.js": (HERE / "static" / "progress.js", "text/javascript"),
    # The charting library, from the installed (pinned) plotly wheel: no CDN, no internet.
    "plotly.min.js": (Path(str(resources.files("plotly") / "package_data" / "plotly.min.js")), "text/javascript"),
}

# Every route, the static files included, needs an authenticated Airflow user.
app = FastAPI(
    title="Reprocess coverage",
    description="Coverage, runs, reconciliations and dead letters of the reprocessing pipelines.",
    dependencies=[Depends(requires_authenticated())],
    # The generated docs routes would bypass the dependencies above: none are served.
    openapi_url=None,
    docs_url=None,
    redoc_url=None,
    exception_handlers={HTTPException: login_or_401},
)
templates = Environment(
    loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True), trim_blocks=True
)


@functools.cache
def engine() -> Engine:
    from reprocess.airflow.hooks import AppDatabaseHook

    return AppDatabaseHook.server_engine()  # migrated: the page may come before any run migrated


def _ago(value: datetime | None) -> str:
    if value is None:
        return "-"
    seconds = (datetime.now(UTC) - value).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"


def _num(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _airflow_run(run_id: str | None) -> str:
    """A run id is ``<dag_id>/<dag_run_id>``; the tables show the Airflow run id (the DAG is known)."""
    return "-" if run_id is None else run_id.partition("/")[2] or run_id


templates.filters.update(ago=_ago, num=_num, run=_airflow_run, quote=lambda s: urllib.parse.quote(str(s), safe=""))
templates.globals.update(dag_id=pipeline_dag_id, tojson_pretty=lambda v: json.dumps(v, indent=2))


def _render(request: Request, name: str, started: float, **context: Any) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    page = templates.get_template(name).render(
        root=root,
        ui_root=root.removesuffix(URL_PREFIX),
        elapsed_ms=(time.perf_counter() - started) * 1000,
        **context,
    )
    return HTMLResponse(page)


# ---------------------------------------------------------------------------- HTML
@app.get("/", response_class=HTMLResponse, name="overview_page")
def overview_page(request: Request, user: User) -> HTMLResponse:
    started = time.perf_counter()
    with engine().connect() as conn:
        names = readable_pipelines(user, coverage.pipeline_names(conn))
        pipelines = coverage.overview(conn, names)
    return _render(request, "overview.html", started, pipelines=pipelines)


@app.get("/pipelines/{name}", response_class=HTMLResponse, name="pipeline_page")
def pipeline_page(
    request: Request,
    user: User,
    name: str,
    runs_offset: Annotated[int, Query(ge=0)] = 0,
    kind: str | None = None,
    run: str | None = None,
    dl_offset: Annotated[int, Query(ge=0)] = 0,
    plan: str | None = None,
) -> HTMLResponse:
    started = time.perf_counter()
    with engine().connect() as conn:
        require_pipeline(user, name, coverage.pipeline_names(conn))
        (pipeline,) = coverage.overview(conn, [name])
        context: dict[str, Any] = {
            "p": pipeline,
            "runs": coverage.runs(conn, name, runs_offset),
            "progress": progress.run_progress(conn, name),
            "calendar": coverage.calendar(conn, name),
            "audit": last_audit_text(name, last_audit(conn, name)),
            "dead": coverage.dead_letters(conn, name, kind or None, run or None, dl_offset),
            "kinds": coverage.dead_letter_kinds(conn, name),
            "redrive": redrive.plan_redrive(conn, name, kind or None, run or None),
            "kind": kind or "",
            "run": run or "",
            "plan": preview.latest_report(conn, name, plan or None),  # the Plan view: ?plan=<id>, else the newest
            "plan_columns": PLAN_COLUMNS,
        }
    chart = {
        "partitions": [p.as_dict() for p in pipeline.partitions],
        "calendar": [c.as_dict() for c in context["calendar"]],
    }
    return _render(request, "pipeline.html", started, chart=chart, **context)


@app.get("/api/pipelines/{name}/redrive")
def api_redrive(
    user: User,
    name: str,
    kind: str | None = None,
    run: str | None = None,
    max_gap: Annotated[int, Query(ge=0)] = redrive.DEFAULT_MAX_GAP,
) -> dict[str, Any]:
    """The backfill confs that re-read the open dead letters (all, one error kind or one run's)."""
    with engine().connect() as conn:
        require_pipeline(user, name, coverage.pipeline_names(conn))
        return redrive.plan_redrive(conn, name, kind, run, max_gap).as_dict()


@app.get("/dag/{dag_id}", name="dag_tab", response_model=None)
def dag_tab(request: Request, user: User, dag_id: str) -> RedirectResponse | HTMLResponse:
    """The tab on each DAG's page: the pipeline page of the DAG's pipeline."""
    name = pipeline_of_dag(dag_id)
    if name is None:
        return _render(request, "message.html", time.perf_counter(), message=f"{dag_id} is not a reprocess DAG.")
    return RedirectResponse(str(request.url_for("pipeline_page", name=name)), status_code=303)


@app.get("/static/{filename}", name="static")
def static(filename: str) -> FileResponse:
    if filename not in STATIC:
        raise HTTPException(404, "no such file")
    path, media_type = STATIC[filename]
    return FileResponse(path, media_type=media_type, headers={"Cache-Control": "private, max-age=3600"})


# ---------------------------------------------------------------------------- JSON
@app.get("/api/pipelines")
def api_pipelines(user: User) -> list[dict[str, Any]]:
    with engine().connect() as conn:
        names = readable_pipelines(user, coverage.pipeline_names(conn))
        return [p.as_dict() for p in coverage.overview(conn, names)]


@app.get("/api/pipelines/{name}/partitions")
def api_partitions(user: User, name: str) -> list[dict[str, Any]]:
    with engine().connect() as conn:
        require_pipeline(user, name, coverage.pipeline_names(conn))
        return [p.as_dict() for p in coverage.partitions(conn, [name])]


@app.get("/api/pipelines/{name}/progress")
def api_progress(user: User, name: str) -> list[dict[str, Any]]:
    """Runs whose Spark stage is going (and the last ones that ended): the page polls it."""
    with engine().connect() as conn:
        require_pipeline(user, name, coverage.pipeline_names(conn))
        return [r.as_dict() for r in progress.run_progress(conn, name)]


@app.get("/api/pipelines/{name}/runs")
def api_runs(user: User, name: str, offset: Annotated[int, Query(ge=0)] = 0) -> dict[str, Any]:
    with engine().connect() as conn:
        require_pipeline(user, name, coverage.pipeline_names(conn))
        page = coverage.runs(conn, name, offset)
    return {"runs": [r.as_dict() for r in page.items], "offset": page.offset, "has_next": page.has_next}


@app.get("/api/pipelines/{name}/calendar")
def api_calendar(user: User, name: str) -> list[dict[str, Any]]:
    with engine().connect() as conn:
        require_pipeline(user, name, coverage.pipeline_names(conn))
        return [c.as_dict() for c in coverage.calendar(conn, name)]


@app.get("/api/pipelines/{name}/dead-letters")
def api_dead_letters(
    user: User,
    name: str,
    kind: str | None = None,
    run: str | None = None,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    with engine().connect() as conn:
        require_pipeline(user, name, coverage.pipeline_names(conn))
        page = coverage.dead_letters(conn, name, kind, run, offset)
        kinds = coverage.dead_letter_kinds(conn, name)
    return {
        "dead_letters": [d.as_dict() for d in page.items],
        "offset": page.offset,
        "has_next": page.has_next,
        "kinds": [{"kind": k, "count": n} for k, n in kinds],
    }
