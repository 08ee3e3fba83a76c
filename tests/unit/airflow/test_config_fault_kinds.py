"""Which task errors are configuration faults (failed at once, named by their connection) and which
a retry may mend (left as they are, so the retry policy retries them). No services: the errors are
built as the drivers raise them; the connections are ``AIRFLOW_CONN_*`` values."""

from __future__ import annotations

import json

import psycopg2
import pytest
from sqlalchemy.exc import OperationalError

from reprocess.airflow.faults import config_fault
from reprocess.core.errors import ConnectionConfigError, RegistryError, SpecError

PASSWORD = "s3cret-pw"


@pytest.fixture(autouse=True)
def connections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_REPROCESS_DB", f"postgresql://etl:{PASSWORD}@db:5432/app")
    registry = {"conn_type": "http", "host": "http://registry:8081"}
    monkeypatch.setenv("AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT", json.dumps(registry))


def _raised(error: BaseException, cause: BaseException) -> BaseException:
    try:
        raise error from cause
    except BaseException as exc:
        return exc


def test_a_rejected_login_is_the_app_databases_error_naming_login_and_fix_never_the_password():
    driver = psycopg2.OperationalError(
        'connection to server at "db" (10.0.0.5), port 5432 failed: FATAL:  password authentication failed for '
        'user "etl"\n'
    )
    fault = config_fault(_raised(OperationalError("SELECT 1", {}, driver), driver))
    assert isinstance(fault, ConnectionConfigError)
    assert str(fault).startswith("`reprocess_db` `host=db port=5432 schema=app login=etl`: connection to server")
    assert "password authentication failed" in str(fault) and "check the connection's host, port" in str(fault)
    assert PASSWORD not in str(fault)


def test_a_refused_registry_is_its_connections_error_when_the_task_names_the_connection():
    refused = ConnectionRefusedError(111, "Connection refused")
    error = _raised(RegistryError("the Schema Registry at http://registry:8081 cannot be reached"), refused)
    fault = config_fault(error, "schema_registry_default")
    assert str(fault) == (
        "`schema_registry_default` `host=http://registry:8081`: connection refused; check the connection's host "
        "(the registry's URL)"
    )


def test_a_refused_database_address_is_the_connections_error_only_in_the_runs_first_task():
    """Later in a run the database answered already: a refusal then is a restart, which a retry mends."""
    refused = psycopg2.OperationalError(
        'connection to server at "db" (10.0.0.5), port 5432 failed: Connection refused\n\tIs the server running?'
    )
    assert config_fault(refused) is None
    fault = config_fault(refused, first_contact=True)
    assert str(fault).startswith("`reprocess_db` `host=db port=5432 schema=app login=etl`: connection to server")


@pytest.mark.parametrize(
    "error",
    [
        psycopg2.OperationalError("server closed the connection unexpectedly"),  # a restart: the retry reconnects
        RegistryError("the Schema Registry at http://registry:8081 failed on subject 's': HTTP 503"),
        SpecError("p.yaml: field 'key': must list one or more of the columns"),  # the policy's own rule
        ConnectionConfigError("already named"),
    ],
    ids=["postgres_restart", "registry_5xx", "spec_error", "already_a_config_error"],
)
def test_what_a_retry_may_mend_or_what_is_named_already_is_left_as_it_is(error):
    assert config_fault(error, "schema_registry_default") is None
