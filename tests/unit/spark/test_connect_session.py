"""Runs attach to the server's shared Spark Connect session and never release it, and a server
declaring another library is refused (no Spark)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from reprocess.core.errors import SparkConnectError
from reprocess.spark import connect
from reprocess.spark.connect import FINGERPRINT_CONF, library_fingerprint, shared_session, shared_session_id
from reprocess.spark.sample import validation_session


class _SessionClosed(PySparkException):
    """What the server answers for a released session id (the client's SparkSQLException)."""

    def getCondition(self) -> str:
        return "INVALID_HANDLE.SESSION_CLOSED"


class _Client:
    def __init__(self, url: str, released: set[str]) -> None:
        self.url, self.released, self.closed = url, released, False

    def close(self) -> None:
        self.closed = True


class _Session:
    """Stands in for a remote session: its first RPC fails when the server released its id."""

    def __init__(self, url: str, released: set[str], conf: dict[str, str]) -> None:
        self.client = _Client(url, released)
        self.conf = self
        self.values = conf

    def get(self, key: str, default: Any = None) -> Any:
        if any(self.client.url.endswith(f"session_id={sid}") for sid in self.client.released):
            raise _SessionClosed(message="[INVALID_HANDLE.SESSION_CLOSED] Session was closed.")
        return self.values.get(key, default)


def _fake_builder(
    monkeypatch: pytest.MonkeyPatch, released: set[str], conf: dict[str, str] | None = None
) -> list[_Session]:
    made: list[_Session] = []

    class Builder:
        def remote(self, url: str) -> Builder:
            self.url = url
            return self

        def create(self) -> _Session:
            made.append(_Session(self.url, released, conf or {}))
            return made[-1]

    monkeypatch.setattr(SparkSession, "builder", Builder())
    return made


def test_every_run_attaches_to_the_same_session_and_only_closes_its_client(monkeypatch):
    made = _fake_builder(monkeypatch, released=set())
    for _ in range(2):
        with shared_session("sc://127.0.0.1:15002/;user_id=airflow") as spark:
            assert spark is made[-1]
    assert [s.client.url for s in made] == [
        f"sc://127.0.0.1:15002/;user_id=airflow;session_id={shared_session_id()}"
    ] * 2
    assert all(s.client.closed for s in made)


def test_a_released_shared_session_moves_runs_to_the_next_id_instead_of_failing(monkeypatch):
    made = _fake_builder(monkeypatch, released={shared_session_id(0)})
    with shared_session("sc://127.0.0.1:15002") as spark:
        assert spark.client.url == f"sc://127.0.0.1:15002/;session_id={shared_session_id(1)}"
    assert len(made) == 2 and made[0].client.closed


def test_online_validate_refuses_a_server_holding_another_library_and_names_the_restart_command(monkeypatch):
    made = _fake_builder(monkeypatch, released=set(), conf={FINGERPRINT_CONF: "0123456789abcdef"})
    monkeypatch.setattr(connect, "check_reachable", lambda url: None)  # no server: the fake session answers
    url = "sc://127.0.0.1:15002"
    refusal = "started with reprocess 0123456789abcdef"
    with pytest.raises(SparkConnectError, match=refusal) as refused, validation_session(url):
        pytest.fail("a session on a server holding another library")
    assert "`reprocess spark-connect start`" in str(refused.value)
    assert "make " not in str(refused.value)  # no checkout command for a wheel user
    assert made[-1].client.closed
    # A server started with this library serves the sample.
    made = _fake_builder(monkeypatch, released=set(), conf={FINGERPRINT_CONF: library_fingerprint()})
    with validation_session(url) as spark:
        assert spark is made[-1]
