"""How a launcher finds a job: the spark-submit entry points' files in the installed package
(``spark_apps/``, installed as ``reprocess.spark_apps``), the ``module:function`` a job names, and
the environment variable a driver reads each secret from."""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

from reprocess.core.errors import ReprocessError

RUN_JOB = "run_job"
WARMUP = "warmup"


def app_path(name: str) -> Path:
    """The file of entry point ``name`` in the installed package (``spark-submit <it>``).

    Examples
    --------
    >>> app_path(RUN_JOB).name
    'run_job.py'
    """
    resource = files("reprocess.spark_apps") / f"{name}.py"
    if not isinstance(resource, Path) or not resource.is_file():
        raise ReprocessError(
            f"spark entry point {name!r} is not a file on disk ({resource}): spark-submit needs one. "
            "Install the reprocess wheel into a folder (pip install), not as a zip archive."
        )
    return resource


def resolve_job(job: str) -> Callable[..., Any]:
    """The function a ``module:function`` job reference names (called as ``function(spark, **kwargs)``).

    Examples
    --------
    >>> resolve_job("reprocess.spark.entry_points:secret_env").__name__
    'secret_env'
    """
    module, sep, name = job.partition(":")
    function = getattr(importlib.import_module(module), name, None) if sep else None
    if not callable(function):
        raise ReprocessError(
            f"job {job!r} does not name a function: use 'module:function', e.g. 'reprocess.runner.spark_run:read_job'"
        )
    return function


def secret_env(name: str) -> str:
    """The environment variable a spark-submit driver reads the job's secret ``name`` from.

    Examples
    --------
    >>> secret_env("db_url")
    'REPROCESS_DB_URL'
    """
    return f"REPROCESS_{name.upper()}"


def job_arguments(argv: list[str]) -> tuple[str, dict[str, str]]:
    """(``module:function``, keyword arguments) from ``job --name value …``.

    Examples
    --------
    >>> job_arguments(["reprocess.runner.spark_run:read_job", "--run-id", "r1", "--spec", "a.yaml"])
    ('reprocess.runner.spark_run:read_job', {'run_id': 'r1', 'spec': 'a.yaml'})
    """
    if not argv or argv[0].startswith("-"):
        raise SystemExit("usage: run_job.py module:function [--name value ...]")
    job, rest = argv[0], argv[1:]
    names, values = rest[::2], rest[1::2]
    if len(names) != len(values) or not all(n.startswith("--") for n in names):
        raise SystemExit(f"arguments must be --name value pairs, got {rest}")
    return job, {n[2:].replace("-", "_"): v for n, v in zip(names, values, strict=True)}


def run_job(argv: list[str] | None = None) -> int:
    """Run ``job --name value …`` in the driver's Spark session; a keyword parameter the command line
    leaves out is read from its secret's environment variable (:func:`secret_env`)."""
    job, kwargs = job_arguments(sys.argv[1:] if argv is None else argv)
    function = resolve_job(job)
    for name in inspect.signature(function).parameters:
        if name not in kwargs and secret_env(name) in os.environ:
            kwargs[name] = os.environ[secret_env(name)]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    try:
        function(spark, **kwargs)
    finally:
        spark.stop()
    return 0
