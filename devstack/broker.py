"""The embedded broker: Apache Kafka, one KRaft node (broker and controller in one JVM), on loopback.

Started with ``java -cp`` from the ``kafka`` jar set that ``make install`` fetched (devstack/jvm),
its log in ``home/data`` so topics survive a restart, a 512 MiB heap. :class:`Broker` is one such
node with its own ports and folder: the session's broker of ``make services`` and the second
broker a fault test starts in its ``tmp_path`` to kill and restart are both one.
"""

from __future__ import annotations

import base64
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from devstack import java, jvm
from devstack.java import java_home
from devstack.process import (
    ServiceError,
    ensure_port_free,
    env_port,
    log_tail,
    pid_alive,
    spawn,
    state_dir,
    stop_pid,
    wait_for_port,
)

PORT_ENV: Final = "REPROCESS_KAFKA_PORT"
DEFAULT_PORT: Final = 19092
HEAP: Final = "512m"
START_TIMEOUT_S: Final = 60
NODE_ID: Final = 1

# Apache Kafka's own settings, rebound to loopback and sized for one node (DESIGN §5).
SETTINGS: Final = {
    "process.roles": "broker,controller",
    "node.id": str(NODE_ID),
    "inter.broker.listener.name": "PLAINTEXT",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "num.partitions": "1",
    # One replica, and one partition for each internal topic: the 50 partitions of the defaults
    # cost seconds when the first group or transaction creates them.
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    # Kept until a topic sets its own retention.ms: the demo's and the tests' records carry fixed
    # timestamps (November 2026) that the default 7 days would delete as soon as they are written.
    "log.retention.ms": "-1",
    # Retention is checked every second from the start (defaults: 5 min, after 30 s), so a topic
    # with a small retention.ms really loses its old segments within a test.
    "log.retention.check.interval.ms": "1000",
    "log.initial.task.delay.ms": "0",
    # After a SIGKILL the restarted node is refused (DUPLICATE_BROKER_REGISTRATION) until its old
    # session expires: 3 s instead of the default 9 s brings a crash restart from ~13 s to ~5 s.
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
}


def cluster_id() -> str:
    """A KRaft cluster id as Kafka's ``Uuid`` prints one: 16 random bytes, URL-safe base64, no padding,
    never starting with '-' (which Kafka rejects)."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value


@dataclass(frozen=True)
class Broker:
    """One Kafka node: clients on 127.0.0.1:``port``, its controller on ``controller_port`` (default
    ``port + 1``), log, config and pid in ``home``."""

    port: int
    home: Path
    controller_port: int = 0

    @classmethod
    def default(cls) -> Broker:
        """The session broker of ``make services``: ``$REPROCESS_KAFKA_PORT`` (+1), ``<state>/kafka``."""
        return cls(env_port(PORT_ENV, DEFAULT_PORT), state_dir() / "kafka")

    @property
    def controller(self) -> int:
        return self.controller_port or self.port + 1

    @property
    def pidfile(self) -> Path:
        return self.home / "kafka.pid"

    @property
    def log(self) -> Path:
        return self.home / "kafka.log"

    @property
    def data(self) -> Path:
        """The log dir (``log.dirs``): topics, the KRaft metadata log and ``meta.properties``."""
        return self.home / "data"

    @property
    def config(self) -> dict[str, Any]:
        """librdkafka settings to reach it."""
        return {"bootstrap.servers": f"127.0.0.1:{self.port}"}

    def properties(self) -> dict[str, str]:
        listeners = f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller}"
        return {
            **SETTINGS,
            "listeners": listeners,
            "advertised.listeners": listeners,
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller}",
            "log.dirs": str(self.data),
        }

    def running(self) -> bool:
        return pid_alive(self.pidfile) is not None

    def _java(self, main: str, *args: str, heap: str = HEAP) -> list[str]:
        home = java_home()
        if home is None:
            java.check(install=False)  # raises, saying how to install Java 17
            raise AssertionError("unreachable")
        log4j = jvm.POMS / "kafka" / "log4j2.properties"
        return [str(home / "bin" / "java"), f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={self.home}",
                "-cp", jvm.classpath("kafka"), main, *args]  # fmt: skip

    def _format(self, properties: Path) -> None:
        """Write the storage's ``meta.properties`` once (``kafka-storage format --standalone``)."""
        if (self.data / "meta.properties").exists():
            return
        cmd = self._java("kafka.tools.StorageTool", "format", "--standalone", "-t", cluster_id(), "-c", str(properties),
                         heap="256m")  # fmt: skip
        with self.log.open("ab") as out:
            done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise ServiceError(f"kafka: formatting {self.data} failed. Log tail ({self.log}):\n{log_tail(self.log)}")

    def start(self) -> None:
        if self.running():
            print(f"kafka: already running on 127.0.0.1:{self.port}")
            return
        ensure_port_free(self.port, "kafka", PORT_ENV)
        ensure_port_free(self.controller, "kafka (its KRaft controller)", PORT_ENV)
        began = time.monotonic()
        self.home.mkdir(parents=True, exist_ok=True)
        properties = self.home / "server.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        self._format(properties)
        proc = spawn(self._java("kafka.Kafka", str(properties)), self.log, self.pidfile)
        wait_for_port(self.port, START_TIMEOUT_S, "kafka", self.log, proc)
        self.wait_ready(START_TIMEOUT_S - (time.monotonic() - began))
        print(f"kafka: started Apache Kafka {jvm.version('kafka', 'kafka.version')} on 127.0.0.1:{self.port} "
              f"in {time.monotonic() - began:.1f}s (data in {self.data})")  # fmt: skip

    def wait_ready(self, seconds: float) -> None:
        """Until the node serves clients: its metadata lists it as a broker (after a crash it is
        fenced until its previous registration expires, though its port is open)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.config, "log_level": 0, "socket.connection.setup.timeout.ms": 1000,
                             "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200})  # fmt: skip
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if admin.list_topics(timeout=1).brokers:
                    return
            except Exception:  # KafkaException while the node starts: retry until the deadline
                pass
            if not self.running():
                raise ServiceError(f"kafka exited while starting. Log tail ({self.log}):\n{log_tail(self.log)}")
            time.sleep(0.1)
        raise ServiceError(
            f"kafka did not serve metadata within {seconds:.0f}s. Log tail ({self.log}):\n{log_tail(self.log)}"
        )

    def stop(self) -> None:
        """SIGTERM: a controlled shutdown (logs flushed, clean restart); SIGKILL after 30 s."""
        print("kafka: stopped" if stop_pid(self.pidfile, "kafka", grace=30) else "kafka: not running")

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown (the fault tests)."""
        stop_pid(self.pidfile, "kafka", grace=5, sig=signal.SIGKILL)
