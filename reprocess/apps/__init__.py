"""spark-submit entry points, shipped inside the wheel so a run needs no checkout of the repo.

``spark-submit`` takes a file, not a module, so the operator is given the path of the
installed module (:func:`app_path`). The entry points live in this sub-package, not next to
the library's modules: Python puts a script's folder first on ``sys.path``, and this folder
holds nothing a library import could pick up by mistake (``reprocess/kafka.py`` would shadow
a ``kafka`` package).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

from reprocess.errors import ReprocessError

READ_STAGE = "read_stage"
RUN_JOB = "run_job"
WARMUP = "warmup"


def app_path(name: str) -> Path:
    """The file of entry point ``name`` in the installed package (``spark-submit <it>``).

    Examples
    --------
    >>> app_path(READ_STAGE).name
    'read_stage.py'
    """
    resource = files(__name__) / f"{name}.py"
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
    >>> resolve_job("reprocess.apps:secret_env").__name__
    'secret_env'
    """
    module, sep, name = job.partition(":")
    function = getattr(importlib.import_module(module), name, None) if sep else None
    if not callable(function):
        raise ReprocessError(
            f"job {job!r} does not name a function: use 'module:function', e.g. 'reprocess.job:stage_job'"
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
