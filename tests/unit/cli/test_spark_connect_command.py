"""``reprocess spark-connect``'s arguments: where the server listens (options, then the spark_default
connection, then Spark's default), its state folder, its log level; and status/stop on a folder
holding no server (no JVM is started here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reprocess.cli.main import main, parser
from reprocess.cli.spark_connect import server
from reprocess.core.errors import SparkSetupError
from reprocess.spark.connect import library_fingerprint

SPARK_CONN_ENV = "AIRFLOW_CONN_SPARK_DEFAULT"


def _args(*argv: str):
    return parser().parse_args(["spark-connect", *argv])


def test_options_name_the_endpoint_state_folder_and_master_without_reading_the_connection(monkeypatch, tmp_path):
    monkeypatch.setenv(SPARK_CONN_ENV, "not json: the connection must not be read")
    target = server(_args("start", "--host", "0.0.0.0", "--port", "15999", "--state-dir", str(tmp_path),
                          "--master", "local[2]"))  # fmt: skip
    assert (target.host, target.port, target.url) == ("0.0.0.0", 15999, "sc://0.0.0.0:15999")
    assert (target.state_dir, target.pidfile, target.master) == (tmp_path, tmp_path / "server.pid", "local[2]")


def test_a_spark_connect_connection_gives_the_default_endpoint_and_an_option_overrides_its_part(monkeypatch):
    monkeypatch.setenv(SPARK_CONN_ENV, '{"conn_type": "spark_connect", "host": "10.1.2.3", "port": 15123}')
    assert server(_args("status")).url == "sc://10.1.2.3:15123"
    assert server(_args("status", "--port", "15200")).url == "sc://10.1.2.3:15200"


def test_a_spark_submit_connection_leaves_spark_connects_own_default(monkeypatch, tmp_path):
    monkeypatch.setenv(SPARK_CONN_ENV, '{"conn_type": "spark", "host": "local[2,4]"}')
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    target = server(_args("status"))
    assert (target.url, target.master) == ("sc://127.0.0.1:15002", "local[*,4]")
    assert target.state_dir == tmp_path / "reprocess" / "spark-connect"


def test_the_log_level_comes_from_the_option_else_the_setting_and_a_wrong_one_is_refused(monkeypatch):
    monkeypatch.setenv("REPROCESS_SPARK_LOG_LEVEL", "info")
    assert server(_args("start", "--host", "h", "--port", "1")).log_level == "INFO"
    assert server(_args("start", "--host", "h", "--port", "1", "--log-level", "debug")).log_level == "debug"
    assert server(_args("status", "--host", "h", "--port", "1")).log_level is None  # status reads no setting
    monkeypatch.setenv("REPROCESS_SPARK_LOG_LEVEL", "chatty")
    with pytest.raises(SparkSetupError, match="spark_log_level or \\$REPROCESS_SPARK_LOG_LEVEL"):
        server(_args("start", "--host", "h", "--port", "1"))


@pytest.mark.parametrize("argv", [["restart"], ["start", "--port", "70000"], ["start", "--port", "x"]])
def test_an_unknown_action_or_a_port_out_of_range_is_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as usage:
        parser().parse_args(["spark-connect", *argv])
    assert usage.value.code == 2


def test_status_and_stop_of_a_folder_with_no_server_say_so_and_status_exits_1(tmp_path, capsys):
    where = ["--host", "127.0.0.1", "--port", "15998", "--state-dir", str(tmp_path)]
    assert main(["spark-connect", "status", "--json", *where]) == 1
    found = json.loads(capsys.readouterr().out)
    assert found == {"url": "sc://127.0.0.1:15998", "running": False, "pid": None, "library": library_fingerprint(),
                     "served": None, "matches": False}  # fmt: skip
    assert main(["spark-connect", "stop", *where]) == 0
    assert "not running" in capsys.readouterr().out
    assert not Path(tmp_path / "server.pid").exists()
