"""devstack finds a Java new enough for each part (Spark's 17, the registry's 21+) and says the fix when
there is none. Fake Java homes whose ``bin/java`` prints a version, as a real one does on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack import java, registry
from devstack.process import ServiceError


def _fake_java(root: Path, name: str, version: str) -> Path:
    home = root / name
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "java"
    script.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2026-01-20' >&2\n")
    script.chmod(0o755)
    return home


def test_a_newer_java_is_found_beside_the_java_17_on_the_path(tmp_path, monkeypatch):
    old = _fake_java(tmp_path, "java-17-openjdk-amd64", "17.0.15")
    new = _fake_java(tmp_path, "temurin-25-jdk-amd64", "25.0.3")
    monkeypatch.setattr(java, "JVM_ROOT", tmp_path)
    monkeypatch.setenv("JAVA_HOME", str(old))
    monkeypatch.delenv("REPROCESS_REGISTRY_JAVA_HOME", raising=False)
    assert java.find_at_least(21, "REPROCESS_REGISTRY_JAVA_HOME") == new
    monkeypatch.setenv("REPROCESS_REGISTRY_JAVA_HOME", str(old))  # a variable naming a too-old Java is passed over
    assert java.find_at_least(21, "REPROCESS_REGISTRY_JAVA_HOME") == new
    assert java.find_at_least(17, "REPROCESS_REGISTRY_JAVA_HOME") == old


def test_without_java_21_the_registry_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setattr(java, "JVM_ROOT", tmp_path)
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, "java-17", "17.0.15")))
    monkeypatch.delenv("REPROCESS_REGISTRY_JAVA_HOME", raising=False)
    with pytest.raises(ServiceError, match=r"needs Java 21 or newer.*set REPROCESS_REGISTRY_JAVA_HOME"):
        registry.java()
