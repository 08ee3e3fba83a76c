"""Kafka Connect, the CDC source of the embedded default (DESIGN §5): one standalone worker
(``ConnectStandalone``) from the ``connect`` jar set, REST on 127.0.0.1:``$REPROCESS_KAFKA_CONNECT_PORT``,
writing into the embedded broker.

It starts with no connector: tests and the demo add theirs over REST (:func:`put_connector`)
and remove them with :func:`remove_connector`, which also forgets the connector's offsets, so
the same name starts from scratch next time. Source offsets live in a file of the state folder
(``offset.storage.file.filename``), so a restarted worker resumes where it stopped.

Plugins (``plugin.path``) are folders of the state folder that link to the plugin jar sets
fetched by ``make install``; every one has ServiceLoader manifests, so the worker starts with
``plugin.discovery=service_load`` (about 3 s) instead of scanning every class (7-14 s). Secrets
are never in a connector's config: ``${dir:<folder>:<file>}`` reads them from the state folder
when the task starts (Kafka's ``DirectoryConfigProvider``), so the REST API never shows them.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from devstack import jvm
from devstack.broker import Broker
from devstack.java import java_home
from devstack.process import (
    ServiceError,
    ensure_port_free,
    env_port,
    log_tail,
    pid_alive,
    port_open,
    spawn,
    state_dir,
    stop_pid,
    wait_for_port,
)

PORT_ENV: Final = "REPROCESS_KAFKA_CONNECT_PORT"
DEFAULT_PORT: Final = 18083
HEAP: Final = "512m"
START_TIMEOUT_S: Final = 60
MAIN_CLASS: Final = "org.apache.kafka.connect.cli.ConnectStandalone"
JSON_CONVERTER: Final = "org.apache.kafka.connect.json.JsonConverter"
AVRO_CONVERTER: Final = "io.apicurio.registry.utils.converter.AvroConverter"
# Jar sets that become one plugin folder each (a connector or converter with its own dependencies).
PLUGIN_SETS: Final = ("debezium", "debezium-jdbc", "avro-converter")
# plugin.discovery=service_load finds only plugins named in META-INF/services; Apicurio 2.6's
# converter jar names none (the worker would report the class as not found).
MISSING_MANIFESTS: Final = {"avro-converter": {"org.apache.kafka.connect.storage.Converter": [AVRO_CONVERTER]}}


def port() -> int:
    return env_port(PORT_ENV, DEFAULT_PORT)


def url() -> str:
    return f"http://127.0.0.1:{port()}"


def home() -> Path:
    return state_dir() / "kafka-connect"


def pidfile() -> Path:
    return home() / "worker.pid"


def log() -> Path:
    return home() / "worker.log"


def secret_path(folder: Path, name: str) -> str:
    """A connector config value that the worker replaces with the content of ``folder/name``."""
    return f"${{dir:{folder}:{name}}}"


def json_converter(schemas: bool) -> dict[str, str]:
    """Connector settings for the JSON converter, with or without the schema wrapper (a connector's
    own converter settings apply only when it names the converter class too)."""
    flag = str(schemas).lower()
    return {"key.converter": JSON_CONVERTER, "value.converter": JSON_CONVERTER,
            "key.converter.schemas.enable": flag, "value.converter.schemas.enable": flag}  # fmt: skip


def avro_converter(registry_url: str) -> dict[str, str]:
    """Connector settings for Avro through Apicurio Registry at ``registry_url`` (its base URL), in
    the Confluent wire format (magic byte 0, the 4-byte schema id, Avro binary) that confluent-kafka's
    ``AvroDeserializer`` reads: schemas registered on first use, ids not in headers."""
    settings: dict[str, str] = {}
    for side in ("key", "value"):
        prefix = f"{side}.converter"
        settings |= {
            prefix: AVRO_CONVERTER,
            f"{prefix}.apicurio.registry.url": f"{registry_url}/apis/registry/v2",
            f"{prefix}.apicurio.registry.auto-register": "true",
            f"{prefix}.apicurio.registry.find-latest": "true",
            f"{prefix}.apicurio.registry.headers.enabled": "false",
            # The 4-byte id is the content id, which the Confluent-compatible API serves as the schema id.
            f"{prefix}.apicurio.registry.use-id": "contentId",
            f"{prefix}.apicurio.registry.id-handler": "io.apicurio.registry.serde.Legacy4ByteIdHandler",
        }
    return settings


def running() -> bool:
    return pid_alive(pidfile()) is not None


def worker_properties(broker: Broker) -> dict[str, str]:
    return {
        "bootstrap.servers": f"127.0.0.1:{broker.port}",
        # The worker's default converters: JSON without the schema wrapper. A connector picks
        # others in its own config (key.converter, value.converter and their settings).
        "key.converter": JSON_CONVERTER,
        "value.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": "false",
        "value.converter.schemas.enable": "false",
        "offset.storage.file.filename": str(home() / "offsets"),
        "offset.flush.interval.ms": "1000",
        "plugin.path": str(home() / "plugins"),
        "plugin.discovery": "service_load",
        "listeners": url(),
        "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": str(port()),
        "config.providers": "dir",
        "config.providers.dir.class": "org.apache.kafka.common.config.provider.DirectoryConfigProvider",
        # Only the state folder may be read through ${dir:…}.
        "config.providers.dir.param.allowed.paths": str(state_dir()),
    }


def link_plugins() -> Path:
    """``<home>/plugins/<set>/``: links to the jars of every plugin set, made anew at each start,
    plus the ServiceLoader manifests a set lacks (:data:`MISSING_MANIFESTS`)."""
    plugins = home() / "plugins"
    shutil.rmtree(plugins, ignore_errors=True)
    for name in PLUGIN_SETS:
        folder = plugins / name
        folder.mkdir(parents=True)
        for jar in jvm.jars(name):  # fails with the fix when `make install` has not fetched the set
            (folder / jar.name).symlink_to(jar)
        if name in MISSING_MANIFESTS:
            with zipfile.ZipFile(folder / "zz-service-manifests.jar", "w") as jar_file:
                for interface, classes in MISSING_MANIFESTS[name].items():
                    jar_file.writestr(f"META-INF/services/{interface}", "".join(f"{c}\n" for c in classes))
    return plugins


def command(properties: Path) -> list[str]:
    home_ = java_home()
    if home_ is None:
        raise ServiceError(
            "java: not found. Kafka Connect needs Java 17: run `sudo apt-get install -y openjdk-17-jre-headless`"
        )
    log4j = jvm.POMS / "kafka" / "log4j2.properties"  # the broker's: one logging setup for Kafka's JVMs
    return [
        str(home_ / "bin" / "java"), f"-Xmx{HEAP}", "-Xms64m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}", "-cp", jvm.classpath("connect"), MAIN_CLASS, str(properties),
    ]  # fmt: skip


def start() -> None:
    """Start the worker (no connectors); the broker must run already."""
    if running():
        print(f"kafka-connect: already running at {url()}")
        return
    broker = Broker.default()
    if not port_open(broker.port):
        raise ServiceError(
            f"kafka-connect: the broker on 127.0.0.1:{broker.port} is not running: run `make services` first"
        )
    ensure_port_free(port(), "kafka-connect", PORT_ENV)
    began = time.monotonic()
    home().mkdir(parents=True, exist_ok=True)
    link_plugins()
    properties = home() / "worker.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in worker_properties(broker).items()))
    proc = spawn(command(properties), log(), pidfile())
    try:
        wait_for_port(port(), START_TIMEOUT_S, "kafka-connect", log(), proc)
        _wait_rest(START_TIMEOUT_S - (time.monotonic() - began))
    except ServiceError:
        stop()
        raise
    print(f"kafka-connect: started at {url()} in {time.monotonic() - began:.1f}s (log {log()})")


def _wait_rest(seconds: float) -> None:
    """The port opens before the worker has loaded its plugins; ready when REST answers."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            request("GET", "/connectors")
            return
        except ServiceError:
            time.sleep(0.2)
    raise ServiceError(
        f"kafka-connect: REST did not answer within {seconds:.0f}s. Log tail ({log()}):\n{log_tail(log())}"
    )


