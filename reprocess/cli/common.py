"""What every command shares: the exit codes, the app database and Kafka config from their Airflow
connections (the hooks of ``reprocess.airflow.hooks``, resolved as Airflow resolves them: secrets
backend, ``AIRFLOW_CONN_*`` environment, metadata DB), and a service that did not answer as the
error naming its connection and setting."""

from __future__ import annotations

from typing import Any, Final

from confluent_kafka import KafkaException
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from reprocess.core.errors import SettingError

EXIT_OK: Final = 0
EXIT_FOUND: Final = 1  # the command ran and found a problem: a failed run, an invalid spec, an unknown pipeline
EXIT_USAGE: Final = 2  # the command line itself is wrong (argparse's own code)
EXIT_UNREACHABLE: Final = 3  # a setting is missing or a service (Postgres, Kafka, Spark) did not answer
EXIT_CODES: Final = (
    f"exit codes: {EXIT_OK} done (validate: no problem), {EXIT_FOUND} a problem was found (a failed run, an "
    f"invalid spec, an unknown pipeline, a refused reset), {EXIT_USAGE} wrong usage, {EXIT_UNREACHABLE} a setting "
    "is missing or a service did not answer; plan --detailed-exitcode: 0 no changes, 2 changes"
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
    """The Kafka client config (connection ``kafka_default``). librdkafka logs nothing (``log_level``
    0, unless the extra sets it): a wrong port is one error naming the connection
    (:func:`unreachable`), not a "Connection refused" line per retry."""
    from reprocess.airflow.hooks import KafkaConfigHook

    return {"log_level": 0, **KafkaConfigHook().client_config()}


def unreachable(exc: OperationalError | KafkaException) -> SettingError:
    """A service that did not answer as the error naming its connection and the setting it was
    reached by, with the reason (Postgres's own words; for Kafka a TCP connect to each broker)."""
    from reprocess.airflow.hooks import AppDatabaseHook, KafkaConfigHook

    if isinstance(exc, OperationalError):
        return AppDatabaseHook().unreachable(str(exc.orig).strip().splitlines()[0])
    from reprocess.kafka.clients import probe_brokers

    hook = KafkaConfigHook()
    return hook.unreachable(probe_brokers(hook.client_config()) or str(exc.args[0] if exc.args else exc))
