"""Start, stop and check the Airflow UI (``airflow standalone``) on the embedded default.

``up`` prepares the metadata DB and the ``spark`` pool, starts ``airflow standalone`` in its own
session (pid file and log under ``$REPROCESS_STATE_DIR/airflow-ui/``), waits until
``GET /api/v2/version`` answers and prints the URL, the user and the password. Everything binds
to 127.0.0.1 (the worker/trigger log servers use their own, non-default ports). ``up`` on a
running UI prints the same, ``down`` on a stopped one does nothing.

The environment is the caller's (``scripts/env.sh`` is applied when it is missing), so the UI
reads the same ``AIRFLOW_HOME`` and metadata DB as the process that started it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from devstack.process import REPO, state_dir

DEFAULT_PORT = 18080
USER = "admin"


class UIError(RuntimeError):
    """The UI could not be started or stopped; the message says what to do."""


def load_env() -> None:
    """Apply scripts/env.sh to this process when the caller has not sourced it."""
    if os.environ.get("REPROCESS_HOME"):
        return
    out = subprocess.run(
        ["bash", "-c", f"source {REPO}/scripts/env.sh && env -0"], capture_output=True, check=True
    ).stdout
    for item in out.split(b"\0"):
        key, sep, value = item.decode().partition("=")
        if sep:
            os.environ[key] = value


def port_taken(port: int) -> bool:
    """Something listens on 127.0.0.1:<port> (or on all interfaces), or the port can't be bound."""
    with socket.socket() as s:
        s.settimeout(0.5)
        if s.connect_ex(("127.0.0.1", port)) == 0:
            return True
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def session_members(sid: int) -> list[int]:
    """Processes of the session ``sid``: standalone and every child, also those in their own
    process group (LocalExecutor's task processes make one each and outlive a group kill)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # after "pid (comm)": state ppid pgrp session ...; zombies are already gone for us
        if fields[0] != "Z" and int(fields[3]) == sid:
            members.append(int(stat.parent.name))
    return members


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


class UI:
    def __init__(self, run_dir: Path, port: int, worker_log_port: int, trigger_log_port: int) -> None:
        self.run_dir = run_dir
        self.port = port
        self.worker_log_port = worker_log_port
        self.trigger_log_port = trigger_log_port
        self.pidfile = run_dir / "standalone.pid"
        self.statefile = run_dir / "ui.json"
        self.log = run_dir / "standalone.log"

    # ------------------------------------------------------------------ state
    def pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if session_members(pid) else None

    def state(self) -> dict[str, object]:
        try:
            return json.loads(self.statefile.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    @staticmethod
    def password_file(airflow_home: str) -> Path:
        """Where Airflow's simple auth manager keeps the generated passwords."""
        return Path(airflow_home) / "simple_auth_manager_passwords.json.generated"

    @classmethod
    def password(cls, airflow_home: str) -> str:
        path = cls.password_file(airflow_home)
        try:
            return json.loads(path.read_text())[USER]
        except (FileNotFoundError, ValueError, KeyError) as exc:
            raise UIError(f"no password for user {USER!r} in {path} ({exc!r})") from exc

    def env(self, schedule: bool) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                # The execution API URL is derived from base_url, not from the port.
                "AIRFLOW__API__BASE_URL": f"http://localhost:{self.port}",
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.worker_log_port),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.trigger_log_port),
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": env.get("AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL", "10"),
            }
        )
        if not schedule:
            # Only runs triggered by hand (UI/API); no scheduled runs (the tests' DAGs).
            env["AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE"] = "False"
        return env

    def version_ok(self, port: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/version", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"

    def print_info(self, state: dict[str, object]) -> None:
        """The URL and login, where the password is kept (Airflow prints it only on its first start)
        and how to stop the standalone, which runs in the background in a session of its own."""
        home = str(state["airflow_home"])
        print(f"Airflow UI: {state['url']}")
        print(f"  user:     {USER}")
        print(f"  password: {self.password(home)}")
        print(f"            (kept in {self.password_file(home)})")
        print(f"  log:      {self.log}")
        print("  stop:     make down (its scheduler, DAG processor, triggerer and API server)")

    # ------------------------------------------------------------------ actions
    def up(self, timeout: float, schedule: bool, prepare: bool) -> None:
        if self.pid():
            state = self.state()
            print(f"airflow-ui: already running (pid {self.pid()})")
            self.print_info(state)
            return
        for what, port, variable in (
            ("the UI", self.port, "REPROCESS_UI_PORT"),
            ("the worker log server", self.worker_log_port, "REPROCESS_UI_WORKER_LOG_PORT"),
            ("the trigger log server", self.trigger_log_port, "REPROCESS_UI_TRIGGER_LOG_PORT"),
        ):
            if port_taken(port):
                raise UIError(
                    f"port {port} for {what} on 127.0.0.1 is taken by another process. "
                    f"Stop it or set {variable} to a free port."
                )
        env = self.env(schedule)
        if prepare:
            os.environ.update(env)
            from sqlalchemy.exc import OperationalError

            from devstack.airflow_db import prepare_airflow

            try:
                prepare_airflow()
            except OperationalError as exc:
                first = str(exc).strip().splitlines()[0]
                raise UIError(f"the Airflow metadata DB did not answer ({first}); is `make services` up?") from exc
        self.run_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self.log.open("ab") as out:
            out.write(f"\n===== airflow standalone on 127.0.0.1:{self.port} at {time.ctime()}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                ["airflow", "standalone"],
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # setsid: `down` stops every process of this session
            )
        self.pidfile.write_text(str(proc.pid))
        state = {
            "pid": proc.pid,
            "url": f"http://localhost:{self.port}",
            "port": self.port,
            "airflow_home": env["AIRFLOW_HOME"],
            "database": env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "").rsplit("/", 1)[-1],
        }
        self.statefile.write_text(json.dumps(state, indent=2))
        deadline = started + timeout
        while not self.version_ok(self.port):
            if proc.poll() is not None:
                self.pidfile.unlink(missing_ok=True)
                raise UIError(f"airflow standalone exited with {proc.returncode}. Log ({self.log}):\n{self.tail()}")
            if time.monotonic() > deadline:
                self.down()
                raise UIError(f"the UI did not answer /api/v2/version within {timeout:.0f}s. Log:\n{self.tail()}")
            time.sleep(0.5)
        print(f"airflow-ui: started airflow standalone (pid {proc.pid}) in {time.monotonic() - started:.1f} s")
        self.print_info(state)

    def down(self, wait: float = 30) -> None:
        pid = self.pid()
        if not pid:
            self.pidfile.unlink(missing_ok=True)
            print("airflow-ui: not running")
            return
        # standalone was started with setsid: its pid is the session id of all its processes.
        signal_all(session_members(pid), signal.SIGTERM)
        deadline = time.monotonic() + wait
        while session_members(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if left := session_members(pid):
            print(f"airflow-ui: {len(left)} process(es) ignored SIGTERM for {wait:.0f}s; sending SIGKILL")
            signal_all(left, signal.SIGKILL)
            while session_members(pid):
                time.sleep(0.1)
        self.pidfile.unlink(missing_ok=True)
        print(f"airflow-ui: stopped (pid {pid})")

    def status(self) -> bool:
        pid = self.pid()
        if not pid:
            print("airflow-ui: stopped")
            return False
        state = self.state()
        answers = self.version_ok(int(str(state.get("port", self.port))))
        print(f"airflow-ui: running (pid {pid}), {state.get('url')} {'answers' if answers else 'does not answer yet'}")
        return True


def main(argv: list[str] | None = None) -> int:
    load_env()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("REPROCESS_UI_PORT", DEFAULT_PORT)), help="UI port (18080)"
    )
    parser.add_argument("--worker-log-port", type=int, help="worker log server port (default: UI port + 1)")
    parser.add_argument("--trigger-log-port", type=int, help="trigger log server port (default: UI port + 2)")
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=state_dir() / "airflow-ui",
        help="pid file, state and log (default $REPROCESS_STATE_DIR/airflow-ui)",
    )
    parser.add_argument("--timeout", type=float, default=180, help="seconds to wait for the UI (180)")
    parser.add_argument("--no-schedule", action="store_true", help="no scheduled runs, only triggered ones")
    parser.add_argument("--no-prepare", action="store_true", help="skip `airflow db migrate` and the spark pool")
    args = parser.parse_args(argv)
    worker = args.worker_log_port or int(os.environ.get("REPROCESS_UI_WORKER_LOG_PORT", args.port + 1))
    trigger = args.trigger_log_port or int(os.environ.get("REPROCESS_UI_TRIGGER_LOG_PORT", args.port + 2))
    ui = UI(args.run_dir.resolve(), args.port, worker, trigger)
    try:
        if args.action == "up":
            ui.up(args.timeout, schedule=not args.no_schedule, prepare=not args.no_prepare)
        elif args.action == "down":
            ui.down()
        else:
            return 0 if ui.status() else 3
    except UIError as exc:
        print(f"error: airflow-ui: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
