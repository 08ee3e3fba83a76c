"""docker-compose.yml, checked without a Docker engine: the Compose schema plus the wiring.

No engine runs where this is tested, so the stack is proven the way it can be offline: the
Compose specification's JSON schema (check-jsonschema's vendored copy), then what a schema
cannot see: every connection names a service and a port that service listens on, Kafka's
listeners agree with its clients, every ``service_healthy`` dependency has a health check,
every variable is documented in ``.env.example``, tags are pinned, and the image installs the
built wheel and carries no secret.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
COMPOSE = REPO / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    return {k: str(v) for k, v in env.items()}


def _flag(command: list[str], name: str) -> str:
    """The value after ``name`` in a command list, or of a ``--conf name=value``."""
    for i, item in enumerate(command):
        if item == name:
            return command[i + 1]
        if item == "--conf" and command[i + 1].startswith(name + "="):
            return command[i + 1].split("=", 1)[1]
    raise AssertionError(f"{name} not in {command}")


def _listens_on(services: dict[str, Any], host: str) -> set[int]:
    """The ports a service accepts clients on, read from its own configuration."""
    svc = services[host]
    command = svc.get("command") or []
    if host == "postgres":
        return {5432}
    if host == "kafka":
        return set()  # checked against the advertised listeners in their own test
    if "org.apache.spark.deploy.master.Master" in command:
        return {int(_flag(command, "--port"))}
    if "org.apache.spark.sql.connect.service.SparkConnectServer" in command:
        return {int(_flag(command, "spark.connect.grpc.binding.port"))}
    if command[:2] == ["airflow", "api-server"]:
        return {int(_flag(command, "--port"))}
    raise AssertionError(f"no known listener for service {host}")


def _connections(services: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(service, variable, value) of every AIRFLOW_CONN_*, the metadata DB and the execution API URL."""
    out = []
    for name, svc in services.items():
        for key, value in _env(svc).items():
            if key.startswith("AIRFLOW_CONN_") or key in {
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
            }:
                out.append((name, key, re.sub(r"\$\{[^}]*\}", "secret", value)))  # ${PASSWORD:?..}
    return out


def _endpoints(value: str) -> list[tuple[str, int | None]]:
    """host:port pairs of a connection given as a URI or as Airflow's JSON form."""
    if not value.startswith("{"):
        url = urlsplit(value)
        return [(url.hostname or "", url.port)]
    conn = json.loads(value)
    if conn["conn_type"] == "kafka":
        return [(h, int(p)) for h, p in (s.rsplit(":", 1) for s in conn["extra"]["bootstrap.servers"].split(","))]
    host = conn["host"]
    if "://" in host:
        url = urlsplit(host)
        return [(url.hostname or "", conn.get("port") or url.port)]
    return [(host, conn.get("port"))]


def test_compose_file_is_valid_against_the_compose_specification_schema():
    checker = Path(sys.executable).with_name("check-jsonschema")
    out = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_connection_names_a_service_and_a_port_it_listens_on(services):
    connections = _connections(services)
    names = {key for _, key, _ in connections}
    assert {"AIRFLOW_CONN_REPROCESS_DB", "AIRFLOW_CONN_KAFKA_DEFAULT", "AIRFLOW_CONN_SPARK_DEFAULT"} <= names
    assert "AIRFLOW_CONN_SPARK_CONNECT" in names
    for service, key, value in connections:
        for host, port in _endpoints(value):
            assert host in services, f"{service}: {key} names host {host!r}, which is no service"
            if host != "kafka":
                assert port in _listens_on(services, host), f"{service}: {key} uses {host}:{port}"


