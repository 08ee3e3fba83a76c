"""spark-submit entry point for any job: ``spark-submit run_job.py module:function [--name value …]``.

The Spark task (``reprocess.sparktask``) launches a job through this file when the Spark
connection is a ``spark`` one; over Spark Connect it calls the same function in the task.
Each ``--name value`` becomes the keyword argument ``name`` (dashes become underscores); a
keyword parameter the command line leaves out is read from ``REPROCESS_<NAME>``
(:func:`reprocess.apps.secret_env`), so secrets such as the database URL never appear on a
command line.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys

from reprocess.apps import resolve_job, secret_env


def job_arguments(argv: list[str]) -> tuple[str, dict[str, str]]:
    """(``module:function``, keyword arguments) from ``job --name value …``.

    Examples
    --------
    >>> job_arguments(["reprocess.job:stage_job", "--run-id", "r1", "--spec", "a.yaml"])
    ('reprocess.job:stage_job', {'run_id': 'r1', 'spec': 'a.yaml'})
    """
    if not argv or argv[0].startswith("-"):
        raise SystemExit("usage: run_job.py module:function [--name value ...]")
    job, rest = argv[0], argv[1:]
    names, values = rest[::2], rest[1::2]
    if len(names) != len(values) or not all(n.startswith("--") for n in names):
        raise SystemExit(f"arguments must be --name value pairs, got {rest}")
    return job, {n[2:].replace("-", "_"): v for n, v in zip(names, values, strict=True)}


def main(argv: list[str] | None = None) -> int:
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


if __name__ == "__main__":
    sys.exit(main())
