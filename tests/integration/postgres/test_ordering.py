"""The pipeline's one ordering decides "newer" in the merge, on real Postgres (no Spark needed).

Each test commits newer data first, then replays an OLDER slice through the real commit path
(stage rows COPYed by the product's stage writer) and proves that nothing changed: same row
count, same rows, same ``_updated_at``. Expected rows are written out by hand from the records.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from tests.support.staging import Record, ordering_spec, stage_and_commit


def _target(engine, spec) -> dict[str, tuple[Any, ...]]:
    """key → (v, s, partition, offset, _updated_at): the whole visible state of each row."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(f"SELECT id, v, s, _kafka_partition, _kafka_offset, _updated_at FROM {spec.qualified_target}")
        ).all()
    return {r[0]: tuple(r[1:]) for r in rows}


def _lineage(state: dict[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
    return {k: v[:4] for k, v in state.items()}


def _rec(partition: int, offset: int, key: str, v: int, s: str) -> Record:
    return Record(partition, offset, {"id": key, "v": v, "s": s})


def test_replay_of_an_older_offset_slice_changes_no_row(engine, db_url, unique_name):
    spec = ordering_spec(unique_name, "offset")
    older = [_rec(0, 0, "a", 1, "a0"), _rec(0, 1, "b", 1, "b1"), _rec(0, 2, "a", 1, "a2"), _rec(1, 0, "c", 1, "c0")]
    newer = [_rec(0, 3, "a", 1, "a3"), _rec(0, 4, "b", 1, "b4"), _rec(1, 1, "c", 1, "c1")]
    stage_and_commit(engine, db_url, spec, f"{unique_name}-old", older)
    stage_and_commit(engine, db_url, spec, f"{unique_name}-new", newer)
    before = _target(engine, spec)
    assert _lineage(before) == {"a": (1, "a3", 0, 3), "b": (1, "b4", 0, 4), "c": (1, "c1", 1, 1)}

    replay = stage_and_commit(engine, db_url, spec, f"{unique_name}-replay", older)
    assert replay.rows_upserted == 0
    assert _target(engine, spec) == before


def test_replay_of_older_versions_changes_no_row_and_ties_go_to_the_later_offset(engine, db_url, unique_name):
    spec = ordering_spec(unique_name, {"mode": "column", "column": "v"})
    # Versions arrive out of order: b's version 2 is written after its version 5.
    first = [_rec(0, 0, "a", 3, "a-v3"), _rec(0, 1, "b", 5, "b-v5"), _rec(0, 2, "b", 2, "b-v2"),
             _rec(0, 3, "c", 7, "c-v7")]  # fmt: skip
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", first)
    # A tie on version: a's version 3 written again later wins by offset; c's tie sits earlier.
    second = [_rec(0, 4, "a", 3, "a-v3-again"), _rec(1, 0, "c", 7, "c-v7-p1")]
    stage_and_commit(engine, db_url, spec, f"{unique_name}-2", second)
    before = _target(engine, spec)
    assert _lineage(before) == {"a": (3, "a-v3-again", 0, 4), "b": (5, "b-v5", 0, 1), "c": (7, "c-v7-p1", 1, 0)}

    # Replays: the whole first slice (older versions, and ties at lower offsets), then a slice
    # holding only b's stale version 2 at a HIGHER offset than the row's (offset must not win).
    assert stage_and_commit(engine, db_url, spec, f"{unique_name}-r1", first).rows_upserted == 0
    stale = [_rec(0, 9, "b", 2, "b-v2-late"), _rec(0, 10, "a", 2, "a-v2-late")]
    assert stage_and_commit(engine, db_url, spec, f"{unique_name}-r2", stale).rows_upserted == 0
    assert _target(engine, spec) == before


def test_a_key_that_moves_partition_is_ordered_by_its_version(engine, db_url, unique_name):
    """Column ordering survives a partition-count change: key a moves from partition 2 to the
    lower-numbered partition 0 at a lower offset, and its newer version still wins; a replay of
    the old partition's records changes nothing. (Offset ordering refuses the change at plan
    time: tests/integration/runner/test_faults.py, partitions added.)"""
    spec = ordering_spec(unique_name, {"mode": "column", "column": "v"})
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", [_rec(2, 50, "a", 1, "on-p2"), _rec(2, 51, "b", 4, "b")])
    moved = stage_and_commit(engine, db_url, spec, f"{unique_name}-2", [_rec(0, 5, "a", 2, "on-p0")])
    assert moved.rows_upserted == 1
    before = _target(engine, spec)
    assert _lineage(before) == {"a": (2, "on-p0", 0, 5), "b": (4, "b", 2, 51)}
    replay = [_rec(2, 50, "a", 1, "on-p2"), _rec(2, 51, "b", 4, "b")]
    assert stage_and_commit(engine, db_url, spec, f"{unique_name}-3", replay).rows_upserted == 0
    assert _target(engine, spec) == before
