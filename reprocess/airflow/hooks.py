"""Connection → client, one hook per connection type the pipelines use. A hook owns its
connection id's default, its required keys and the Jinja form a Spark task's secrets take
(rendered by Airflow, handed to the job as ``REPROCESS_<NAME>``, never on a command line).

- :class:`AppDatabaseHook`: the app database (``reprocess_db``) as a migrated SQLAlchemy
  engine. Not the Postgres provider's ``PostgresHook``: its URI names the psycopg 3 driver, and
  the app database is reached through psycopg2 and the migrations of this package.
- :class:`KafkaConfigHook`: the Kafka provider's hook of ``kafka_default``, as the librdkafka
  config in its extra (``bootstrap.servers`` required).
- :class:`SchemaRegistryHook`: an Avro pipeline's Schema Registry (its ``schema_registry``
  connection: the host is the registry's URL, login/password its basic auth, the extra its TLS
  files) as a ``SchemaRegistryClient`` config.

Each hook names its connection in the product's errors: a missing one says how to add it
(``airflow connections add`` or the UI), an unreachable service names the connection and the
setting it was reached by (:meth:`setting`). :func:`read_metastore` lets a process outside
Airflow's own (the ``reprocess`` command) find connections stored in the metadata DB.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Final

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.sdk import BaseHook, Connection
from airflow.sdk.exceptions import AirflowNotFoundException

from reprocess.core.errors import ConnectionConfigError
from reprocess.core.spec import DEFAULT_REGISTRY_CONN

# Airflow's process context: the Task SDK's lookup outside a task (no supervisor) reads the
# environment and a configured secrets backend only; "server" adds the metadata DB.
PROCESS_CONTEXT: Final = "_AIRFLOW_PROCESS_CONTEXT"
SPARK_CONN_ID: Final = "spark_default"
SPARK_ADD: Final = "--conn-type spark_connect --conn-host HOST --conn-port 15002"


def read_metastore() -> None:
    """Look connections up as ``airflow connections get`` does (it sets the same context): secrets
    backend, ``AIRFLOW_CONN_*`` environment, then Airflow's metadata DB. Without it a connection
    added with ``airflow connections add`` or in the UI is not found by a plain process."""
    os.environ[PROCESS_CONTEXT] = "server"


def connection(conn_id: str, add: str) -> Connection:
    """``conn_id`` as Airflow resolves it; a missing one is the product's error, saying how to add it
    (``add``: the ``airflow connections add`` arguments after the id)."""
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException as exc:
        home = os.environ.get("AIRFLOW_HOME", "~/airflow")
        raise ConnectionConfigError(
            f"Airflow connection `{conn_id}` is not defined (looked in the secrets backend, "
            f"AIRFLOW_CONN_{conn_id.upper()} and the metadata DB of AIRFLOW_HOME={home}): add it with "
            f"`airflow connections add {conn_id} {add}` or in the UI (Admin > Connections)"
        ) from exc


def spark_unreachable(reason: str, conn_id: str = SPARK_CONN_ID) -> ConnectionConfigError:
    """No Spark Connect server answers at the connection's URL."""
    url = (spark_connect_url(conn_id) or "").split(";")[0].rstrip("/")  # its parameters may hold a token
    return ConnectionConfigError(
        f"`{conn_id}` `{url}`: {reason}; check the connection's host and port, or start the server there "
        "(`reprocess spark-connect start`; the embedded one: `make services`)"
    )


def spark_connect_url(conn_id: str = SPARK_CONN_ID) -> str | None:
    """``conn_id``'s Spark Connect URL when it is a ``spark_connect`` connection; None for a
    spark-submit one (type ``spark``). A missing connection is the product's error saying how to add it.

    One lookup: Airflow logs "Connection schemes (type: spark_connect) shall not contain '_'" on each
    lookup of such a connection from its metadata DB (``Connection.get_uri()`` filling its secrets
    cache), and the provider's hook would look it up a second time."""
    conn = connection(conn_id, SPARK_ADD)
    if conn.conn_type != SparkConnectHook.conn_type:
        return None
    return str(_LookedUpSparkConnect(conn).get_connection_url())


class _LookedUpSparkConnect(SparkConnectHook):
    """The provider's URL rules (TLS, token, user) on a connection already looked up."""

    def __init__(self, conn: Connection) -> None:
        super().__init__(conn.conn_id)
        self._looked_up = conn

    def get_connection(self, conn_id: str) -> Connection:  # type: ignore[override]
        return self._looked_up


