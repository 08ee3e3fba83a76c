"""``reprocess init``'s findings: each step reported, a failure as an error with its fix, the rest still run."""

from __future__ import annotations

import pytest

from reprocess.airflow import first_run
from reprocess.operations.findings import Severity


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every step replaced by one that records its call and succeeds."""
    called: list[str] = []
    monkeypatch.setattr(first_run, "ensure_pool", lambda slots: called.append(f"pool {slots}") or "pool ok")
    monkeypatch.setattr(first_run, "migrate_app_db", lambda: called.append("db") or "db ok")
    monkeypatch.setattr(first_run, "check_kafka", lambda: called.append("kafka") or "kafka ok")
    monkeypatch.setattr(first_run, "check_registry", lambda c, s: called.append(f"registry {c}") or "registry ok")
    monkeypatch.setattr(first_run, "check_spark", lambda: called.append("spark") or "spark ok")
    return called


def test_init_runs_every_step_in_the_order_a_run_needs_them_with_the_docs_pool_size(steps):
    findings = first_run.init([])
    assert steps == ["pool 2", "db", "kafka", "spark"]  # no spec needs a registry: none is asked
    assert [(f.source, f.severity) for f in findings] == [
        ("spark", Severity.OK), ("reprocess_db", Severity.OK), ("kafka_default", Severity.OK),
        ("spark_default", Severity.OK),
    ]  # fmt: skip


def test_a_failing_step_is_an_error_naming_its_connection_and_fix_and_the_next_steps_still_run(steps, monkeypatch):
    def refused() -> str:
        raise RuntimeError("KafkaError{code=_TRANSPORT}\nsecond line of noise")

    monkeypatch.setattr(first_run, "check_kafka", refused)
    findings = {f.source: f for f in first_run.init([])}
    kafka = findings["kafka_default"]
    assert kafka.severity is Severity.ERROR and kafka.check == "kafka"
    assert kafka.problem == "RuntimeError: KafkaError{code=_TRANSPORT}"  # first line only
    assert "bootstrap.servers" in kafka.fix and "kafka_default" in kafka.fix
    assert "spark" in steps and findings["spark_default"].severity is Severity.OK


def test_the_registry_is_checked_once_per_connection_a_spec_needs(steps):
    class Spec:
        def __init__(self, name: str, needs: bool, conn: str) -> None:
            self.name, self.needs_registry, self.schema_registry = name, needs, conn

    specs = [Spec("a", True, "schema_registry"), Spec("b", True, "schema_registry"), Spec("c", False, "other")]
    first_run.init(specs)  # type: ignore[arg-type]
    assert [s for s in steps if s.startswith("registry")] == ["registry schema_registry"]


def test_no_java_is_found_without_java_home_or_one_on_the_path(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert first_run.java_executable() is None
