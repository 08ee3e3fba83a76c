"""The rows per spec version the commit keeps (issue 58 item 1, review V finding 10) after real runs
(Spark over Connect, the real broker): a run, a spec change and the replay of one partition (a window's
heal), a rebuild's swap, writes by hand, an audit's heal and a ledger reset each leave them equal to a
``SELECT _spec_version, count(*)`` of the target, and the run's report says what that query says.
"""

from __future__ import annotations

import os

import pytest
import yaml
from sqlalchemy import Engine, text

from reprocess.core.ranges import OffsetRange, backfill_conf
from reprocess.core.runs import RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.operations.reset import ResetMode, ResetRequest, execute_reset
from reprocess.operations.summary import run_summary
from reprocess.runner.audit import audit_here
from reprocess.runner.start import commit_stored, start_run
from reprocess.spark.job import WindowStager
from tests.support.helpers import (
    PAYMENTS_SPEC,
    connect_session,
    loaded_payments,
    orders_spec,
    run_spark_stage,
)

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("postgres")]


def _oracle(engine: Engine, spec: PipelineSpec) -> dict[int | None, int]:
    with engine.connect() as conn:
        return dict(conn.execute(text(f"SELECT _spec_version, count(*) FROM {spec.qualified_target} GROUP BY 1")).all())


def _kept(engine: Engine, spec: PipelineSpec) -> dict[int | None, int]:
    with engine.connect() as conn:
        return dict(
            conn.execute(
                text('SELECT spec_version, "rows" FROM reprocess.version_rows WHERE relid = to_regclass(:t) '
                     'AND "rows" <> 0'), {"t": spec.qualified_target}
            ).all()
        )  # fmt: skip


def _stale_reported(engine: Engine, spec: PipelineSpec, run_id: str, live: int) -> None:
    """The run's report (the ``report`` task's summary) against the oracle's rows of other versions."""
    expected = {str(v): n for v, n in _oracle(engine, spec).items() if v != live}
    assert run_summary(engine, spec.name, run_id, spec=spec)["stale_rows"] == expected


def test_kept_rows_per_version_equal_a_group_by_after_run_replay_heal_rebuild_hand_writes_audit_heal_and_reset(
    engine, kafka_config, unique_name
):
    spec, _ = loaded_payments(engine, kafka_config, unique_name, 2, 60)
    assert _kept(engine, spec) == _oracle(engine, spec) == {1: 60}

    # v2 adds a column; the replay of partition 0 alone (a window's heal) re-derives its rows: two versions.
    columns = {**yaml.safe_load(PAYMENTS_SPEC.read_text())["columns"], "note": "text"}
    v2 = orders_spec(unique_name, unique_name, base=PAYMENTS_SPEC, columns=columns)
    with engine.connect() as conn:
        ends = dict(conn.execute(text("SELECT partition, next_offset FROM reprocess.consumer_offsets "
                                      "WHERE pipeline = :p"), {"p": spec.name}).all())  # fmt: skip
    heal = RunRequest.from_params(backfill_conf([OffsetRange(unique_name, 0, 0, ends[0])]))
    plan, _ = start_run(engine, kafka_config, v2, heal, f"{unique_name}-heal")
    run_spark_stage(v2, plan.run_id)
    commit_stored(engine, v2, plan.run_id)
    mixed = _oracle(engine, v2)
    assert set(mixed) == {1, 2} and sum(mixed.values()) == 60, mixed
    assert _kept(engine, v2) == mixed
    _stale_reported(engine, v2, plan.run_id, 2)

    rebuild, _ = start_run(engine, kafka_config, v2, RunRequest.from_params({"mode": "rebuild"}), f"{unique_name}-rb")
    run_spark_stage(v2, rebuild.run_id)
    commit_stored(engine, v2, rebuild.run_id)
    assert _kept(engine, v2) == _oracle(engine, v2) == {2: 60}
    _stale_reported(engine, v2, rebuild.run_id, 2)

    table = v2.qualified_target
    with engine.begin() as conn:  # a job's writes, not the commit's: the counts follow them too
        keys = list(conn.execute(text(f"SELECT payment_id FROM {table} ORDER BY 1 LIMIT 2")).scalars())
        conn.execute(text(f"UPDATE {table} SET status = 'refunded', _spec_version = 1 WHERE payment_id = :k"),
                     {"k": keys[0]})  # fmt: skip
        conn.execute(text(f"DELETE FROM {table} WHERE payment_id = :k"), {"k": keys[1]})
        conn.execute(text(f"INSERT INTO {table} (payment_id, order_id, status, amount, version, _kafka_topic, "
                          "_kafka_partition, _kafka_offset, _run_id) VALUES ('forged', 'o', 'paid', 1, 1, 't', 0, 0, "
                          "'x')"))  # fmt: skip
    assert _kept(engine, v2) == _oracle(engine, v2) == {1: 1, 2: 58, None: 1}

    with connect_session() as spark:
        stager = WindowStager(spark, os.environ["AIRFLOW_CONN_REPROCESS_DB"], kafka_config)
        _, healed = audit_here(engine, kafka_config, v2, stager, f"{unique_name}-audit", heal=True)
    assert healed.heal_run is not None, healed
    assert _kept(engine, v2) == _oracle(engine, v2) == {2: 60}

    # A reset moves the ledger alone (the next incremental re-reads: a replay, as above).
    execute_reset(engine, kafka_config, v2, ResetRequest(ResetMode.EARLIEST), reason="test", requested_by="test")
    assert _kept(engine, v2) == _oracle(engine, v2) == {2: 60}
    _stale_reported(engine, v2, healed.heal_run, 2)
