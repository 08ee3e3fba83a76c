"""devstack.jvm without Maven: the pins, the stamps and the errors that say the fix."""

from __future__ import annotations

import pytest

from devstack import jvm
from devstack.process import ServiceError


@pytest.fixture
def empty_state(tmp_path, monkeypatch):
    monkeypatch.setenv("REPROCESS_STATE_DIR", str(tmp_path))
    return tmp_path


def test_jars_before_the_install_ask_for_make_install(empty_state):
    with pytest.raises(ServiceError, match=r"'kafka' jars are missing.*run `make install`"):
        jvm.jars("kafka")


def test_a_missing_mvn_fails_the_fetch_with_the_install_command(empty_state, monkeypatch):
    monkeypatch.setenv("PATH", str(empty_state))
    with pytest.raises(ServiceError, match=r"mvn not found.*apt-get install -y maven"):
        jvm.fetch("kafka")


def test_a_changed_pom_makes_the_fetched_set_stale(empty_state):
    folder = jvm.jar_dir("connect")
    folder.mkdir(parents=True)
    (folder / "a.jar").write_bytes(b"")
    (folder / jvm.STAMP).write_text("0" * 16)
    assert not jvm.fetched("connect")
    (folder / jvm.STAMP).write_text(jvm._stamp("connect"))
    assert jvm.jars("connect") == [folder / "a.jar"]


def test_the_spark_set_is_pinned_at_the_installed_pyspark_version():
    import pyspark

    assert jvm.version("spark", "spark.version") == pyspark.__version__
    assert jvm.version("kafka", "kafka.version") == jvm.version("connect", "kafka.version")


def test_an_unknown_set_names_the_sets():
    with pytest.raises(ServiceError, match="kafka, connect, debezium, debezium-jdbc, spark"):
        jvm.pom("kafka-ui")
