"""The chaos loop: at random moments SIGKILL one of the broker, PostgreSQL, the Spark Connect server,
the Kafka Connect worker and the Airflow scheduler, leave it down a few seconds, start it again
with devstack's helpers. Between faults it keeps what a supervisor keeps: Airflow's components
running and the Debezium connector's task running (a task that failed while PostgreSQL or the
broker was away is restarted, as an operator or Connect's own restart policy would)."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from devstack import connect, debezium, kafka_connect, postgres
from devstack.broker import Broker
from devstack.process import ServiceError, port_open
from soak.scheduler import Airflow

KINDS: Final = ("broker", "postgres", "spark-connect", "kafka-connect", "scheduler")


@dataclass
class Fault:
    kind: str
    at: datetime
    down_s: float
    restarted_s: float = 0.0  # kill → the service answers again


@dataclass(eq=False)
class Chaos(threading.Thread):
    """Injects faults every ``gap`` seconds (uniformly drawn) until :meth:`stop`."""

    airflow: Airflow
    connector: str
    connector_config: dict[str, str]
    gap: tuple[float, float]
    seed: int
    faults: list[Fault] = field(default_factory=list)
    mended: dict[str, int] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, name="chaos", daemon=True)
        self.rng = random.Random(self.seed)

    def stop(self) -> None:
        self.stopping.set()
        self.join()

    def run(self) -> None:
        kinds = list(KINDS)
        while not self.stopping.is_set():
            deadline = time.monotonic() + self.rng.uniform(*self.gap)
            while time.monotonic() < deadline and not self.stopping.is_set():
                self.keep_running()
                self.stopping.wait(5)
            if self.stopping.is_set():
                break
            if not kinds:
                kinds = list(KINDS)
            kind = kinds.pop(self.rng.randrange(len(kinds)))  # every kind once before any repeats
            self.inject(kind, self.rng.uniform(2, 15))
        self.keep_running()

    def inject(self, kind: str, down_s: float) -> None:
        kill, start = self._actions()[kind]
        fault = Fault(kind, datetime.now(UTC), down_s)
        print(f"soak: {fault.at:%H:%M:%S} chaos: SIGKILL {kind}, down {down_s:.0f} s", flush=True)
        started = time.monotonic()
        kill()
        time.sleep(down_s)
        self._retry(start, kind)
        fault.restarted_s = time.monotonic() - started
        self.faults.append(fault)
        self.keep_running()

    def _retry(self, start: Callable[[], None], what: str) -> None:
        for attempt in range(1, 31):
            try:
                start()
                return
            except (ServiceError, OSError) as exc:
                print(f"soak: restarting {what} failed (attempt {attempt}): {str(exc)[:300]}", flush=True)
                time.sleep(2)
        raise ServiceError(f"soak: {what} did not start again in 30 attempts")

    def _mend(self, what: str) -> None:
        self.mended[what] = self.mended.get(what, 0) + 1

    def keep_running(self) -> None:
        """Airflow's components and the connector's task, restarted when they died."""
        for name in self.airflow.supervise():
            print(f"soak: airflow {name} was not running; started it again", flush=True)
            self._mend(f"airflow {name} restarted")
        try:
            status = kafka_connect.request("GET", f"/connectors/{self.connector}/status")
        except (ServiceError, OSError):
            return
        for task in status.get("tasks", []) if status else []:
            if task.get("state") == "FAILED":
                print(f"soak: connector task {task['id']} FAILED; restarting it", flush=True)
                kafka_connect.request("POST", f"/connectors/{self.connector}/tasks/{task['id']}/restart")
                self._mend("connector task restarted")

    def _actions(self) -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
        broker = Broker.default()
        return {
            "broker": (broker.kill, broker.start),
            "postgres": (_kill_postgres, postgres.start),
            "spark-connect": (connect.kill, connect.start),
            "kafka-connect": (kafka_connect.kill, self._start_connect),
            "scheduler": (lambda: _expect(self.airflow.kill("scheduler"), "scheduler"), self._start_scheduler),
        }

    def _start_connect(self) -> None:
        kafka_connect.start()
        debezium.start(self.connector, self.connector_config)  # a standalone worker forgets its connectors

    def _start_scheduler(self) -> None:
        if self.airflow.component("scheduler") is None:
            self.airflow.start("scheduler")


def _expect(found: bool, what: str) -> None:
    if not found:
        print(f"soak: chaos found no running {what} to kill", flush=True)


def _kill_postgres() -> None:
    """SIGKILL of the postmaster: its backends exit on their own (a start meanwhile fails and is
    retried), the next start runs crash recovery."""
    pid = int((postgres.data_dir() / "postmaster.pid").read_text().splitlines()[0])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while port_open(postgres.port()) and time.monotonic() < deadline:
        time.sleep(0.2)
