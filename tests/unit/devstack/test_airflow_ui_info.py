"""What ``make up`` prints once the standalone Airflow answers (or is already running): besides the
URL, user and password, the file the password is kept in and the command that stops every process
of the standalone (a new user otherwise looks for the password in a scrolled-away log and stops the
UI with Ctrl-C in a shell that never started it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devstack.airflow_ui import UI


def test_up_prints_the_password_file_and_that_make_down_stops_the_standalone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "airflow"
    home.mkdir()
    password_file = home / "simple_auth_manager_passwords.json.generated"
    password_file.write_text(json.dumps({"admin": "s3cret"}))
    ui = UI(tmp_path / "run", 18080, 18081, 18082)

    ui.print_info({"url": "http://localhost:18080", "airflow_home": str(home)})

    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert "password: s3cret" in lines
    assert f"(kept in {password_file})" in lines
    assert "stop:     make down (its scheduler, DAG processor, triggerer and API server)" in lines
