"""The JSON decoder's Jackson UDF (``reprocess/jvm/StrictJson.java``) compiled into the package as
``reprocess/jvm/reprocess-json.jar``: by ``make install`` in a checkout, and by the build backend
(:mod:`reprocess_build_backend`) when a wheel or an sdist is built.

``javac`` (a JDK 17 or newer, ``--release 17``) compiles the sources in ``reprocess/jvm`` against pyspark's own jars
(Spark's ``UDF3`` and ``Row``, jackson-core), the pyspark pinned in ``pyproject.toml``, so the jar
needs nothing Spark lacks. The jar is never committed (``.gitignore``). It records a stamp (the
sources' and the pinned pyspark's hash) and its entries carry a fixed date, so a second build is a
no-op and one source built twice gives the same bytes (the Spark Connect server's library
fingerprint hashes the jar: a wheel and a checkout of one commit agree).

``python build_backend/json_jar.py`` builds it (scripts/bootstrap.sh).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
SOURCE: Final = ROOT / "reprocess" / "jvm" / "StrictJson.java"
JAR: Final = SOURCE.with_name("reprocess-json.jar")

STAMP_ENTRY: Final = "META-INF/reprocess-json.stamp"
_EPOCH: Final = (1980, 1, 1, 0, 0, 0)
_JDK_FIX: Final = "install a JDK 17 (Debian: `sudo apt-get install -y openjdk-17-jdk-headless`) or set JAVA_HOME to one"


def _sources() -> list[Path]:
    """The UDF's Java sources: :data:`SOURCE` and the classes beside it."""
    return sorted(SOURCE.parent.glob("*.java"))


class JarBuildError(RuntimeError):
    """The jar could not be built; the message says the fix."""


def pinned_pyspark() -> str:
    """The ``pyspark==X`` requirement of ``pyproject.toml``: the Spark API the jar is compiled against."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (pin,) = [d for d in project["dependencies"] if re.match(r"pyspark\s*==", d)]
    return pin.replace(" ", "")


def _stamp() -> str:
    sources = b"".join(p.read_bytes() + b"\0" for p in _sources())
    return hashlib.sha256(sources + pinned_pyspark().encode()).hexdigest()[:16]


def fresh() -> bool:
    """True when the jar in the package was built from this source against the pinned pyspark."""
    try:
        with zipfile.ZipFile(JAR) as jar:
            return jar.read(STAMP_ENTRY).decode() == _stamp()
    except (OSError, KeyError, zipfile.BadZipFile):
        return False


def build_requires() -> list[str]:
    """What a build environment needs to build the jar: the pinned pyspark, unless the jar is fresh
    (a checkout after ``make install``, an sdist that carries it)."""
    return [] if fresh() else [pinned_pyspark()]


def _javac() -> str:
    home = os.environ.get("JAVA_HOME", "")
    javac = str(Path(home, "bin", "javac")) if home and Path(home, "bin", "javac").is_file() else shutil.which("javac")
    if javac is None:
        raise JarBuildError(
            "javac not found: the reprocess package carries the JSON decoder's UDF compiled from "
            f"{SOURCE.parent.name}/*.java; {_JDK_FIX}, then build again"
        )
    return javac


def _spark_jars() -> Path:
    try:
        import pyspark
    except ImportError as err:
        raise JarBuildError(
            f"pyspark is not importable: the JSON decoder's UDF compiles against its jars; install {pinned_pyspark()} "
            "in the build environment (pip's isolated build installs it by itself)"
        ) from err
    if f"pyspark=={pyspark.__version__}" != pinned_pyspark():
        raise JarBuildError(f"pyspark {pyspark.__version__} is installed; the package pins {pinned_pyspark()}")
    return Path(pyspark.__file__).parent / "jars"


def build() -> bool:
    """Compile the source into :data:`JAR`; False when the jar of this source is there."""
    if fresh():
        return False
    javac, spark_jars = _javac(), _spark_jars()
    with tempfile.TemporaryDirectory(prefix="reprocess-json-") as tmp:
        classes = Path(tmp)
        cmd = [javac, "--release", "17", "-nowarn", "-d", str(classes), "-cp", f"{spark_jars}/*", *map(str, _sources())]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise JarBuildError(
                f"javac could not compile {SOURCE.parent}/*.java (exit {done.returncode}): {done.stderr[-2000:]}"
            )
        partial = JAR.with_name(JAR.name + ".partial")
        entries = {c.relative_to(classes).as_posix(): c.read_bytes() for c in sorted(classes.rglob("*.class"))}
        with zipfile.ZipFile(partial, "w") as out:
            for name, data in (*entries.items(), (STAMP_ENTRY, _stamp().encode())):
                out.writestr(zipfile.ZipInfo(name, _EPOCH), data, compress_type=zipfile.ZIP_DEFLATED)
        partial.replace(JAR)
    return True


def main() -> int:
    try:
        built = build()
    except JarBuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"install: JSON decoder jar {'built' if built else 'up to date'} ({JAR.relative_to(ROOT)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
