"""The spark-submit settings of every run (the DAG, the bench, the tests) in one place.

A run is a short batch job, so the driver JVM's start-up is a large share of it: a 1,000-record
run spent ~10 s of its 28 s loading classes. An application class-data-sharing archive (JDK
AppCDS, ``-XX:SharedArchiveFile``) of the classes a run loads, built once per install by
:func:`build_class_archive`, cuts that (measured, local[2]: 28.5 s → 18 s).

Not used, measured: ``-XX:TieredStopAtLevel=1`` (C1 JIT only) saved ~1 s at 1,000 records
but cost 40 % at 3 M (70 s vs 44-51 s): from_json and the aggregation need C2's code.

A missing archive is ignored by the JVM (no error, just no speed-up); an archive from another
JVM or Spark build is refused with a one-line warning and the run goes on.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from reprocess.core.errors import SparkSetupError
from reprocess.formats.json_udf import jar_path as json_udf_jar
from reprocess.spark.entry_points import WARMUP, app_path

CLASS_ARCHIVE_ENV: Final = "REPROCESS_SPARK_CLASS_ARCHIVE"
JARS_ENV: Final = "REPROCESS_SPARK_JARS"
# Ivy settings for --packages (``spark.jars.ivySettings``): where a cluster's spark-submit resolves
# the coordinates when the default chain does not fit (devstack/jvm/ivysettings.xml: Central only).
IVY_SETTINGS_ENV: Final = "REPROCESS_SPARK_IVY_SETTINGS"
# Spark's Kafka source and spark-avro, at pyspark's version: what pyspark's own jars/ lacks. A
# cluster gets them with --packages (docs/clusters.md); devstack/jvm/spark/pom.xml pins the same
# coordinates for the local jars (a unit test holds the two together).
PACKAGES: Final = ("org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0", "org.apache.spark:spark-avro_2.13:4.2.0")

# Local mode's master: eight task threads, and up to four attempts of a task (``local[N,F]``).
# Eight on a 2-core machine, because a read of many small ranges waits on the broker more than it
# computes (reprocess.spark.read): 1,000 partitions x 21 records read in 10.1-10.6 s on 2 threads,
# 3.8-4.2 s on 8 (same server, 8 tasks); a 4-partition 1 M job has 4 tasks either way. Plain
# ``local[N]`` fails the whole job at a task's first failure (a Python worker killed, a dropped
# connection); four is ``spark.task.maxFailures``' default on a cluster, which local mode ignores.
# A retried task never doubles a staged row (reprocess.postgres.stage_write).
LOCAL_MASTER: Final = "local[8,4]"

# The JVM's JIT leaves a method of more than 8,000 bytecodes interpreted. The code Spark generates
# for a job's first stage (the decoder's expressions and the sort before the newest-per-key
# aggregation, ``sort_addToSorter``) is 10-19 KB, so every record ran through the interpreter
# (Spark logs "Generated method too long to be JIT compiled"). The common Spark tuning lifts that.
JIT_OPTIONS: Final = "-XX:-DontCompileHugeMethods"

# Spark's own INFO lines (~800 in a 5,000-record spark-submit task's log) are kept out by the
# package's log4j2 file (log4j2.properties beside this module), at WARN unless the level is set.
LOG_LEVEL_ENV: Final = "REPROCESS_SPARK_LOG_LEVEL"
LOG_LEVELS: Final = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")
DEFAULT_LOG_LEVEL: Final = "WARN"
LOG_CONFIG: Final = Path(__file__).resolve().with_name("log4j2.properties")

BASE_CONF: Final[Mapping[str, str]] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.extraJavaOptions": JIT_OPTIONS,
    "spark.executor.extraJavaOptions": JIT_OPTIONS,
}


def class_archive() -> Path | None:
    """The class archive named by ``$REPROCESS_SPARK_CLASS_ARCHIVE``, None when unset."""
    value = os.environ.get(CLASS_ARCHIVE_ENV)
    return Path(value) if value else None


def log_level(level: str | None = None) -> str:
    """The driver's log level: ``level``, else ``$REPROCESS_SPARK_LOG_LEVEL``, else WARN; upper case.

    Examples
    --------
    >>> log_level("info")
    'INFO'
    >>> log_level("loud")
    Traceback (most recent call last):
    ...
    reprocess.core.errors.SparkSetupError: Spark log level 'loud' is not one of OFF, FATAL, ERROR, WARN, INFO, \
