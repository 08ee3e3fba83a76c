"""No record can stall a pipeline (issue 27, item 1): the hostile-value corpus on the real stack.

Every value of :mod:`tests.support.hostile_corpus` goes to one topic, one backfill reads them all (Apache
Kafka, Spark Connect, PostgreSQL), and the run commits; each value is then exactly one row or one
dead letter, as the corpus states. A second backfill over the same offsets changes nothing.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from reprocess.core.runs import RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import orders_spec, run_spark_stage
from tests.support.hostile_corpus import COLUMNS, CORPUS, Case
from tests.support.hostile_run import produce_corpus, snapshot

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]


@dataclass(frozen=True)
class Outcome:
    spec: PipelineSpec
    offsets: dict[str, int]  # case name → its offset
    rows: dict[int, dict[str, Any]]  # offset → the row (columns and lineage)
    dead: dict[int, tuple[bytes | None, str]]  # offset → (stored value, error)
    results: tuple[Any, Any]  # the two runs' commit results
    before: tuple[Any, Any]  # (rows, dead letters) as the first run left them, with every column
    after: tuple[Any, Any]  # the same after the second run


@pytest.fixture(scope="module")
def corpus(kafka_config: dict[str, Any], engine: Any) -> Iterator[Outcome]:
    name = f"hostile_corpus_{uuid.uuid4().hex[:6]}"
    columns = {c: {"type": t, "required": c == "id"} for c, t in COLUMNS.items()}
    spec = orders_spec(name, name, key=["id"], columns=columns, max_dead_letter_ratio=1.0)
    offsets = produce_corpus(kafka_config, name, CORPUS)
    results = []
    states = []
    for attempt in ("first", "second"):
        plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), f"{name}_{attempt}")
        run_spark_stage(spec, plan.run_id)
        results.append(commit_stored(engine, spec, plan.run_id))
        states.append(snapshot(engine, spec))
    rows_, dead_ = states[0]
    rows = {r["_kafka_offset"]: r for r in rows_}
    dead = {d["offset"]: (d["value"], d["error"]) for d in dead_}
    yield Outcome(spec, offsets, rows, dead, (results[0], results[1]), states[0], states[1])


def test_the_corpus_commits_and_a_second_run_changes_nothing(corpus: Outcome) -> None:
    first, second = corpus.results
    expected_rows = sum(1 for c in CORPUS if c.row is not None)
    assert (first.records_read, first.rows_upserted, first.dead_letters) == (
        len(CORPUS), expected_rows, len(CORPUS) - expected_rows,
    )  # fmt: skip
    assert set(corpus.rows).isdisjoint(corpus.dead) and set(corpus.rows) | set(corpus.dead) == set(
        corpus.offsets.values()
    )
    # The replay reads every record again and finds the same dead letters; it writes no row, and the
    # rows (lineage, run and _updated_at included) and dead letters are exactly as the first left them.
    assert (second.records_read, second.rows_upserted, second.dead_letters) == (len(CORPUS), 0, first.dead_letters)
    assert repr(corpus.after) == repr(corpus.before)  # repr: NaN equals itself there


def _same(expected: Any, stored: Any) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(stored, float) and math.isnan(stored)
    return bool(expected == stored) and type(expected) is type(stored)


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_each_hostile_value_becomes_exactly_what_the_corpus_says(corpus: Outcome, case: Case) -> None:
    offset = corpus.offsets[case.name]
    if case.row is not None:
        assert offset not in corpus.dead, corpus.dead.get(offset)
        row = corpus.rows[offset]
        for column in COLUMNS:
            expected = case.row.get(column)
            assert _same(expected, row[column]), (column, expected, row[column])
        return
    assert offset not in corpus.rows, corpus.rows.get(offset)
    value, error = corpus.dead[offset]
    assert value == case.value  # the raw bytes, exactly as produced
    assert case.error is not None and case.error in error, error
    assert "\x00" not in error
