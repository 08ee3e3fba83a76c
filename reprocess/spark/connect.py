"""The Spark Connect client side of a job: reach the server, and refuse one holding other code.

A Connect server's Python workers import ``reprocess`` from the server's environment and are
reused across jobs, so a server started before the library changed would run the old reader
and copier under the new driver code. The server records the library's fingerprint in its
Spark conf (:data:`FINGERPRINT_CONF`, set by ``reprocess.spark.connect_server`` at start); a job compares
it with its own and refuses on a mismatch. A server that does not declare one (a managed
endpoint with its own deployment) is trusted and the job logs that it could not check.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from reprocess.core.errors import SparkConnectError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

FINGERPRINT_CONF: Final = "spark.reprocess.libraryFingerprint"
CLIENT_MARKS: Final = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")
DEFAULT_PORT: Final = 15002  # Spark Connect's own default


# The packages the build maps into ``reprocess`` from top-level folders (pyproject.toml's package-dir):
# a checkout imports them from there, a wheel holds them inside reprocess/.
MAPPED_PACKAGES: Final = ("reprocess.spark_apps", "reprocess.sql", "reprocess.plugins")


def library_fingerprint() -> str:
    """A hash over the ``reprocess`` package's content as the running Python imports it: each file
    (code and package data, the mapped ``spark_apps``, ``sql`` and ``plugins`` included) named by
    its importable name, ``<dotted package>/<path in that package>``, with its bytes.

    A file's name never depends on where it lies, so a wheel and a checkout of one commit give
    one fingerprint.

    Examples
    --------
    >>> len(library_fingerprint()) == 16 and library_fingerprint() == library_fingerprint()
    True
    """
    named = library_files()
    digest = hashlib.sha256()
    for name in sorted(named):
        digest.update(name.encode() + b"\0" + named[name].read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def library_files() -> dict[str, Traversable]:
    """The files :func:`library_fingerprint` hashes, by importable name.

    Examples
    --------
    >>> names = library_files()
    >>> "reprocess.spark/connect.py" in names and "reprocess.sql/001_core.sql" in names
    True
    >>> "reprocess.plugins/templates/base.html" in names and "reprocess/__init__.py" in names
    True
    """
    named: dict[str, Traversable] = {}
    for package in ("reprocess", *MAPPED_PACKAGES):
        named.update(_package_files(package, files(package)))
    return named


def _package_files(package: str, folder: Traversable, within: str = "") -> Iterator[tuple[str, Traversable]]:
    """Each file of ``package`` (in ``folder``) and of its subpackages, by importable name. A subfolder
    holding ``__init__.py`` is a subpackage, another one (``templates/``) is data of its package; a
    mapped package is walked from where it is imported, not from inside ``reprocess/``."""
    for entry in folder.iterdir():
        if entry.is_file():
            yield f"{package}/{within}{entry.name}", entry
        elif entry.name == "__pycache__":
            continue
        elif not within and entry.joinpath("__init__.py").is_file():
            if f"{package}.{entry.name}" not in MAPPED_PACKAGES:
                yield from _package_files(f"{package}.{entry.name}", entry)
        else:
            yield from _package_files(package, entry, f"{within}{entry.name}/")


def endpoint(url: str) -> tuple[str, int]:
    """(host, port) of an ``sc://host:port/;params`` URL.

    Examples
    --------
    >>> endpoint("sc://127.0.0.1:15131/;user_id=airflow")
    ('127.0.0.1', 15131)
    >>> endpoint("sc://spark.example.com")
    ('spark.example.com', 15002)
    """
    parts = urlsplit(url)
    if parts.scheme != "sc" or not parts.hostname:
        raise SparkConnectError(f"{url!r} is not a Spark Connect URL (sc://host:port)")
    return parts.hostname, parts.port or DEFAULT_PORT


def check_reachable(url: str, timeout: float = 5) -> None:
    """Fail at once, naming the endpoint, when nothing listens there (the client itself would
    retry with back-off for minutes before giving up)."""
    host, port = endpoint(url)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise SparkConnectError(
            f"no Spark Connect server answers at {host}:{port} ({exc.strerror or exc}). The embedded one is "
            f"started by `make services` (port $REPROCESS_CONNECT_PORT); for another endpoint check the "
            f"spark_default connection's host and port."
        ) from exc


def check_library(spark: SparkSession, url: str) -> None:
    """Refuse a server whose Python workers would import another version of ``reprocess``."""
    served = spark.conf.get(FINGERPRINT_CONF, None)
    if served is None:
        log.info(
            "Spark Connect server %s does not declare %s; cannot check its reprocess version", url, FINGERPRINT_CONF
        )
        return
    ours = library_fingerprint()
    if served != ours:
        raise SparkConnectError(
            f"the Spark Connect server at {url} was started with reprocess {served}, but this job's library is "
            f"{ours}: its Python workers would run the old code. Restart the server with this library: "
            "`reprocess spark-connect start` (run in the environment this job runs in, it restarts a server it "
            "started whose library changed); a server started another way needs this version of reprocess on "
            "the Python path of its workers and a restart."
        )


@contextmanager
def client_env() -> Iterator[None]:
    """Undo the marks a Connect session leaves in the process environment when it is done.

    pyspark's client sets ``SPARK_CONNECT_MODE_ENABLED`` and never removes it; a spark-submit
    started later by the same process (another task in ``dag.test``, a test) inherits it, and its
    driver then asks for a Connect URL instead of starting Spark.
    """
    saved = {name: os.environ.get(name) for name in CLIENT_MARKS}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


_SESSION_NAMESPACE: Final = uuid.UUID("6a1f0c2e-35c4-4e52-9d0e-2b8f4b0c7a11")
_SESSION_GENERATIONS: Final = 8
_SESSION_CLOSED: Final = "INVALID_HANDLE.SESSION_CLOSED"


def shared_session_id(generation: int = 0) -> str:
    """The session id every run of this library version uses: the same on every client.

    Examples
    --------
    >>> shared_session_id() == shared_session_id() != shared_session_id(1)
    True
    """
    return str(uuid.uuid5(_SESSION_NAMESPACE, f"{library_fingerprint()}/{generation}"))


def with_session_id(url: str, session_id: str) -> str:
    """``url`` with its ``session_id`` parameter set (replacing one it has).

    Examples
    --------
    >>> with_session_id("sc://h:1/;user_id=airflow;session_id=x", "s")
    'sc://h:1/;user_id=airflow;session_id=s'
    >>> with_session_id("sc://h:1", "s")
    'sc://h:1/;session_id=s'
    """
    base, _, params = url.partition("/;")
    kept = [p for p in params.split(";") if p and not p.startswith("session_id=")]
    return f"{base.rstrip('/')}/;" + ";".join([*kept, f"session_id={session_id}"])


@contextmanager
def shared_session(url: str) -> Iterator[SparkSession]:
    """A Spark Connect client attached to the server's shared session; on exit the client is
    closed but the session is NOT released, so the next run (another process) finds it warm.

    A new Connect session starts three Python daemons on the server (data-source creation,
    read planning, UDF workers; ~48 MB each, kept until the server stops): a 1,000-record stage
    took 16-18 s in a new session and 2.5-3.7 s in the shared one (docs/performance.md). A
    session someone released (``spark.stop()``) cannot be reattached; the next generation of
    the id is tried then.
    """
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    for generation in range(_SESSION_GENERATIONS):
        spark = SparkSession.builder.remote(with_session_id(url, shared_session_id(generation))).create()
        try:
            spark.conf.get("spark.app.name", None)  # the first RPC: is the session usable?
        except PySparkException as exc:
            spark.client.close()
            if exc.getCondition() != _SESSION_CLOSED:
                raise
            log.info("Spark Connect session generation %d was released; trying the next", generation)
            continue
        try:
            yield spark
        finally:
            spark.client.close()
        return
    raise SparkConnectError(
        f"the first {_SESSION_GENERATIONS} shared Spark Connect session ids on {endpoint(url)} were all released; "
        "restart the server: `reprocess spark-connect start` (a server it started), or however it was started."
    )


@contextmanager
def checked_session(url: str) -> Iterator[SparkSession]:
    """The shared session on the Connect server at ``url``, refused as a run's Spark task refuses it:
    unreachable, or holding another library (validate's sample, ``reprocess init``, the dry run)."""
    check_reachable(url)
    with client_env(), shared_session(url) as spark:
        check_library(spark, url)
        yield spark
