"""The project's JVM jars: pinned Maven coordinates, one ``pom.xml`` per classpath set, fetched by ``make install``.

Each folder beside this file is one set (``kafka``: the broker and its tools; ``connect``: a Kafka
Connect worker with the JSON converter; ``debezium``: the PostgreSQL source connector as a Connect
plugin folder, with the PostgreSQL JDBC driver; ``debezium-jdbc``: Debezium's JDBC sink connector
as a plugin folder, the Kafka Connect peer ``make bench`` measures; ``spark``: what pyspark's own ``jars/`` lacks for
Spark's Kafka source and spark-avro; ``registry``: Apicurio Registry's application archive, which
the install unpacks; ``avro-converter``: a Connect plugin folder writing Avro through the registry;
``flink``: the Kafka and JDBC connectors of the Flink peer ``make bench`` measures, for the runtime of
the bench's own Flink venv).
Its ``pom.xml`` is the only list of coordinates and versions;
``mvn dependency:copy-dependencies`` copies the set's runtime closure into the state folder
(``jvm/jars/<set>/``). Maven's local repository (``~/.m2``) caches the downloads the way pip's cache
does, and a stamp (the pom's hash) makes a second install a no-op, so no jar is ever committed.

``python -m devstack.jvm [set…]`` fetches (what ``scripts/bootstrap.sh`` runs); :func:`jars` and
:func:`classpath` are what a service or a test starts a JVM with.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from devstack.process import ServiceError, state_dir

POMS: Final = Path(__file__).resolve().parent
SETS: Final = ("kafka", "connect", "debezium", "debezium-jdbc", "spark", "registry", "avro-converter", "flink")
STAMP: Final = ".installed"
INSTALL_HINT: Final = (
    "install Maven 3.8+ and Java 17 (Debian: `sudo apt-get install -y maven openjdk-17-jre-headless`), "
    "then run `make install`"
)


def pom(name: str) -> Path:
    if name not in SETS:
        raise ServiceError(f"unknown jar set {name!r}; the sets are {', '.join(SETS)} (folders of {POMS})")
    return POMS / name / "pom.xml"


def jar_dir(name: str) -> Path:
    """Where set ``name``'s jars are (``<state>/jvm/jars/<name>``)."""
    pom(name)
    return state_dir() / "jvm" / "jars" / name


def _stamp(name: str) -> str:
    return hashlib.sha256(pom(name).read_bytes()).hexdigest()[:16]


def fetched(name: str) -> bool:
    """The set's jars are there and were copied from the pom as it is now."""
    stamp = jar_dir(name) / STAMP
    return stamp.exists() and stamp.read_text().strip() == _stamp(name)


def jars(name: str) -> list[Path]:
    """The set's jar files, sorted; fails with the fix when ``make install`` has not fetched them."""
    if not fetched(name):
        raise ServiceError(
            f"the {name!r} jars are missing or older than devstack/jvm/{name}/pom.xml: run `make install` "
            f"(it fetches them into {jar_dir(name)})"
        )
    return sorted(jar_dir(name).glob("*.jar"))


def classpath(name: str) -> str:
    """The set's jars as a ``java -cp`` argument."""
    return ":".join(str(j) for j in jars(name))


def version(name: str, prop: str) -> str:
    """A version the set's pom pins (``<prop>`` in its ``<properties>``), e.g. ``version("kafka", "kafka.version")``."""
    match = re.search(rf"<{re.escape(prop)}>([^<]+)</{re.escape(prop)}>", pom(name).read_text())
    if match is None:
        raise ServiceError(f"devstack/jvm/{name}/pom.xml pins no <{prop}>")
    return match.group(1)


def _check_tools() -> str:
    mvn = shutil.which("mvn")
    if mvn is None or shutil.which("java") is None:
        missing = "mvn" if mvn is None else "java"
        raise ServiceError(f"{missing} not found: the JVM parts (Kafka, Spark's Kafka source) come from Maven Central; "
                           + INSTALL_HINT)  # fmt: skip
    return mvn


def _check_spark_version() -> None:
    """The spark set's jars must match the pip-installed pyspark, or Spark fails at the first read."""
    import pyspark

    pinned = version("spark", "spark.version")
    if pyspark.__version__ != pinned:
        raise ServiceError(
            f"devstack/jvm/spark/pom.xml pins Spark {pinned} but the venv has pyspark {pyspark.__version__}: "
            "set <spark.version> to the pyspark version (and check kafka-clients/commons-pool2 against "
            "spark-sql-kafka-0-10's own pom)"
        )


@contextlib.contextmanager
def _maven_lock() -> Iterator[None]:
    """One mvn at a time per machine: two runs on one ~/.m2 corrupt each other's downloads."""
    lock = Path.home() / ".m2" / ".reprocess-fetch.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def fetch(name: str) -> bool:
    """Copy set ``name``'s runtime closure into :func:`jar_dir`; False when it was already there."""
    if fetched(name):
        return False
    if name == "spark":
        _check_spark_version()
    mvn = _check_tools()
    target = jar_dir(name)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    cmd = [mvn, "-B", "-q", "-f", str(pom(name)), "dependency:copy-dependencies", "-DincludeScope=runtime",
           f"-DoutputDirectory={partial}"]  # fmt: skip
    with _maven_lock():
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise ServiceError(
            f"mvn could not resolve devstack/jvm/{name}/pom.xml (exit {done.returncode}). Maven Central must be "
            f"reachable (a proxy goes in ~/.m2/settings.xml); a download cut short is retried by `mvn -U`.\n"
            f"{(done.stdout + done.stderr)[-3000:]}"
        )
    for archive in partial.glob("*.tar.gz"):
        # A part published as an application archive (the registry) is used unpacked.
        with tarfile.open(archive) as tar:
            tar.extractall(partial / archive.name.removesuffix(".tar.gz"), filter="data")
        archive.unlink()
    (partial / STAMP).write_text(_stamp(name) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return True


def main(argv: list[str] | None = None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or list(SETS)
    try:
        for name in names:
            began = time.monotonic()
            if fetch(name):
                print(f"jars: {name}: {len(jars(name))} jars in {time.monotonic() - began:.1f}s -> {jar_dir(name)}")
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