def test_spark_urls_resolve_to_the_master_and_the_connect_server(services):
    master = services["spark-master"]["command"]
    master_url = f"spark://{_flag(master, '--host')}:{_flag(master, '--port')}"
    assert services["spark-worker"]["command"][2] == master_url
    connect = services["spark-connect"]["command"]
    assert _flag(connect, "--master") == master_url
    airflow_env = _env(services["airflow-scheduler"])
    assert json.loads(airflow_env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == master_url
    connect_conn = json.loads(airflow_env["AIRFLOW_CONN_SPARK_CONNECT"])
    assert connect_conn["conn_type"] == "spark_connect"
    assert (urlsplit(connect_conn["host"]).hostname, connect_conn["port"]) == (
        "spark-connect",
        int(_flag(connect, "spark.connect.grpc.binding.port")),
    )
    # Client mode: executors call the driver back by the name the task's container has.
    assert services["airflow-scheduler"]["hostname"] == "airflow-scheduler"
    assert _flag(connect, "spark.driver.host") == services["spark-connect"]["hostname"]


def test_kafka_listeners_and_clients_agree(services):
    env = _env(services["kafka"])
    listeners = {n: int(a.rsplit(":", 1)[1]) for n, a in (x.split("://") for x in env["KAFKA_LISTENERS"].split(","))}
    advertised = {n: a for n, a in (x.split("://") for x in env["KAFKA_ADVERTISED_LISTENERS"].split(","))}
    protocols = dict(x.split(":") for x in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listeners) == set(protocols)
    for name, address in advertised.items():
        assert int(address.rsplit(":", 1)[1]) == listeners[name], name
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split("@", 1)[1]
    assert voters == f"kafka:{listeners[env['KAFKA_CONTROLLER_LISTENER_NAMES']]}"
    internal = advertised[env["KAFKA_INTER_BROKER_LISTENER_NAME"]]
    clients = [(s, v) for s, k, v in _connections(services) if k == "AIRFLOW_CONN_KAFKA_DEFAULT"]
    clients += [("demo-producer", _env(services["demo-producer"])["AIRFLOW_CONN_KAFKA_DEFAULT"])]
    for service, value in clients:
        assert [f"{h}:{p}" for h, p in _endpoints(value)] == [internal], service
    published = [p.split(":")[-1] for p in services["kafka"]["ports"]]
    assert published == [advertised["PLAINTEXT_HOST"].rsplit(":", 1)[1]]
    cluster_id = re.sub(r"\$\{KAFKA_CLUSTER_ID:-(.*)\}", r"\1", env["CLUSTER_ID"])
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16, "KRaft cluster ids are 16 bytes, base64"


def test_databases_in_urls_are_created_by_the_init_script(services):
    init = (REPO / "docker" / "postgres-init.sh").read_text()
    created = dict(re.findall(r"CREATE DATABASE (\w+) OWNER (\w+);", init))
    mount = next(v for v in services["postgres"]["volumes"] if "docker-entrypoint-initdb.d" in v)
    assert mount.startswith("./docker/postgres-init.sh:")
    for service, key, value in _connections(services):
        url = urlsplit(value)
        if url.scheme.startswith("postgres"):
            database = url.path.lstrip("/")
            assert created.get(database) == url.username, f"{service}: {key} uses {url.username}@{database}"


def test_health_checks_back_every_healthy_dependency_and_airflow_has_all_its_parts(services):
    for name, svc in services.items():
        for target, spec in (svc.get("depends_on") or {}).items():
            assert target in services, (name, target)
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits for {target}, which has no health check"
    commands = {tuple(s["command"][:2]) for s in services.values() if isinstance(s.get("command"), list)}
    for part in ("api-server", "scheduler", "dag-processor", "triggerer"):
        assert ("airflow", part) in commands, part
    init = "\n".join(services["airflow-init"]["command"])
    assert "airflow db migrate" in init and "airflow pools set spark" in init and "PASSWORDS_FILE" in init


def test_tags_are_pinned_volumes_are_named_and_every_variable_is_in_env_example(compose, services):
    for name, svc in services.items():
        image = svc.get("image", "")
        assert re.fullmatch(r"[\w./-]+:[\w.-]+", image) and not image.endswith(":latest"), (name, image)
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if line.startswith("FROM "):
            assert re.fullmatch(r"FROM [\w./-]+:\d+\.\d+\.\d+[\w.-]*( AS \w+)?", line), line
    declared = set(compose["volumes"])
    for svc in services.values():
        for volume in svc.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert source.startswith("./") or source in declared, volume
    used = set(re.findall(r"(?<!\$)\$\{(\w+)", COMPOSE.read_text()))  # $$ is an escaped $
    documented = set(re.findall(r"^(\w+)=", (REPO / ".env.example").read_text(), re.M))
    assert used == documented


def test_image_installs_the_built_wheel_and_carries_no_secret():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"pip wheel .*--no-deps", dockerfile)
    assert re.search(r"pip install .*-c \S*constraints\.txt \S*reprocess-\*\.whl", dockerfile)
    assert " -e " not in dockerfile and "COPY . " not in dockerfile
    for line in dockerfile.splitlines():
        if re.match(r"\s*(ENV|ARG)\b|\s+\w+=", line):
            assert not re.search(r"PASSWORD|SECRET|TOKEN|FERNET", line, re.I), line
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".env" in ignored and ".state/" in ignored


def _pinned(jar_set: str, prop: str) -> str:
    """A version devstack's pom for ``jar_set`` pins (what the embedded default runs)."""
    pom = (REPO / "devstack" / "jvm" / jar_set / "pom.xml").read_text()
    match = re.search(rf"<{re.escape(prop)}>([^<]+)</{re.escape(prop)}>", pom)
    assert match, (jar_set, prop)
    return match.group(1)


def test_cdc_and_registry_reach_kafka_and_postgres_and_run_the_embedded_versions(services):
    kafka_env = _env(services["kafka"])
    internal = dict(x.split("://") for x in kafka_env["KAFKA_ADVERTISED_LISTENERS"].split(","))["PLAINTEXT"]
    connect = services["kafka-connect"]
    assert _env(connect)["BOOTSTRAP_SERVERS"] == internal
    assert connect["image"] == f"quay.io/debezium/connect:{_pinned('debezium', 'debezium.version')}"
    assert _env(connect)["ENABLE_APICURIO_CONVERTERS"] == "true", (
        "the Avro converter ships in the image, off by default"
    )
    # Debezium decodes the WAL: the server must run with wal_level=logical.
    command = services["postgres"]["command"]
    assert command[command.index("wal_level=logical") - 1] == "-c"

    registry = services["schema-registry"]
    assert registry["image"] == f"apicurio/apicurio-registry:{_pinned('registry', 'apicurio.version')}"
    env = _env(registry)
    url = urlsplit(env["APICURIO_DATASOURCE_URL"].removeprefix("jdbc:"))
    assert (url.hostname, url.port) == ("postgres", 5432) and env["APICURIO_STORAGE_SQL_KIND"] == "postgresql"
    init = (REPO / "docker" / "postgres-init.sh").read_text()
    created = dict(re.findall(r"CREATE DATABASE (\w+) OWNER (\w+);", init))
    assert created[url.path.lstrip("/")] == env["APICURIO_DATASOURCE_USERNAME"]
    assert re.search(r"CREATE ROLE cdc LOGIN REPLICATION", init) and created["cdc_source"] == "cdc"
    for name, svc in services.items():
        for published in svc.get("ports", []):
            assert published.startswith("127.0.0.1:"), f"{name} publishes {published} beyond loopback"
