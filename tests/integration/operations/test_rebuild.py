"""Rebuild into a shadow table: a key-type change, a killed rebuild that resumes, an atomic swap.

The expected rows are recomputed here from the produced messages (last record per id by offset).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import psycopg2
import pytest
from sqlalchemy import text

from reprocess.core.errors import FencedRunError, SchemaChangeError
from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.postgres import queries
from reprocess.postgres.db import libpq_url
from reprocess.postgres.stage import create_stage
from reprocess.runner.start import commit_stored, snapshot_and_migrate, start_run
from tests.support.helpers import ledger, log_ends, orders_spec, run_spark_stage, start_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]

COLUMNS = {"id": {"type": "text", "required": True}, "name": {"type": "text"}, "n": {"type": "integer"}}


def _events(count: int) -> list[tuple[str, dict]]:
    """Three updates per id; ids are numeric strings, so v1 (text) and v2 (bigint) both parse them."""
    return [(str(1000 + i % count), {"id": str(1000 + i % count), "name": f"u{i}", "n": i}) for i in range(3 * count)]


def _oracle(produced) -> dict[int, tuple[str, int]]:
    best: dict[int, tuple[int, str, int]] = {}
    for _, offset, _key, value, *_ in produced.messages:
        ev = json.loads(value)
        best[int(ev["id"])] = max(best.get(int(ev["id"]), (-1, "", 0)), (offset, ev["name"], ev["n"]))
    return {k: (name, n) for k, (_, name, n) in best.items()}


def _live(engine, spec) -> tuple[int, str]:
    """(rows, type of id) of the live table, in one snapshot."""
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT count(*) FROM {spec.qualified_target}")).scalar_one()
        kind = conn.execute(
            text("SELECT data_type FROM information_schema.columns WHERE table_schema = :s AND table_name = :t "
                 "AND column_name = 'id'"), {"s": spec.target_schema, "t": spec.target_table}
        ).scalar_one()  # fmt: skip
    return rows, kind


def _batches(engine, run_id: str) -> list[str]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                text("SELECT state FROM reprocess.runs WHERE parent_run_id = :r ORDER BY batch_index"), {"r": run_id}
            ).scalars()
        )


def _committed_at(engine, run_id: str) -> dict[int, object]:
    """batch index → commit time of the run's committed batches."""
    with engine.connect() as conn:
        return dict(
            conn.execute(
                text(
                    "SELECT batch_index, committed_at FROM reprocess.runs WHERE parent_run_id = :r "
                    "AND state = 'committed'"
                ),
                {"r": run_id},
            ).all()
        )


def test_key_type_change_is_rebuilt_resumed_verified_and_swapped_atomically(kafka_config, engine, db_url, unique_name):
    v1 = orders_spec(unique_name, unique_name, key=["id"], columns=COLUMNS, ordering="offset")
    demo_data.create_topic(kafka_config, unique_name, 1)
    produced = demo_data.produce(kafka_config, unique_name, 1, _events(60), malformed=())
    expected = _oracle(produced)
    first = snapshot_and_migrate(engine, kafka_config, v1, RunRequest.from_params({}), f"{unique_name}-v1")
    run_spark_stage(v1, first.run_id)
    commit_stored(engine, v1, first.run_id)
    before = _live(engine, v1)
    assert before == (len(expected), "text")
    # An incremental planned (and staged) against the v1 table, committing only after the swap.
    zombie = snapshot_and_migrate(engine, kafka_config, v1, RunRequest.incremental(), f"{unique_name}-zombie")
    with psycopg2.connect(libpq_url(db_url)) as pg:
        create_stage(pg, v1, zombie.run_id)
    with engine.begin() as conn:
        conn.execute(queries.MARK_STAGED, {"run_id": zombie.run_id, "stage_rows": 0})

    v2 = orders_spec(unique_name, unique_name, key=["id"], columns={**COLUMNS, "id": {"type": "bigint"}})
    with pytest.raises(SchemaChangeError, match=r"column id: type text → bigint.*mode=rebuild"):
        snapshot_and_migrate(engine, kafka_config, v2, RunRequest.incremental(), f"{unique_name}-inc")
    plan, _ = start_run(engine, kafka_config, v2, RunRequest.from_params({"mode": "rebuild", "batch_size": 40}),
                    f"{unique_name}-rebuild")  # fmt: skip
    assert _live(engine, v1) == before

    # Killed after its first batch: the shadow holds part of the data, the live table none of it.
    job = start_spark_stage(v2, plan.run_id, batch_size=40)
    deadline = time.monotonic() + 240
    while "committed" not in _batches(engine, plan.run_id):
        assert job.poll() is None, job.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "no batch committed within 240 s"
        time.sleep(0.2)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    assert 0 < _batches(engine, plan.run_id).count("committed") < len(_batches(engine, plan.run_id))
    assert _live(engine, v1) == before
    kept = _committed_at(engine, plan.run_id)

    # Resume and swap while a reader keeps looking: it sees the old table or the new one, never a mix.
    seen: set[tuple[int, str]] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.add(_live(engine, v1))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        run_spark_stage(v2, plan.run_id, batch_size=40)
        # Resumed, not restarted: the batches committed before the kill keep their commit time.
        assert set(_batches(engine, plan.run_id)) == {"committed"}
        assert {k: v for k, v in _committed_at(engine, plan.run_id).items() if k in kept} == kept
        result = commit_stored(engine, v2, plan.run_id)
    finally:
        stop.set()
        watcher.join()
    assert seen <= {before, (len(expected), "bigint")}, seen
    assert result.records_read == len(produced.messages)

    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT id, name, n, _spec_version FROM {v2.qualified_target}")).all()
        tables = set(
            conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": v2.target_schema})
            .scalars()
        )  # fmt: skip
        old_name = next(t for t in tables if t.startswith(f"{v2.target_table}__old_"))
        old_rows = conn.execute(text(f"SELECT count(*) FROM {v2.target_schema}.{old_name}")).scalar_one()
        live_version = conn.execute(
            text("SELECT spec_version FROM reprocess.pipelines WHERE name = :p"), {"p": v2.name}
        ).scalar_one()
    assert {r.id: (r.name, r.n) for r in rows} == expected
    assert {r._spec_version for r in rows} == {live_version} == {2}
    assert old_rows == before[0] and f"{v2.target_table}__rebuild" not in tables
    assert ledger(engine, v2) == log_ends(produced)
    assert commit_stored(engine, v2, plan.run_id).already_committed

    # The incremental planned against the old table is fenced at its commit; a new one runs on v2.
    with pytest.raises(FencedRunError, match=r"planned for spec v1 but .* is at v2"):
        commit_stored(engine, v2, zombie.run_id)
    after = snapshot_and_migrate(engine, kafka_config, v2, RunRequest.incremental(), f"{unique_name}-after")
    assert after.is_empty
