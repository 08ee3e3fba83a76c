"""An ambiguous commit resolves itself (issue 27, item 3).

The connection to PostgreSQL drops while a COMMIT is in flight, cut by a proxy on loopback
(``commit_cut_proxy``): the attempt cannot tell whether it committed. Its retry must learn it
from the database (run state, ledger) and neither apply the run twice nor lose it: for a single
run, a batch of a chunked run, and a rebuild's swap. Each case ends with Postgres against the
oracle, recomputed from the produced messages.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest
from sqlalchemy import text

from reprocess.core.errors import CommitInterrupted
from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.postgres.db import make_engine
from reprocess.runner.start import commit_stored, snapshot_and_migrate, start_run
from tests.support.commit_cut_proxy import commit_cut_proxy
from tests.support.helpers import (
    assert_matches_oracle,
    ledger,
    log_ends,
    oracle_rows,
    orders_spec,
    run_spark_stage,
    runs,
    target_rows,
)

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]


def _marks_committed(run_id: str) -> str:
    """The statement that makes a run (or a batch, or a rebuild's parent) committed, in its transaction."""
    return rf"SET state = 'committed'.*WHERE run_id = '{re.escape(run_id)}'"


def _state(engine: Any, run_id: str) -> str:
    with engine.connect() as conn:
        return str(conn.execute(text("SELECT state FROM reprocess.runs WHERE run_id = :r"), {"r": run_id}).scalar())


def test_single_run_commit_cut_before_or_after_the_server_commits_is_resolved_by_the_retry(
    kafka_config, engine, db_url, unique_name
):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(120, 3), transactional_every=50)
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), unique_name)
    run_spark_stage(spec, plan.run_id)

    with commit_cut_proxy(db_url) as (proxy, proxied_url):
        cut_engine = make_engine(proxied_url)
        # Cut before the COMMIT reaches the server: it rolled back, and the run is still to commit.
        proxy.arm(_marks_committed(plan.run_id), "before")
        with pytest.raises(CommitInterrupted, match="retry the task"):
            commit_stored(cut_engine, spec, plan.run_id)
        assert proxy.cuts == 1
        assert _state(engine, plan.run_id) == "staged"
        assert target_rows(engine, spec) == {} and ledger(engine, spec) == {}

        # Cut after the server committed: the attempt hears nothing, the database has it all.
        proxy.arm(_marks_committed(plan.run_id), "after")
        with pytest.raises(CommitInterrupted):
            commit_stored(cut_engine, spec, plan.run_id)
        assert proxy.cuts == 2
        cut_engine.dispose()
    assert _state(engine, plan.run_id) == "committed"

    # The retry reads the run's state and answers; it applies nothing again.
    retry = commit_stored(engine, spec, plan.run_id)
    assert retry.already_committed and retry.records_read == len(produced.messages)
    assert_matches_oracle(engine, spec, produced, log_ends(produced))
    (run,) = runs(engine, spec)
    assert run.rows_upserted == len(oracle_rows(produced))


def test_batch_commit_cut_after_the_server_commits_is_not_redone_by_the_retried_job(
    kafka_config, engine, db_url, unique_name
):
    spec = orders_spec(unique_name, unique_name, max_dead_letter_ratio=0.5)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(90, 3), transactional_every=70)
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({"batch_size": 40}), unique_name)
    assert max(r.width for r in plan.ranges) > 80  # at least three batches
    second = f"{plan.run_id}#1"

    # The job commits batch 0, then batch 1's commit is cut after the server committed it: the
    # Spark task fails with the error that says the retry is safe.
    with commit_cut_proxy(db_url) as (proxy, proxied_url):
        proxy.arm(_marks_committed(second), "after")
        with pytest.raises(CommitInterrupted, match=re.escape(second)):
            run_spark_stage(spec, plan.run_id, batch_size=40, db_url=proxied_url)
        assert proxy.cuts == 1
    with engine.connect() as conn:
        before = dict(
            conn.execute(
                text("SELECT batch_index, committed_at FROM reprocess.runs WHERE parent_run_id = :r "
                     "AND state = 'committed'"), {"r": plan.run_id}
            ).all()
        )  # fmt: skip
    assert set(before) == {0, 1}

    # The retried task resumes after batch 1 (its commit is in the database) and never redoes it.
    run_spark_stage(spec, plan.run_id, batch_size=40)
    with engine.connect() as conn:
        query = text("SELECT batch_index, committed_at FROM reprocess.runs WHERE parent_run_id = :r")
        after = dict(conn.execute(query, {"r": plan.run_id}).all())
    assert {k: after[k] for k in before} == before and len(after) > 2
    result = commit_stored(engine, spec, plan.run_id)
    assert result.records_read == len(produced.messages)
    assert_matches_oracle(engine, spec, produced, log_ends(produced))


def test_rebuild_swap_cut_while_its_commit_is_in_flight_is_resolved_by_the_retry(
    kafka_config, engine, db_url, unique_name
):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(80, 3), transactional_every=60)
    first = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), f"{unique_name}-first")
    run_spark_stage(spec, first.run_id)
    commit_stored(engine, spec, first.run_id)
    rebuild, _ = start_run(engine, kafka_config, spec, RunRequest.from_params({"mode": "rebuild"}), unique_name)
    run_spark_stage(spec, rebuild.run_id)

    # The swap's client connection is cut at its COMMIT, which the proxy holds: the server still
    # has the swap's transaction open (tables renamed, run marked committed) when the retry starts.
    outcome: dict[str, Any] = {}
    with commit_cut_proxy(db_url) as (proxy, proxied_url):
        cut_engine = make_engine(proxied_url)
        proxy.arm(_marks_committed(rebuild.run_id), "held")
        with pytest.raises(CommitInterrupted):
            commit_stored(cut_engine, spec, rebuild.run_id)

        def retry() -> None:
            try:
                outcome["result"] = commit_stored(engine, spec, rebuild.run_id)
            except Exception as exc:  # reported below
                outcome["error"] = exc

        retrying = threading.Thread(target=retry)
        retrying.start()
        _wait_for_lock_waiter(engine)
        proxy.release()  # the first attempt's COMMIT reaches the server now
        assert proxy.wait_cut(60)
        retrying.join(120)
        cut_engine.dispose()
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"].already_committed

    assert target_rows(engine, spec) == oracle_rows(produced)
    assert ledger(engine, spec) == log_ends(produced)
    with engine.connect() as conn:
        tables = set(
            conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": spec.target_schema})
            .scalars()
        )  # fmt: skip
    # One swap: the live table, the one it replaced under a dated name, no shadow left.
    assert len([t for t in tables if t.startswith(f"{spec.target_table}__old_")]) == 1
    assert f"{spec.target_table}__rebuild" not in tables


def _wait_for_lock_waiter(engine: Any, seconds: float = 120) -> None:
    """Until a backend of this database waits on a lock: the retry, blocked by the held swap."""
    deadline = time.monotonic() + seconds
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    while True:
        with engine.connect() as conn:
            if conn.execute(query).scalar():
                return
        assert time.monotonic() < deadline, f"no retry waited on the held swap within {seconds:.0f}s"
        time.sleep(0.1)
