"""The JSON decoder's jar as the build backend makes it (build_backend/json_jar.py): one source gives
the same bytes twice, a fresh jar asks nothing of the build environment, a stale one the pinned
pyspark, and a machine without javac is told which JDK to install."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BACKEND = Path(__file__).resolve().parents[3] / "build_backend"


@pytest.fixture
def json_jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The module, building into ``tmp_path`` instead of the checkout's package."""
    spec = importlib.util.spec_from_file_location("json_jar_under_test", BACKEND / "json_jar.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "JAR", tmp_path / "reprocess-json.jar")
    yield module
    del sys.modules[spec.name]


def test_one_source_builds_the_same_jar_twice_and_a_fresh_jar_needs_no_pyspark_to_build(json_jar, tmp_path):
    assert json_jar.build_requires() == [json_jar.pinned_pyspark()] == ["pyspark==4.2.0"]
    assert json_jar.build() is True
    first = json_jar.JAR.read_bytes()
    assert json_jar.fresh() and json_jar.build_requires() == [] and json_jar.build() is False
    json_jar.JAR.unlink()
    assert json_jar.build() is True and json_jar.JAR.read_bytes() == first
    assert not list(tmp_path.glob("*.partial"))


def test_without_javac_the_build_names_the_jdk_to_install(json_jar, tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(json_jar.JarBuildError, match=r"javac not found.*openjdk-17-jdk-headless"):
        json_jar.build()
    assert not json_jar.JAR.exists()
