"""The Airflow plugin of the reprocessing pipelines: the coverage page and the run-note listener.

Registered by the ``airflow.plugins`` entry point of the installed package (no plugins folder):
the page (:mod:`reprocess.plugins.routes`) as a FastAPI app under ``/reprocess``, shown in the nav
and as a tab on every pipeline DAG's page, and the listener (:mod:`reprocess.plugins.listener`).
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from . import routes
from .listener import RunNoteListener


class ReprocessPlugin(AirflowPlugin):
    """The coverage page (nav entry, a tab on every DAG) and the run-note listener.

    AirflowPlugin declares its registries as instance attributes, hence no ClassVar below.
    """

    name = "reprocess"
    listeners: list[object] = [RunNoteListener()]  # noqa: RUF012
    fastapi_apps: list[Any] = [  # noqa: RUF012
        {"app": routes.app, "url_prefix": routes.URL_PREFIX, "name": "Reprocess coverage"}
    ]
    external_views: list[Any] = [  # noqa: RUF012
        {
            "name": "Coverage",
            "href": f"{routes.URL_PREFIX}/",
            "destination": "nav",
            "url_route": "reprocess",
            "nav_top_level": True,
            "icon": f"{routes.URL_PREFIX}/static/coverage.svg",
        },
        {
            "name": "Coverage",
            "href": f"{routes.URL_PREFIX}/dag/{{DAG_ID}}",
            "destination": "dag",
            "url_route": "reprocess-coverage",
        },
    ]
