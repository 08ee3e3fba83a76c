"""The tamper check after real runs (Spark over Connect, the real broker): a backfill and a rebuild's
swap leave it ok; a row changed, one removed and one inserted by a job afterwards are found, through the
command too; the audit's heal leaves it ok again (issue 57 items 2-4).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.cli.stored_check import run_stored
from reprocess.core.runs import RunRequest
from reprocess.operations.tamper import check_stored
from reprocess.runner.audit import audit_here
from reprocess.runner.start import commit_stored, start_run
from reprocess.spark.job import WindowStager
from tests.support.helpers import connect_session, loaded_payments, run_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("postgres")]


def _cli(pipeline: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """``reprocess audit --stored PIPELINE --json``: its exit code and its JSON."""
    capsys.readouterr()  # what the runs before printed
    code = run_stored(argparse.Namespace(pipeline=pipeline, json=True))
    return code, json.loads(capsys.readouterr().out)


def test_a_backfill_and_a_rebuild_keep_the_stored_check_ok_changes_by_a_job_are_found_and_a_heal_settles_them(
    engine, kafka_config, unique_name, capsys
):
    spec, _ = loaded_payments(engine, kafka_config, unique_name, 2, 60)
    first = check_stored(engine, spec)
    assert first.ok and first.rows > 0, first

    rebuild, _ = start_run(engine, kafka_config, spec, RunRequest.from_params({"mode": "rebuild"}), f"{unique_name}-rb")
    run_spark_stage(spec, rebuild.run_id)
    commit_stored(engine, spec, rebuild.run_id)
    rebuilt = check_stored(engine, spec)
    assert rebuilt.ok and rebuilt.rows == first.rows, rebuilt
    code, verdict = _cli(spec.name, capsys)
    assert (code, verdict["verdict"], verdict["rows"]) == (0, "ok", first.rows)

    table = spec.qualified_target
    with engine.begin() as conn:  # the product's engine, but not its commit: a job's UPDATE, DELETE, INSERT
        keys = list(conn.execute(text(f"SELECT payment_id FROM {table} ORDER BY 1 LIMIT 2")).scalars())
        conn.execute(text(f"UPDATE {table} SET status = 'refunded' WHERE payment_id = :k"), {"k": keys[0]})
        conn.execute(text(f"DELETE FROM {table} WHERE payment_id = :k"), {"k": keys[1]})
        conn.execute(text(f"INSERT INTO {table} (payment_id, order_id, status, amount, version, _kafka_topic, "
                          "_kafka_partition, _kafka_offset, _run_id) "
                          "VALUES ('forged', 'o', 'paid', 1, 1, 't', 0, 0, 'x')"))  # fmt: skip
    tampered = check_stored(engine, spec)
    assert (tampered.changed, tampered.removed, tampered.inserted) == (1, 1, 1), tampered
    assert (tampered.changed_keys, tampered.inserted_keys) == ([keys[0]], ["forged"])
    code, verdict = _cli(spec.name, capsys)
    assert (code, verdict["verdict"], verdict["changed"]) == (1, "tampered", 1)
    assert _cli("no_such_pipeline", capsys)[0] == 2

    # The audit's heal (issue 57 item 4) writes as the product: the table is as the log says and as it wrote it.
    with connect_session() as spark:
        stager = WindowStager(spark, os.environ["AIRFLOW_CONN_REPROCESS_DB"], kafka_config)
        _, healed = audit_here(engine, kafka_config, spec, stager, f"{unique_name}-audit", heal=True)
    assert healed.heal_run is not None, healed
    assert check_stored(engine, spec).ok, check_stored(engine, spec)
