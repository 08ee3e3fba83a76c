"""What every embedded service shares: the state folder and ports; pid files, start and stop are
``reprocess.core.processes`` (the product's Spark Connect server runs the same way).

Settings are read from the environment when called, not at import, so a test session that
changes ``REPROCESS_STATE_DIR`` or a port sees the change.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Final

from reprocess.core import processes
from reprocess.core.errors import ServiceError
from reprocess.core.processes import log_tail, pid_alive, port_open, spawn, stop_pid, wait_for_port

__all__ = [
    "REPO", "ServiceError", "ensure_port_free", "env_port", "free_port", "log_tail", "pid_alive", "port_open",
    "spawn", "state_dir", "stop_pid", "wait_for_port",
]  # fmt: skip

REPO: Final = Path(__file__).resolve().parent.parent


def state_dir() -> Path:
    return Path(os.environ.get("REPROCESS_STATE_DIR", REPO / ".state"))


def env_port(variable: str, default: int) -> int:
    return int(os.environ.get(variable, default))


def free_port() -> int:
    """A port nothing listens on now (for a test's extra service)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_port_free(port: int, what: str, variable: str) -> None:
    processes.ensure_port_free(port, what, f"set {variable} to a free port")
