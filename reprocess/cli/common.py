"""What every command shares: the exit codes, and the app database and Kafka config from their
Airflow connections (the hooks of ``reprocess.airflow.hooks``, which read the ``AIRFLOW_CONN_*``
environment forms that scripts/env.sh sets, as tasks do)."""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import Engine

EXIT_OK: Final = 0
EXIT_FOUND: Final = 1  # the command ran and found a problem: a failed run, an invalid spec, an unknown pipeline
EXIT_USAGE: Final = 2  # the command line itself is wrong (argparse's own code)
EXIT_UNREACHABLE: Final = 3  # a setting is missing or a service (Postgres, Kafka, Spark) did not answer
EXIT_CODES: Final = (
    f"exit codes: {EXIT_OK} done (validate: no problem), {EXIT_FOUND} a problem was found (a failed run, an "
    f"invalid spec, an unknown pipeline, a refused reset), {EXIT_USAGE} wrong usage, {EXIT_UNREACHABLE} a setting "
    "is missing or a service did not answer"
)


def app_engine() -> Engine:
    """An engine on the migrated app database (connection ``reprocess_db``)."""
    from reprocess.airflow.hooks import AppDatabaseHook

    return AppDatabaseHook().engine()


def app_db_url() -> str:
    """The app database's URL, for a command that only reads it (``validate`` migrates nothing)."""
    from reprocess.airflow.hooks import AppDatabaseHook

    return AppDatabaseHook().url()


def kafka_config() -> dict[str, Any]:
    """The Kafka client config (connection ``kafka_default``)."""
    from reprocess.airflow.hooks import KafkaConfigHook

    return KafkaConfigHook().client_config()
