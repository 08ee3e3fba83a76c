"""How a session gets the JSON decoder's UDF (reprocess.formats.json_udf): a Spark Connect session
is sent the package's jar once, then registers; a session that cannot load the class is told the
``--jars`` to add. Fakes stand in for the sessions (the stack's tests run the real ones:
test_wheel.py over Connect, the spark-submit tests with ``--jars``)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pyspark.sql.connect.session import SparkSession as ConnectSession

from reprocess.core.errors import SparkSetupError
from reprocess.formats import json_udf


class _Registration:
    def __init__(self, session: Any) -> None:
        self.session = session

    def registerJavaFunction(self, name: str, cls: str, ddl: str) -> None:
        if self.session.refuse:
            raise RuntimeError(f"Can not load class {cls}, please make sure it is on the classpath.")
        self.session.calls.append(("register", name))


class _FakeConnect(ConnectSession):
    """A Connect session with no server: it records what the decoder asks of it."""

    def __init__(self, session_id: str, refuse: bool = False) -> None:  # no super().__init__: no server
        self._session_id, self.refuse, self.calls = session_id, refuse, []

    def addArtifacts(self, *path: str, **kinds: bool) -> None:
        self.calls.append(("artifact", path))

    @property
    def udf(self) -> Any:
        return _Registration(self)


class _FakeClassic:
    """A classic (spark-submit) session: the jar comes from ``--jars``, never as an artifact."""

    def __init__(self, refuse: bool) -> None:
        self.refuse, self.calls = refuse, []
        self.udf = _Registration(self)


def test_a_connect_session_is_sent_the_packages_jar_once_before_it_registers_the_udf():
    jar = str(json_udf.jar_path())
    one, two = str(uuid.uuid4()), str(uuid.uuid4())
    first, again, other = _FakeConnect(one), _FakeConnect(one), _FakeConnect(two)
    for session in (first, again, other):
        json_udf._register(session, "f", "struct<a:string>")
    assert first.calls == [("artifact", (jar,)), ("register", "f")]
    assert again.calls == [("register", "f")]  # the same server session holds the jar already
    assert other.calls == [("artifact", (jar,)), ("register", "f")]


def test_a_session_that_cannot_load_the_class_names_the_jars_to_add():
    classic = _FakeClassic(refuse=True)
    with pytest.raises(SparkSetupError, match=f"--jars {json_udf.jar_path()}"):
        json_udf._register(classic, "f", "struct<a:string>")  # type: ignore[arg-type]
    assert classic.calls == []
    working = _FakeClassic(refuse=False)
    json_udf._register(working, "f", "struct<a:string>")  # type: ignore[arg-type]
    assert working.calls == [("register", "f")]
