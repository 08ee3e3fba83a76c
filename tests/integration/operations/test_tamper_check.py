"""The tamper check after real runs (Spark over Connect, the real broker): a backfill, a replay and
a rebuild's swap each leave it ok, and a row changed by hand afterwards is found (issue 57 item 3).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.cli.stored_check import run_stored
from reprocess.core.runs import RunRequest
from reprocess.operations.tamper import check_stored
from reprocess.runner.start import commit_stored, start_run
from tests.support.helpers import backfill, loaded_payments, run_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("postgres")]


def _cli(pipeline: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """``reprocess audit --stored PIPELINE --json``: its exit code and its JSON."""
    capsys.readouterr()  # what the runs before printed
    code = run_stored(argparse.Namespace(pipeline=pipeline, json=True))
    return code, json.loads(capsys.readouterr().out)


def test_a_backfill_a_replay_and_a_rebuild_keep_the_stored_check_ok(engine, kafka_config, unique_name, capsys):
    spec, _ = loaded_payments(engine, kafka_config, unique_name, 2, 60)
    first = check_stored(engine, spec)
    assert first.ok and first.rows > 0, first
    backfill(engine, kafka_config, spec, f"{unique_name}-replay")
    assert check_stored(engine, spec).ok

    rebuild, _ = start_run(engine, kafka_config, spec, RunRequest.from_params({"mode": "rebuild"}), f"{unique_name}-rb")
    run_spark_stage(spec, rebuild.run_id)
    commit_stored(engine, spec, rebuild.run_id)
    rebuilt = check_stored(engine, spec)
    assert rebuilt.ok and rebuilt.rows == first.rows, rebuilt
    code, verdict = _cli(spec.name, capsys)
    assert (code, verdict["verdict"], verdict["rows"]) == (0, "ok", first.rows)

    with engine.begin() as conn:  # the product's engine, but not its commit: a job's UPDATE
        conn.execute(text(f"UPDATE {spec.qualified_target} SET status = 'refunded' "
                          f"WHERE payment_id = (SELECT min(payment_id) FROM {spec.qualified_target})"))  # fmt: skip
    tampered = check_stored(engine, spec)
    assert (tampered.changed, tampered.removed, tampered.inserted) == (1, 0, 0), tampered
    code, verdict = _cli(spec.name, capsys)
    assert (code, verdict["verdict"], verdict["changed"]) == (1, "tampered", 1)
    assert _cli("no_such_pipeline", capsys)[0] == 2
