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
"""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from airflow.sdk import BaseHook

from reprocess.core.spec import DEFAULT_REGISTRY_CONN


class AppDatabaseHook(BaseHook):
    """The app database: runs, ledger, dead letters and the targets."""

    conn_name_attr = "conn_id"
    default_conn_name = "reprocess_db"
    conn_type = "postgres"
    hook_name = "reprocess app database"

    def __init__(self, conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.conn_id = conn_id

    def url(self) -> str:
        return str(self.get_connection(self.conn_id).get_uri())

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

    def client_config(self) -> dict[str, Any]:
        from reprocess.kafka.clients import require_bootstrap

        config = dict(self.get_connection(self.kafka_config_id).extra_dejson)
        require_bootstrap(config)
        return config

    @classmethod
    def config_template(cls) -> str:
        return "{{ conn." + cls.default_conn_name + ".extra }}"


class SchemaRegistryHook(BaseHook):
    """A Schema Registry connection as the client config :func:`reprocess.kafka.registry.client_config` checks."""

    conn_name_attr = "conn_id"
    default_conn_name: ClassVar[str] = DEFAULT_REGISTRY_CONN
    conn_type = "http"
    hook_name = "Schema Registry"

    def __init__(self, conn_id: str = DEFAULT_REGISTRY_CONN) -> None:
        super().__init__()
        self.conn_id = conn_id

    def client_config(self) -> dict[str, Any]:
        from reprocess.kafka.registry import client_config

        conn = self.get_connection(self.conn_id)
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
