"""Nothing left behind: stages no attempt will commit are dropped when the pipeline is next
planned (never under a live attempt), and run counts tell found dead letters from new ones.

Real Postgres and broker (planning snapshots the topic); stage rows are written by the
product's stage writer, so no Spark job is needed.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from reprocess.core.errors import FencedRunError, StageRefusedError
from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.operations.summary import format_note, run_summary
from reprocess.postgres.db import libpq_url
from reprocess.postgres.stage import live_attempt
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import orders_spec, runs, stage_count
from tests.support.staging import Record, mark_staged, stage_and_commit, write_stage


def _order(order_id: str) -> dict[str, object]:
    return {"order_id": order_id, "customer_id": "c", "status": "new", "updated_at": datetime(2026, 11, 1, tzinfo=UTC)}


def _stage(engine, db_url, spec, run_id, records) -> None:
    mark_staged(engine, run_id, write_stage(db_url, spec, run_id, records))


def test_stages_of_fenced_over_threshold_and_abandoned_runs_are_dropped_at_the_next_plan(
    kafka_config, engine, db_url, unique_name
):
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 1)
    demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(5, 1), malformed=())
    incremental = RunRequest.incremental()
    winner, fenced, dead, waiting, abandoned, live = (f"{unique_name}-{n}" for n in range(6))
    for run_id in (winner, fenced, waiting, abandoned, live):
        snapshot_and_migrate(engine, kafka_config, spec, incremental, run_id)
    snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), dead)  # a backfill: not fenced
    good = [Record(0, 0, _order("o-1"))]
    _stage(engine, db_url, spec, winner, good)
    _stage(engine, db_url, spec, fenced, good)
    _stage(engine, db_url, spec, dead, [Record(0, 0, None), Record(0, 1, None)])  # 100% dead letters
    _stage(engine, db_url, spec, waiting, good)  # staged, its commit task not run yet
    write_stage(db_url, spec, abandoned, good)  # the attempt died before marking it staged
    write_stage(db_url, spec, live, good)  # an attempt still writing

    commit_stored(engine, spec, winner)
    with pytest.raises(FencedRunError):
        commit_stored(engine, spec, fenced)
    with pytest.raises(StageRefusedError, match="max_dead_letter_ratio"):
        commit_stored(engine, spec, dead)
    states = {r.run_id: (r.state, r.error) for r in runs(engine, spec)}
    assert states[fenced][0] == "failed" and "fenced" in states[fenced][1]  # the note says why
    assert states[dead][0] == "failed" and "dead letters" in states[dead][1]
    assert all(stage_count(engine, spec, r) is not None for r in (fenced, dead, waiting, abandoned, live))

    with live_attempt(libpq_url(db_url), live):
        snapshot_and_migrate(engine, kafka_config, spec, incremental, f"{unique_name}-next")
    assert {r: stage_count(engine, spec, r) is not None for r in (winner, fenced, dead, waiting, abandoned, live)} == {
        winner: False, fenced: False, dead: False, abandoned: False,  # dropped (the winner's by its commit)
        waiting: True, live: True,  # still wanted: a commit may come, an attempt is writing
    }  # fmt: skip


def test_a_replay_counts_the_dead_letters_it_found_apart_from_the_new_ones(engine, db_url, unique_name):
    from tests.support.staging import ordering_spec

    spec = dataclasses.replace(ordering_spec(unique_name, "offset"), max_dead_letter_ratio=1.0)
    records = [Record(0, 0, {"id": "a", "v": 1, "s": "x"}), Record(0, 1, None), Record(0, 2, None)]
    first = stage_and_commit(engine, db_url, spec, f"{unique_name}-1", records)
    replay = stage_and_commit(engine, db_url, spec, f"{unique_name}-2", [*records, Record(0, 3, None)])
    assert (first.dead_letters, first.dead_letters_new) == (2, 2)
    assert (replay.dead_letters, replay.dead_letters_new) == (3, 1)
    summary = run_summary(engine, spec.name, replay.run_id)
    assert (summary["dead_letters"], summary["dead_letters_new"]) == (3, 1)
    assert "3 dead letters found (1 new)" in format_note(summary, "committed", None)