DEBUG, TRACE, ALL (set [reprocess] spark_log_level or $REPROCESS_SPARK_LOG_LEVEL to one)
    """
    value = (level or os.environ.get(LOG_LEVEL_ENV) or DEFAULT_LOG_LEVEL).strip().upper()
    if value not in LOG_LEVELS:
        raise SparkSetupError(
            f"Spark log level {value.lower()!r} is not one of {', '.join(LOG_LEVELS)} "
            f"(set [reprocess] spark_log_level or ${LOG_LEVEL_ENV} to one)"
        )
    return value


def log_options(level: str | None = None) -> str:
    """JVM options of a driver logging through the package's log4j2 file at :func:`log_level`.

    Examples
    --------
    >>> log_options("INFO").split()[1]
    '-Dreprocess.spark.logLevel=INFO'
    """
    return f"-Dlog4j2.configurationFile=file:{LOG_CONFIG} -Dreprocess.spark.logLevel={log_level(level)}"


def spark_conf(
    extra: Mapping[str, str] | None = None, *, level: str | None = None, quiet: bool = True
) -> dict[str, str]:
    """``--conf`` values for ``spark-submit spark_apps/run_job.py``; ``extra`` wins. The driver logs at
    :func:`log_level` (``level``) unless ``quiet`` is False: a driver on a cluster node
    (deploy mode ``cluster``) has no such file, and keeps the cluster's logging.

    Examples
    --------
    >>> saved = os.environ.pop(CLASS_ARCHIVE_ENV, None)
    >>> spark_conf(quiet=False)["spark.driver.extraJavaOptions"]
    '-XX:-DontCompileHugeMethods'
    >>> spark_conf(level="info")["spark.driver.extraJavaOptions"] == f"{JIT_OPTIONS} {log_options('INFO')}"
    True
    >>> os.environ[CLASS_ARCHIVE_ENV] = "/x/spark.jsa"
    >>> spark_conf({"spark.sql.shuffle.partitions": "8"}, quiet=False)["spark.driver.extraJavaOptions"]
    '-XX:-DontCompileHugeMethods -XX:SharedArchiveFile=/x/spark.jsa'
    >>> if saved is None:
    ...     del os.environ[CLASS_ARCHIVE_ENV]
    ... else:
    ...     os.environ[CLASS_ARCHIVE_ENV] = saved
    """
    conf = dict(BASE_CONF)
    driver = [JIT_OPTIONS]
    archive = class_archive()
    if archive is not None:
        driver.append(f"-XX:SharedArchiveFile={archive}")
    if quiet:
        driver.append(log_options(level))
    conf["spark.driver.extraJavaOptions"] = " ".join(driver)
    ivy_settings = os.environ.get(IVY_SETTINGS_ENV)
    if ivy_settings:
        conf["spark.jars.ivySettings"] = ivy_settings
    conf.update(extra or {})
    return conf


def source_jars() -> list[str]:
    """The jar files named by ``$REPROCESS_SPARK_JARS``: comma-separated files or folders (each
    folder's ``*.jar``); ``make install`` fetches them and ``scripts/env.sh`` names the folder.
    Empty when unset or empty: then spark-submit resolves :data:`PACKAGES` itself.
    """
    found: list[str] = []
    for item in filter(None, os.environ.get(JARS_ENV, "").split(",")):
        path = Path(item)
        jars = sorted(str(j) for j in path.glob("*.jar")) if path.is_dir() else [str(path)]
        if not jars or not all(Path(j).is_file() for j in jars):
            raise SparkSetupError(f"${JARS_ENV} names {item}, which holds no jar: run `make install` (it fetches them)")
        found += jars
    return found


def dependency_args(*, json_udf: bool = True) -> dict[str, str]:
    """``jars`` (local files) or ``packages`` (Maven coordinates) for spark-submit: how the driver
    and executors get Spark's Kafka source, and with ``json_udf`` the JSON decoder's jar from the
    package (spark-submit ships a local ``--jars`` file to the executors; a Spark Connect session
    gets it as an artifact instead: reprocess.formats.json_udf).

    Examples
    --------
    >>> saved = os.environ.pop(JARS_ENV, None)
    >>> dependency_args(json_udf=False)
    {'packages': 'org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0,org.apache.spark:spark-avro_2.13:4.2.0'}
    >>> dependency_args()["jars"] == str(json_udf_jar())
    True
    >>> if saved is not None:
    ...     os.environ[JARS_ENV] = saved
    """
    jars, json = source_jars(), [str(json_udf_jar())] if json_udf else []
    if jars:
        return {"jars": ",".join(jars + json)}
    return {"packages": ",".join(PACKAGES), **({"jars": ",".join(json)} if json else {})}


def spark_submit_command(
    app: Path | str, *app_args: str, extra: Mapping[str, str] | None = None, master: str = LOCAL_MASTER
) -> list[str]:
    """``spark-submit`` on ``master`` (:data:`LOCAL_MASTER`) with :func:`spark_conf` (the way the DAG's
    operator runs it).

    Examples
    --------
    >>> saved = [os.environ.pop(name, None) for name in (CLASS_ARCHIVE_ENV, JARS_ENV)]
    >>> cmd = spark_submit_command("app.py", "--run-id", "r1", extra={"spark.ui.enabled": "true"})
    >>> cmd[:4], cmd[5]
    (['spark-submit', '--master', 'local[8,4]', '--packages'], '--jars')
    >>> cmd[7:9], cmd[-3:]
    (['--conf', 'spark.ui.enabled=true'], ['app.py', '--run-id', 'r1'])
    >>> for name, value in zip((CLASS_ARCHIVE_ENV, JARS_ENV), saved, strict=True):
    ...     if value is not None:
    ...         os.environ[name] = value
    """
    cmd = ["spark-submit", "--master", master]
    for name, value in dependency_args().items():
        cmd += [f"--{name}", value]
    for name, value in spark_conf(extra).items():
        cmd += ["--conf", f"{name}={value}"]
    return [*cmd, str(app), *app_args]


def _archive_stamp() -> str:
    """What the archive depends on: the Spark jars and the JVM (a change means rebuild)."""
    import pyspark

    jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True).stderr
    return json.dumps({"pyspark": pyspark.__version__, "jars": jars, "java": java.strip()}, sort_keys=True)


def build_class_archive(archive: Path, spec_file: Path) -> bool:
    """Build the archive by running ``spark_apps/warmup.py`` on ``spec_file`` (no services
    needed) with ``-XX:ArchiveClassesAtExit``; returns False when an up-to-date one exists. Takes ~40 s.
    """
    stamp_file = archive.with_name(archive.name + ".stamp")
    stamp = _archive_stamp()
    if archive.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return False
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    dump = {"spark.driver.extraJavaOptions": f"{JIT_OPTIONS} -XX:ArchiveClassesAtExit={partial}"}
    cmd = spark_submit_command(app_path(WARMUP), "--spec", str(spec_file), extra=dump)
    started = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0 or not partial.exists():
        raise SparkSetupError(
            f"building the Spark class archive failed ({out.returncode}):\n{(out.stdout + out.stderr)[-3000:]}"
        )
    partial.replace(archive)  # atomic: a run never sees half an archive
    stamp_file.write_text(stamp)
    print(f"spark: class archive {archive} built in {time.monotonic() - started:.0f}s")
    return True


if __name__ == "__main__":
    import sys

    target = class_archive()
    if target is None or len(sys.argv) != 2:
        raise SystemExit(f"usage: {CLASS_ARCHIVE_ENV}=<archive> python -m reprocess.spark.conf <pipeline spec YAML>")
    if not build_class_archive(target, Path(sys.argv[1])):
        print(f"spark: class archive {target} is up to date")
