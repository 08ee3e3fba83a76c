"""A background service process: started in a session of its own with its output in a log and its
pid in a file, waited for on its port, stopped with its whole process group.

The product's Spark Connect server (``reprocess.spark.connect_server``) and every service of the
dev stack (``devstack``) are run this way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from reprocess.core.errors import ServiceError

LOOPBACK: Final = "127.0.0.1"


def port_open(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def log_tail(log: Path, chars: int = 2000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"


def wait_for_port(
    port: int, seconds: float, what: str, log: Path, proc: subprocess.Popen[bytes] | None = None, host: str = LOOPBACK
) -> None:
    """Return once <host>:<port> accepts connections; fail early when ``proc`` exits."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if port_open(port, host):
            return
        if proc is not None and proc.poll() is not None:
            raise ServiceError(f"{what} exited with {proc.returncode} before opening {host}:{port}. "
                               f"Log tail ({log}):\n{log_tail(log)}")  # fmt: skip
        time.sleep(0.1)
    raise ServiceError(f"{what} did not open {host}:{port} within {seconds:.0f}s. Log tail ({log}):\n{log_tail(log)}")


def ensure_port_free(port: int, what: str, fix: str, host: str = LOOPBACK) -> None:
    """Fail, saying ``fix``, when something already listens on ``host:port``."""
    if port_open(port, host):
        raise ServiceError(f"{what}: port {port} on {host} is taken by another process. Stop it or {fix}.")


def pid_alive(pidfile: Path) -> int | None:
    """The pid in ``pidfile`` when that process still runs."""
    try:
        pid = int(pidfile.read_text())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        state = ""
    # A zombie has exited; its parent (e.g. a test session that spawned it) has not reaped it yet.
    return None if state == "Z" else pid


def spawn(
    cmd: Sequence[str], log: Path, pidfile: Path, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own session (so :func:`stop_pid` reaches its children), output to
    ``log``, pid to ``pidfile``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n===== {time.ctime()}: {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            list(cmd), env=dict(env) if env is not None else None, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    pidfile.write_text(str(proc.pid))
    return proc


def stop_pid(pidfile: Path, what: str, grace: float = 10, sig: signal.Signals = signal.SIGTERM) -> bool:
    """Signal the process group started by :func:`spawn`; SIGKILL after ``grace`` seconds.

    Returns False when it was not running. ``sig=SIGKILL`` is a crash (the fault tests).
    """
    pid = pid_alive(pidfile)
    if not pid:
        pidfile.unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
    deadline = time.monotonic() + grace
    while _group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _group_alive(pid):
        print(f"{what}: still running {grace:.0f}s after {sig.name}; sending SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        while _group_alive(pid):
            time.sleep(0.1)
    pidfile.unlink(missing_ok=True)
    return True


def _group_alive(pgid: int) -> bool:
    """Any process (not a zombie) of the process group still runs."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError):
        os.waitpid(-pgid, os.WNOHANG)  # reap our own children so they do not count as alive
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            # A zombie leader whose other threads still run (a JVM shutting down) is alive.
            if int(fields[2]) == pgid and (fields[0] != "Z" or len(list((stat.parent / "task").iterdir())) > 1):
                return True
    return False
