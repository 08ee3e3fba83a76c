"""Airflow's metadata DB and the ``spark`` pool, prepared in this process (``make demo``, ``make up``, the tests)."""

from __future__ import annotations

import logging

from reprocess.airflow.common import SPARK_POOL, SPARK_POOL_DESCRIPTION, SPARK_POOL_SLOTS


def prepare_airflow(slots: int = SPARK_POOL_SLOTS) -> None:
    """Metadata DB and the Spark pool (both idempotent), what ``airflow db migrate`` and ``airflow
    pools set`` do, in this process: each command would import Airflow again (~3 s of CPU).
    Two slots: on the one Connect server two runs at once gave 1.3× one run's records/s, four no
    more than two while each run took 2.7× as long (``make bench``, docs/performance.md)."""
    from airflow.models.pool import Pool
    from airflow.utils.db import upgradedb

    # Airflow's migration logs each of its steps at INFO; the CLI's output went to /dev/null.
    quiet = [logging.getLogger(name) for name in ("alembic", "airflow.utils.db")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.WARNING)
    try:
        upgradedb()
        Pool.create_or_update_pool(SPARK_POOL, slots, SPARK_POOL_DESCRIPTION, include_deferred=False)
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
