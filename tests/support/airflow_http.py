"""HTTP to an Airflow api-server: start one on loopback, a JWT from ``/auth/token`` and GETs that
follow no redirect (a refused request must show as the status Airflow answered, not as the login
page's 200)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

PASSWORD: Final = "tests-only"


def token(url: str, user: str, password: str) -> str:
    request = urllib.request.Request(
        f"{url}/auth/token",
        data=json.dumps({"username": user, "password": password}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return str(json.load(resp)["access_token"])


def get(url: str, path: str, token: str | None = None) -> tuple[int, bytes]:
    """(status, body) of a GET, with a Bearer token or none; no redirects followed."""
    status, body, _ = response(url, path, token)
    return status, body


def response(
    url: str, path: str, token: str | None = None, method: str = "GET", payload: Any = None
) -> tuple[int, bytes, Mapping[str, str]]:
    """(status, body, headers by lower-case name) of a request (a JSON ``payload`` for POST/PATCH), with
    a Bearer token or none; no redirects followed."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None if payload is None else json.dumps(payload).encode()
    if data is not None:
        headers["Content-Type"] = "application/json"
    opener = urllib.request.build_opener(NoRedirect)
    request = urllib.request.Request(f"{url}{path}", data=data, headers=headers, method=method)
    try:
        with opener.open(request, timeout=30) as resp:
            return resp.status, resp.read(), {k.lower(): v for k, v in resp.headers.items()}
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), {k.lower(): v for k, v in exc.headers.items()}


@contextmanager
def api_server(python: Path, env: Mapping[str, str], workdir: Path) -> Iterator[tuple[str, str]]:
    """``python -m airflow api-server`` on a free loopback port with one user (``admin``) whose
    password this helper sets; yields (url, the admin's JWT) and stops the server afterwards.

    ``env`` is the Airflow environment (home, metadata DB, folders); the metadata DB must be migrated.
    """
    from devstack.process import free_port, spawn, stop_pid, wait_for_port

    passwords = workdir / "passwords.json"
    passwords.write_text(json.dumps({"admin": PASSWORD}))
    port = free_port()
    server_env = {
        **env,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API_AUTH__JWT_SECRET": env.get("AIRFLOW__API_AUTH__JWT_SECRET", "tests-only-jwt-secret"),
    }
    log, pidfile = workdir / "api-server.log", workdir / "api-server.pid"
    server = spawn(
        [str(python), "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        log, pidfile, env=server_env, cwd=workdir,
    )  # fmt: skip
    try:
        wait_for_port(port, 120, "airflow api-server", log, server)
        url = f"http://127.0.0.1:{port}"
        yield url, token(url, "admin", PASSWORD)
    finally:
        stop_pid(pidfile, "airflow api-server")
