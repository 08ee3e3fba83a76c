"""HTTP to a running Airflow api-server: a JWT from ``/auth/token`` and GETs that follow no redirect
(a refused request must show as the status Airflow answered, not as the login page's 200)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


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

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(f"{url}{path}", headers=headers), timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
