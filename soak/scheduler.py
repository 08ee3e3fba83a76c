"""Airflow for the soak: ``airflow standalone`` (devstack.airflow_ui, what ``make up`` runs) with the
soak's pipelines folder, plus what a process supervisor does in production: a component that died
(the scheduler SIGKILLed by the chaos loop, or one that gave up while PostgreSQL was down) is started
again on its own, with standalone's environment."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Final

from devstack.airflow_ui import UI, session_members
from devstack.process import pid_alive, spawn

# The components ``airflow standalone`` runs besides the API server (which outlives a database restart).
SUPERVISED: Final = ("scheduler", "dag-processor", "triggerer")


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*"):
        children.setdefault(_parent(int(stat.name)), []).append(int(stat.name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


class Airflow:
    """The soak's ``airflow standalone`` and its supervised components."""

    def __init__(self, run_dir: Path, port: int, worker_log_port: int, trigger_log_port: int) -> None:
        self.ui = UI(run_dir, port, worker_log_port, trigger_log_port)
        self.run_dir = run_dir
        self.restarts: dict[str, int] = dict.fromkeys(SUPERVISED, 0)

    def up(self) -> None:
        self.ui.up(timeout=300, schedule=True, prepare=True)

    def down(self) -> None:
        for name in SUPERVISED:
            pidfile = self._pidfile(name)
            if pid := pid_alive(pidfile):
                self._kill_tree(pid, signal.SIGTERM)
                pidfile.unlink(missing_ok=True)
        self.ui.down()

    def _pidfile(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def component(self, name: str) -> int | None:
        """The pid of the running ``airflow <name>``: standalone's child, or the one this soak restarted."""
        if pid := pid_alive(self._pidfile(name)):
            return pid
        root = self.ui.pid()
        for pid in session_members(root) if root else []:
            if _parent(pid) == root and name in _cmdline(pid)[1:3]:
                return pid
        return None

    @staticmethod
    def _kill_tree(pid: int, sig: signal.Signals) -> None:
        for member in _descendants(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, sig)

    def kill(self, name: str) -> bool:
        """SIGKILL ``airflow <name>`` and its task processes (a crashed scheduler's node)."""
        pid = self.component(name)
        if pid is None:
            return False
        self._kill_tree(pid, signal.SIGKILL)
        return True

    def start(self, name: str) -> None:
        spawn(["airflow", name], self.run_dir / f"{name}.log", self._pidfile(name), env=self.ui.env(schedule=True))

    def supervise(self) -> list[str]:
        """Start each supervised component that is not running; the names started."""
        started = []
        for name in SUPERVISED:
            if self.component(name) is None:
                self.start(name)
                self.restarts[name] += 1
                started.append(name)
        return started
