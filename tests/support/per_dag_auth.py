"""Airflow's Simple auth manager plus per-DAG denials, for the UI tests' access matrix.

The Simple auth manager grants by role only (a viewer reads every DAG); real deployments
restrict DAGs per user through their auth manager (FAB, Keycloak, ...). This subclass denies
the DAGs whose id starts with a prefix listed for a user in ``REPROCESS_TEST_DENIED_DAGS``
(``user=prefix,user=prefix``), so the page's filtering is tested through the auth manager
interface Airflow calls everywhere else (``get_authorized_dag_ids`` over the metadata DB).
``airflow standalone`` forces the Simple auth manager on its API server, so the UI test uses
this one in-process.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser


def _denied(username: str, dag_id: str) -> bool:
    for item in filter(None, os.environ.get("REPROCESS_TEST_DENIED_DAGS", "").split(",")):
        user, _, prefix = item.partition("=")
        if user == username and dag_id.startswith(prefix):
            return True
    return False


class PerDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method: Any, user: SimpleAuthManagerUser, access_entity: Any = None,
                          details: Any = None) -> bool:  # fmt: skip
        if details is not None and details.id and _denied(user.username, details.id):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
