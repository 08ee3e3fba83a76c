"""``max_dead_letter_ratio`` judges what it is meant to judge: the NEW dead letters against the
records that can now land, over the whole run, not one batch.

Real Postgres; stage rows are written by the product's stage writer (no Spark needed), and the
expected rows and dead letters are written out by hand from the records.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from reprocess.core.errors import StageRefusedError
from reprocess.core.names import child_run_id
from reprocess.core.ranges import OffsetRange
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import parse_spec
from reprocess.operations.redrive import plan_redrive
from reprocess.postgres import store
from reprocess.runner.start import commit_stored
from tests.support.staging import Record, mark_staged, plan_ranges, stage_and_commit, write_stage

AMOUNT = "missing required field amount"
MALFORMED = "malformed JSON or not a JSON object: x"


def _spec(name: str) -> PipelineSpec:
    return parse_spec(
        {"name": name, "topics": [name], "key": ["id"], "columns": {"id": "text", "amount": "bigint"},
         "target_table": f"{name}.items", "max_dead_letter_ratio": 0.05},
        source=f"{name}.yaml",
    )  # fmt: skip


def _good(offset: int) -> Record:
    return Record(0, offset, {"id": f"k{offset}", "amount": offset})


def _rows(engine: Any, spec: PipelineSpec) -> dict[str, int]:
    with engine.connect() as conn:
        return dict(conn.execute(text(f"SELECT id, amount FROM {spec.qualified_target}")).all())


def _open_dead(engine: Any, spec: PipelineSpec) -> dict[int, str]:
    with engine.connect() as conn:
        rows = conn.execute(
            text('SELECT "offset", error_kind FROM reprocess.dead_letters WHERE pipeline = :p '
                 "AND resolved_run_id IS NULL"), {"p": spec.name}
        ).all()  # fmt: skip
    return dict(rows)


def test_a_redrive_of_one_error_kind_interleaved_with_another_lands_the_records_that_now_parse(
    engine, db_url, unique_name
):
    """1000 records, 40 dead (4 %, accepted) in a burst [100, 150) where two error kinds
    interleave. The spec is fixed for one kind; its redrive re-reads the joined burst, where the
    other kind is still dead (20 of 50 records), but none of them is a NEW dead letter."""
    spec = _spec(unique_name)
    burst = range(100, 150)
    amount_dead = {o for o in burst if o % 5 in (0, 2)}
    malformed = {o for o in burst if o % 5 in (1, 3)}
    errors = {**dict.fromkeys(amount_dead, AMOUNT), **dict.fromkeys(malformed, MALFORMED)}
    first = [Record(0, o, None, errors[o]) if o in errors else _good(o) for o in range(1000)]
    assert stage_and_commit(engine, db_url, spec, f"{unique_name}-1", first).dead_letters == 40

    with engine.connect() as conn:
        redrive = plan_redrive(conn, spec.name, kind="missing required field amount")
    assert [(r.start, r.end) for r in redrive.ranges] == [(100, 148)]
    fixed = [Record(0, o, None, MALFORMED) if o in malformed else _good(o) for o in range(100, 148)]
    result = stage_and_commit(engine, db_url, spec, f"{unique_name}-redrive", fixed)

    assert (result.dead_letters, result.dead_letters_new) == (len(malformed) - 1, 0)
    assert _rows(engine, spec) == {f"k{o}": o for o in range(1000) if o not in malformed}
    assert _open_dead(engine, spec) == dict.fromkeys(malformed, "malformed JSON or not a JSON object")


def test_a_burst_of_bad_records_inside_one_batch_is_judged_against_the_whole_run(engine, db_url, unique_name):
    """3000 offsets in batches of 1000; 100 malformed records inside batch 1 (10 % of the batch,
    3.3 % of the run, which unbatched would pass). Judged per batch, batch 1 is refused, and the
    next run's first batch is the same offsets: refused forever, however much data arrives."""
    spec = _spec(unique_name)
    run_id = f"{unique_name}-run"
    burst = range(1400, 1500)
    plan_ranges(engine, spec, run_id, "backfill", [OffsetRange(unique_name, 0, 0, 3000)])
    batches = [[OffsetRange(unique_name, 0, k * 1000, (k + 1) * 1000)] for k in range(3)]
    with engine.begin() as conn:
        store.create_batch_runs(conn, run_id, batches)
    for k in range(3):
        child = child_run_id(run_id, k)
        records = [Record(0, o, None) if o in burst else _good(o) for o in range(k * 1000, (k + 1) * 1000)]
        mark_staged(engine, child, write_stage(db_url, spec, child, records))
        commit_stored(engine, spec, child)
    mark_staged(engine, run_id, 0)
    result = commit_stored(engine, spec, run_id)

    assert (result.records_read, result.dead_letters) == (3000, 100)
    assert _rows(engine, spec) == {f"k{o}": o for o in range(3000) if o not in burst}
    assert _open_dead(engine, spec) == dict.fromkeys(burst, "malformed JSON or not a JSON object")


def test_a_small_incremental_with_a_tombstone_the_spec_keeps_as_a_dead_letter_commits(engine, db_url, unique_name):
    """Under column ordering a tombstone can only be a dead letter (``tombstones: dead_letter``): that is the
    spec's rule, not a broken producer, so 1 tombstone in 3 records (33 % > 5 %) does not refuse the run; the
    tombstone is still a dead letter. One malformed record in the next 3 still does: the ratio guards the producer."""
    spec = parse_spec(
        {"name": unique_name, "topics": [unique_name], "key": ["id"], "target_table": f"{unique_name}.items",
         "columns": {"id": "text", "amount": {"type": "bigint", "required": True}},
         "ordering": {"mode": "column", "column": "amount"}, "max_dead_letter_ratio": 0.05},
        source=f"{unique_name}.yaml",
    )  # fmt: skip
    tombstone = "tombstone (null value) kept as a dead letter by tombstones dead_letter"
    first = [_good(0), Record(0, 1, None, error=tombstone, tombstone=True), _good(2)]
    result = stage_and_commit(engine, db_url, spec, f"{unique_name}-1", first, kind="incremental")

    assert (result.records_read, result.dead_letters) == (3, 1)
    assert _rows(engine, spec) == {"k0": 0, "k2": 2}
    assert _open_dead(engine, spec) == {1: tombstone}
    with pytest.raises(StageRefusedError, match="1 new dead letters in 3 records"):
        stage_and_commit(engine, db_url, spec, f"{unique_name}-2", [_good(3), Record(0, 4, None), _good(5)])
