"""A configuration fault met by a task, as the error ``reprocess validate`` gives for it: the cause,
the connection's name and the setting it was reached by (never its password), and the fix.

A login the service rejects, a right the login lacks, a service that refuses the connection's
address when the run first reaches it: a retry meets the same fault after minutes of backoff, and
its own error (a run "is failed, not staged") would hide this one. So each pipeline task
(:class:`ConfigFaultMixin`) raises such a fault as :class:`~reprocess.core.errors.ConnectionConfigError`,
which the DAGs' retry policy fails at once. What a retry can mend stays as it was: a connection the
server closed, a timeout, a registry's 5xx, and an address that refuses a later task of a run whose
first task reached it (a restart, not a setting: the commit's Postgres, the mirror's broker).

Each fault is recognized in the exception chain:

- the app database (``reprocess_db``): psycopg2's errors opening a session that name a login or a
  database (``password authentication failed``, ``database "x" does not exist``), or, in the run's
  first task (``first_contact``), its address (``connection refused``); and SQLSTATE 42501
  (``permission denied for schema s``: the fix is the ``GRANT``);
- Spark Connect (``spark_default``): the launcher's check that nothing listens at the URL (a run's
  Spark task is its first and only one to reach Spark);
- the Schema Registry (``registry_conn``, set on the tasks that first read it): a registry error
  caused by a refused connection or a host name that does not resolve.

Kafka (``kafka_default``) is checked before a ``first_contact`` task runs: librdkafka retries a
refused broker until its request times out (30 s) and then says only "transport failure".
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import Any, Final

from airflow.providers.standard.decorators.python import _PythonDecoratedOperator
from airflow.sdk.bases.decorator import task_decorator_factory

from reprocess.airflow.hooks import KafkaConfigHook
from reprocess.core.errors import ConnectionConfigError, RegistryError, SparkConnectError

# What psycopg2 says when it cannot open a session with the connection's settings (no SQLSTATE: the
# server never ran a statement). Not "server closed the connection" or "the database system is
# starting up": a retry mends those.
_PG_LOGIN: Final = re.compile(
    r"password authentication failed|no pg_hba\.conf entry|role \S+ does not exist|database \S+ does not exist",
    re.IGNORECASE,
)
_PG_ADDRESS: Final = re.compile(r"connection refused|could not translate host name|name or service not known", re.I)
# None: the session never opened; else invalid password, authorization or database name.
_PG_SETUP_CODES: Final = (None, "28P01", "28000", "3D000")
INSUFFICIENT_PRIVILEGE: Final = "42501"
# A refused or unresolvable address in a client library's words (httpx, requests, the socket).
_NO_ADDRESS: Final = re.compile(
    r"connection refused|name or service not known|nodename nor servname|temporary failure in name resolution",
    re.IGNORECASE,
)


def config_fault(
    error: BaseException, registry_conn: str | None = None, first_contact: bool = False
) -> ConnectionConfigError | None:
    """``error`` as the configuration fault it is, naming its connection; None when it is none
    (or already the product's :class:`ConnectionConfigError`). ``first_contact``: the task is the
    run's first to reach the app database, so a refused address is the connection's."""
    from reprocess.airflow.hooks import AppDatabaseHook, SchemaRegistryHook, spark_unreachable

    if isinstance(error, ConnectionConfigError):
        return None
    for exc in _chain(error):
        driver = getattr(exc, "orig", exc)  # SQLAlchemy wraps the driver's error
        if _is_psycopg2(driver):
            reason = _first_line(driver)
            if getattr(driver, "pgcode", None) == INSUFFICIENT_PRIVILEGE:
                return AppDatabaseHook().denied(reason)
            setting = _PG_LOGIN.search(str(driver)) or (first_contact and _PG_ADDRESS.search(str(driver)))
            if getattr(driver, "pgcode", None) in _PG_SETUP_CODES and setting:
                return AppDatabaseHook().unreachable(reason)
            return None
        if isinstance(exc, SparkConnectError) and isinstance(exc.__cause__, OSError):
            return spark_unreachable(_os_reason(exc.__cause__))
        if isinstance(exc, RegistryError) and registry_conn is not None:
            refused = next((m for e in _chain(exc) if (m := _NO_ADDRESS.search(str(e)))), None)
            return SchemaRegistryHook(registry_conn).unreachable(refused.group(0).lower()) if refused else None
    return None


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, then its causes and contexts, each once."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _is_psycopg2(exc: object) -> bool:
    import psycopg2

    return isinstance(exc, psycopg2.Error)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _os_reason(exc: OSError) -> str:
    return str(exc.strerror or exc).lower()


def _naming_config_faults(execute: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(execute)
    def wrapper(self: ConfigFaultMixin, *args: Any, **kwargs: Any) -> Any:
        try:
            if self.first_contact:
                KafkaConfigHook().check_answers()
            return execute(self, *args, **kwargs)
        except Exception as exc:
            fault = config_fault(exc, self.registry_conn, self.first_contact)
            if fault is None:
                raise
            raise fault from exc

    wrapper._names_config_faults = True  # type: ignore[attr-defined]
    return wrapper


class ConfigFaultMixin:
    """An operator whose ``execute`` raises a configuration fault as the connection's error (see
    the module); ``registry_conn`` is the Schema Registry connection the task is the first of its
    run to read, if any; ``first_contact``: the task is its run's first to reach Kafka and Postgres."""

    registry_conn: str | None = None
    first_contact: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        execute = cls.execute  # type: ignore[attr-defined]
        if not getattr(execute, "_names_config_faults", False):
            cls.execute = _naming_config_faults(execute)  # type: ignore[attr-defined]


class PipelinePythonOperator(ConfigFaultMixin, _PythonDecoratedOperator):
    """The ``@task`` operator of a pipeline's DAGs: a configuration fault fails it at once, named."""

    custom_operator_name = "@task"

    def __init__(self, *, registry_conn: str | None = None, first_contact: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.registry_conn = registry_conn
        self.first_contact = first_contact


def pipeline_task(**kwargs: Any) -> Callable[..., Any]:
    """``@task`` for a task that reaches the pipeline's services (:class:`PipelinePythonOperator`)."""
    return task_decorator_factory(decorated_operator_class=PipelinePythonOperator, **kwargs)
