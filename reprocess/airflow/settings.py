"""The product's own Airflow settings: section ``[reprocess]`` of Airflow's configuration.

Declared in the provider info (``airflow config list`` shows them) and read through Airflow's
``conf``, so each comes from ``airflow.cfg``, its ``AIRFLOW__REPROCESS__<OPTION>`` environment form
or a secrets backend, as any Airflow option does. ``reprocess.core`` imports no Airflow: what it
needs of a setting is passed in.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from reprocess.core.errors import SettingError
from reprocess.formats.specs import PIPELINES_DIR_ENV

SECTION: Final = "reprocess"
PIPELINES_DIR: Final = "pipelines_dir"
SPARK_LOG_LEVEL: Final = "spark_log_level"


def pipelines_dir() -> Path:
    """The folder of specs: ``REPROCESS_PIPELINES_DIR`` (the tests use it), else ``[reprocess] pipelines_dir``.

    There is no default: an installed package has no folder of specs of its own, and a checkout
    sets the option to its ``pipelines/`` in scripts/env.sh.

    Raises
    ------
    SettingError
        Neither is set; the message names both and their forms.
    """
    from airflow.configuration import conf

    value = os.environ.get(PIPELINES_DIR_ENV) or conf.get(SECTION, PIPELINES_DIR, fallback=None)
    if not value:
        raise SettingError(
            f"no folder of pipeline specs is configured: set Airflow's [{SECTION}] {PIPELINES_DIR} "
            f"(airflow.cfg, or AIRFLOW__{SECTION.upper()}__{PIPELINES_DIR.upper()}=/path/to/specs) to the folder "
            f"of your *.yaml specs, for the DAG processor, the workers and the reprocess command alike "
            f"({PIPELINES_DIR_ENV} overrides it)"
        )
    return Path(value)


def spark_log_level() -> str:
    """The log level of the Spark drivers the package starts (a spark-submit task, the Connect server):
    ``REPROCESS_SPARK_LOG_LEVEL``, else ``[reprocess] spark_log_level``, else WARN, which keeps
    Spark's INFO lines out of a task's log (``reprocess.spark.conf.log_level`` checks the value)."""
    from airflow.configuration import conf

    from reprocess.spark.conf import LOG_LEVEL_ENV, log_level

    return log_level(os.environ.get(LOG_LEVEL_ENV) or conf.get(SECTION, SPARK_LOG_LEVEL, fallback=None))
