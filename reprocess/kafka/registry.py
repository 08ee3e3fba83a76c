"""The Schema Registry, through confluent-kafka's ``SchemaRegistryClient`` only (any
Confluent-compatible registry: Confluent's, Apicurio's ``/apis/ccompat/v7``, Redpanda's).

A run fetches the writer schemas of its subjects ONCE on the driver (:func:`writer_schemas`)
and the decoders compile them into Spark's ``from_avro``; no record ever asks the registry.
A registry that cannot answer is an infrastructure fault: :class:`RegistryError`, which the
task retries, never a dead letter and never a silent skip.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from reprocess.core.errors import ConnectionConfigError, RegistryError, SpecError
from reprocess.core.spec import PipelineSpec

# Keys of the connection's extra passed to the client as they are (TLS and timeouts).
_CLIENT_EXTRA: Final = (
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "timeout", "max.retries", "retries.wait.ms", "retries.max.wait.ms",
)  # fmt: skip


# Seconds per request unless the connection's extra sets ``timeout``: confluent-kafka's client
# waits forever by default, and a registry that accepts a request and never answers (seen: a 404
# of Apicurio's that never arrived) would hang the task instead of failing it for a retry.
DEFAULT_TIMEOUT_S: Final = 30


def client_config(raw: str | Mapping[str, Any]) -> dict[str, Any]:
    """The ``SchemaRegistryClient`` config from a connection rendered as JSON: ``url`` (the
    connection's host, a full URL), ``login``/``password`` (basic auth) and ``extra`` (TLS files,
    timeouts). The task renders it from the spec's ``schema_registry`` connection.

    Examples
    --------
    >>> client_config('{"url": "https://r:8081", "login": "u", "password": "p", "extra": {"timeout": 5}}')
    {'url': 'https://r:8081', 'timeout': 5, 'basic.auth.user.info': 'u:p'}
    >>> client_config('{"url": "http://r:8081"}')
    {'url': 'http://r:8081', 'timeout': 30}
    """
    conn = json.loads(raw) if isinstance(raw, str) else dict(raw)
    url = conn.get("url")
    if not url or not str(url).startswith(("http://", "https://")):
        raise ConnectionConfigError(
            f"the Schema Registry connection must set its host to the registry's URL (http:// or https://), got "
            f'{url!r}; e.g. AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT=\'{{"conn_type": "http", "host": '
            '"https://registry:8081"}\''
        )
    config: dict[str, Any] = {"url": str(url), "timeout": DEFAULT_TIMEOUT_S}
    if conn.get("login"):
        config["basic.auth.user.info"] = f"{conn['login']}:{conn.get('password') or ''}"
    extra = conn.get("extra") or {}
    config.update({k: v for k, v in extra.items() if k in _CLIENT_EXTRA})
    return config


def value_subjects(spec: PipelineSpec) -> list[str]:
    """The subjects of the spec's values under the default TopicNameStrategy (``<topic>-value``)."""
    return [f"{t}-value" for t in spec.topics]


def writer_schemas(config: Mapping[str, Any], subjects: Iterable[str]) -> dict[str, dict[int, str]]:
    """Every version registered under each subject: ``{subject: {schema_id: schema_json}}``, the
    soft-deleted ones first, then the live ones oldest first: the last is the subject's latest
    version, the reader schema (:data:`~reprocess.formats.contract.WriterSchemas`).

    All versions, not the latest: one range may hold records of every version the producers
    ever wrote. Soft-deleted versions too: a Confluent deserializer still reads their records,
    fetching the schema by id, which the registry still serves. A record whose id is under none
    of them is a dead letter ("unknown schema id").

    Raises
    ------
    RegistryError
        The registry cannot be reached or answered with a server error (retryable).
    SpecError
        A subject is not registered (the producers use another subject or another registry).
    """
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.error import SchemaRegistryError
    except ImportError as exc:
        raise SpecError(
            f"an Avro pipeline reads its writer schemas with confluent-kafka's Schema Registry client, which "
            f"is not installed ({exc}); install the extra: pip install 'reprocess[avro]'"
        ) from exc

    url = config["url"]
    client = SchemaRegistryClient(dict(config))
    out: dict[str, dict[int, str]] = {}
    for subject in subjects:
        try:
            out[subject] = {}
            live = client.get_versions(subject)
            deleted = sorted(set(client.get_versions(subject, deleted=True)) - set(live))
            for version in [*deleted, *sorted(live)]:
                registered = client.get_version(subject, version, deleted=True)
                sid = int(registered.schema_id or 0)
                out[subject].pop(sid, None)  # a schema registered again: its newest version's place
                out[subject][sid] = str(registered.schema.schema_str)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise SpecError(
                    f"the Schema Registry at {url} has no subject {subject!r} ({exc.error_message}); the pipeline "
                    "reads writer schemas by the topic-name strategy (<topic>-value): check the registry "
                    "connection and the producers' subject names"
                ) from exc
            raise RegistryError(
                f"the Schema Registry at {url} failed on subject {subject!r}: HTTP {exc.http_status_code} "
                f"{exc.error_message}; nothing was staged; the task retries"
            ) from exc
        except Exception as exc:  # requests' connection errors, timeouts, TLS failures
            raise RegistryError(
                f"the Schema Registry at {url} cannot be reached ({type(exc).__name__}: {exc}); nothing was "
                "staged; the task retries. Check the registry is up and the connection's URL"
            ) from exc
    return out
