"""The JSON decoder's Jackson UDF (``reprocess/jvm/StrictJson.java``) as a jar, built by ``make install``.

``javac`` (the JDK 17 the stack requires) compiles the one source against pyspark's own jars (Spark's
``UDF3``, ``Row`` and jackson-core, pinned by the pyspark version), so the jar needs nothing new and
is never committed. A stamp (the source's and pyspark's hash) makes a second install a no-op. The
jar goes where ``scripts/env.sh``'s ``$REPROCESS_JSON_JAR`` names it, which the Connect server's and
spark-submit's ``--jars`` carry (reprocess.spark.conf.json_jar).

``python -m devstack.json_udf`` builds it.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Final

from devstack.process import ServiceError, state_dir

SOURCE: Final = Path(__file__).resolve().parent.parent / "reprocess" / "jvm" / "StrictJson.java"


def jar_path() -> Path:
    """``<state>/jvm/jars/json-udf/reprocess-json.jar``."""
    return state_dir() / "jvm" / "jars" / "json-udf" / "reprocess-json.jar"


def _stamp() -> str:
    import pyspark

    return hashlib.sha256(SOURCE.read_bytes() + pyspark.__version__.encode()).hexdigest()[:16]


def build() -> bool:
    """Compile the source into :func:`jar_path`; False when the jar of this source is there."""
    import pyspark

    spark_jars = Path(pyspark.__file__).parent / "jars"
    jar = jar_path()
    stamp = jar.with_name(jar.name + ".stamp")
    if jar.is_file() and stamp.is_file() and stamp.read_text().strip() == _stamp():
        return False
    javac = shutil.which("javac")
    if javac is None:
        raise ServiceError(
            "javac not found: the JSON decoder's UDF is compiled at install; install a JDK 17 "
            "(Debian: `sudo apt-get install -y openjdk-17-jdk-headless`), then run `make install`"
        )
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as classes:
        cmd = [javac, "--release", "17", "-nowarn", "-d", classes, "-cp", f"{spark_jars}/*", str(SOURCE)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ServiceError(f"javac could not compile {SOURCE} (exit {done.returncode}): {done.stderr[-2000:]}")
        partial = jar.with_name(jar.name + ".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as out:
            for cls in sorted(Path(classes).rglob("*.class")):
                out.write(cls, cls.relative_to(classes).as_posix())
        partial.replace(jar)
    stamp.write_text(_stamp())
    return True


def main() -> int:
    print(f"install: JSON UDF jar {'built' if build() else 'up to date'} ({jar_path()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