class AppDatabaseHook(BaseHook):
    """The app database: runs, ledger, dead letters and the targets."""

    conn_name_attr = "conn_id"
    default_conn_name = "reprocess_db"
    conn_type = "postgres"
    hook_name = "reprocess app database"

    def __init__(self, conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.conn_id = conn_id

    ADD: ClassVar[str] = (
        "--conn-type postgres --conn-host HOST --conn-port 5432 --conn-schema DATABASE --conn-login USER "
        "--conn-password PASSWORD"
    )

    def url(self) -> str:
        return str(connection(self.conn_id, self.ADD).get_uri())

    def setting(self) -> str:
        """The connection and where it points (no secrets), for an error that it did not answer."""
        conn = connection(self.conn_id, self.ADD)
        return f"`{self.conn_id}` `host={conn.host} port={conn.port} schema={conn.schema} login={conn.login}`"

    def unreachable(self, reason: str) -> ConnectionConfigError:
        return ConnectionConfigError(
            f"{self.setting()}: {reason}; check the connection's host, port, schema (the database), login and password"
        )

    def denied(self, reason: str) -> ConnectionConfigError:
        """The connection's login lacks a right (Postgres's ``permission denied for ...``): the fix is the grant."""
        from reprocess.postgres.db import grant_for

        login = connection(self.conn_id, self.ADD).login or "the connection's login"
        return ConnectionConfigError(
            f"{self.setting()}: {reason}; as the object's owner or a superuser, {grant_for(reason, login)}, or set "
            "the connection's login to a role that has it"
        )

    def engine(self) -> Any:
        """A SQLAlchemy engine on the database, migrated."""
        return _migrated(self.url())

    @classmethod
    def server_engine(cls) -> Any:
        """The same engine where no task runs (the API server's plugin, its listener), from the
        secrets backends: the Task SDK's connection lookup serves tasks only."""
        from airflow.models.connection import Connection

        return _migrated(Connection.get_connection_from_secrets(cls.default_conn_name).get_uri())

    @classmethod
    def url_template(cls) -> str:
        return "{{ conn." + cls.default_conn_name + ".get_uri() }}"


def _migrated(url: str) -> Any:
    from reprocess.postgres.db import make_engine, migrate

    engine = make_engine(url)
    migrate(engine)
    return engine


class KafkaConfigHook(KafkaBaseHook):
    """The Kafka connection's client config: librdkafka keys (and ``java.*`` ones for Spark's
    Kafka source) in its extra."""

    ADD: ClassVar[str] = '--conn-type kafka --conn-extra \'{"bootstrap.servers": "HOST:9092"}\''

    def client_config(self) -> dict[str, Any]:
        from reprocess.kafka.clients import require_bootstrap

        config = dict(connection(self.kafka_config_id, self.ADD).extra_dejson)
        require_bootstrap(config)
        return config

    def setting(self) -> str:
        servers = connection(self.kafka_config_id, self.ADD).extra_dejson.get("bootstrap.servers")
        return f"`{self.kafka_config_id}` `bootstrap.servers={servers}`"

    def unreachable(self, reason: str) -> ConnectionConfigError:
        return ConnectionConfigError(f"{self.setting()}: {reason}; check the connection's extra")

    def check_answers(self) -> None:
        """Raise :meth:`unreachable` when no broker of the connection accepts a connect."""
        from reprocess.kafka.clients import no_broker_answers

        if refused := no_broker_answers(self.client_config()):
            raise self.unreachable(refused)

    @classmethod
    def config_template(cls) -> str:
        return "{{ conn." + cls.default_conn_name + ".extra }}"


class SchemaRegistryHook(BaseHook):
    """A Schema Registry connection as the client config :func:`reprocess.kafka.registry.client_config` checks."""

    conn_name_attr = "conn_id"
    default_conn_name: ClassVar[str] = DEFAULT_REGISTRY_CONN
    conn_type = "http"
    hook_name = "Schema Registry"

    ADD: ClassVar[str] = "--conn-type http --conn-host https://REGISTRY:8081"

    def __init__(self, conn_id: str = DEFAULT_REGISTRY_CONN) -> None:
        super().__init__()
        self.conn_id = conn_id

    def setting(self) -> str:
        return f"`{self.conn_id}` `host={connection(self.conn_id, self.ADD).host}`"

    def unreachable(self, reason: str) -> ConnectionConfigError:
        return ConnectionConfigError(f"{self.setting()}: {reason}; check the connection's host (the registry's URL)")

    def client_config(self) -> dict[str, Any]:
        from reprocess.kafka.registry import client_config

        conn = connection(self.conn_id, self.ADD)
        return client_config({"url": conn.host, "login": conn.login, "password": conn.password,
                              "extra": conn.extra_dejson})  # fmt: skip

    @staticmethod
    def config_template(conn_id: str) -> str:
        """The connection rendered as the JSON :func:`reprocess.kafka.registry.client_config` reads."""
        conn = "conn." + conn_id
        return (
            '{"url": {{ ' + conn + ".host | tojson }}, "
            '"login": {{ ' + conn + ".login | tojson }}, "
            '"password": {{ ' + conn + ".password | tojson }}, "
            '"extra": {{ ' + conn + ".extra_dejson | tojson }}}"
        )