def stop() -> None:
    print("kafka-connect: stopped" if stop_pid(pidfile(), "kafka-connect", grace=20) else "kafka-connect: not running")


def kill() -> None:
    """SIGKILL: a crash; offsets not yet flushed are lost, so the connector re-sends (at least once)."""
    stop_pid(pidfile(), "kafka-connect", grace=5, sig=signal.SIGKILL)


def request(method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
    """One call of the worker's REST API; the parsed JSON answer (None when empty)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url() + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        raise ServiceError(
            f"kafka-connect: {method} {path} → HTTP {exc.code}: {exc.read().decode(errors='replace')}"
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise ServiceError(
            f"kafka-connect: {method} {url()}{path} failed ({exc}); is it running? "
            f"(`python scripts/services.py start kafka-connect`). Log tail:\n{log_tail(log(), 800)}"
        ) from exc
    return json.loads(raw) if raw.strip() else None


def put_connector(name: str, config: Mapping[str, str], seconds: float = 60) -> None:
    """Create (or reconfigure) connector ``name`` and wait until it and its tasks run; a failed task's
    trace is the error."""
    request("PUT", f"/connectors/{name}/config", {"name": name, **config})
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            status = request("GET", f"/connectors/{name}/status")
        except ServiceError:  # 404 until the worker has created it
            time.sleep(0.2)
            continue
        states = [status["connector"], *status["tasks"]]
        failed = [s for s in states if s["state"] == "FAILED"]
        if failed:
            raise ServiceError(f"kafka-connect: connector {name} failed:\n{failed[0].get('trace', failed[0])}")
        if status["tasks"] and all(s["state"] == "RUNNING" for s in states):
            return
        time.sleep(0.2)
    raise ServiceError(
        f"kafka-connect: connector {name} not running after {seconds:.0f}s. Log tail:\n{log_tail(log())}"
    )


def remove_connector(name: str, seconds: float = 30) -> None:
    """Stop connector ``name``, forget its source offsets and delete it (a no-op when it is not there).

    Forgetting the offsets matters in standalone mode: the offsets file outlives the connector, and
    a new connector of the same name would resume from a position its source no longer has.
    """
    if name not in request("GET", "/connectors"):
        return
    request("PUT", f"/connectors/{name}/stop")
    deadline = time.monotonic() + seconds
    while request("GET", f"/connectors/{name}/status")["connector"]["state"] != "STOPPED":
        if time.monotonic() > deadline:
            raise ServiceError(f"kafka-connect: connector {name} did not stop within {seconds:.0f}s")
        time.sleep(0.2)
    request("DELETE", f"/connectors/{name}/offsets")
    request("DELETE", f"/connectors/{name}")
