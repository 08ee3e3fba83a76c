"""Properties of a run's pure planning maths over generated inputs (Hypothesis, no services): how
ranges are cut into batches, which stages a plan becomes and which task runs each, and the gaps a
window's committed ranges leave. The oracles are sets of offsets, written out here."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from reprocess.core.names import child_run_id
from reprocess.core.ranges import (
    OffsetRange,
    offsets_json,
    parse_offsets_json,
    uncovered,
)
from reprocess.core.runs import RunKind, RunMode, RunRanges
from reprocess.core.stages import (
    CutBatches,
    FinishBatches,
    Merge,
    Migrate,
    PrepareShadow,
    Read,
    Swap,
    Verify,
    WriteTarget,
    build_stages,
    for_task,
    split_batches,
)
from reprocess.core.tasks import Task
from reprocess.formats.specs import parse_spec

EXAMPLES = settings(max_examples=200, deadline=None)
SPEC = parse_spec({"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text"}})


@st.composite
def plans(draw: st.DrawFn) -> tuple[OffsetRange, ...]:
    """One range per partition of one or two topics, some of them empty."""
    ranges = []
    for topic in draw(st.sampled_from([("t",), ("t", "u")])):
        for partition in range(draw(st.integers(1, 4))):
            start = draw(st.integers(0, 50))
            ranges.append(OffsetRange(topic, partition, start, start + draw(st.integers(0, 30))))
    return tuple(ranges)


def _offsets(ranges: object) -> list[tuple[str, int, int]]:
    return [(r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end)]  # type: ignore[attr-defined]


@EXAMPLES
@given(plans(), st.integers(1, 40))
def test_batches_hold_every_offset_once_in_order_and_none_wider_than_the_size(ranges, size):
    batches = split_batches(ranges, size)
    read = [o for batch in batches for o in _offsets(batch)]
    assert sorted(read) == sorted(_offsets(ranges)) and len(read) == len(set(read))
    for batch in batches:
        assert batch and all(0 < r.width <= size for r in batch)
        assert len({r.tp for r in batch}) == len(batch)  # one range per partition in a batch
    for tp in {r.tp for r in ranges}:  # a partition's batches follow each other, offset after offset
        mine = [r for batch in batches for r in batch if r.tp == tp]
        assert all(a.end == b.start for a, b in pairwise(mine))


@EXAMPLES
@given(plans(), st.integers(1, 40), st.sampled_from([RunMode.MERGE, RunMode.REBUILD]), st.data())
def test_the_stages_read_exactly_what_is_left_and_the_three_tasks_split_them_without_loss(ranges, size, mode, data):
    plan = RunRanges("r", "p", RunKind.BACKFILL, ranges)
    batches = split_batches(ranges, size)
    done = data.draw(st.sets(st.sampled_from([child_run_id("r", k) for k in range(len(batches))] or ["-"])))
    stages = build_stages(plan, SPEC, mode, size, committed=done)

    # The three tasks (planning, Spark, commit) run every stage once, in the list's order.
    split = for_task(stages, Task.PLAN) + for_task(stages, Task.SPARK) + for_task(stages, Task.COMMIT)
    assert split == stages
    rebuild = mode is RunMode.REBUILD
    into = WriteTarget.shadow(SPEC) if rebuild else WriteTarget.live(SPEC)
    # A run starts with its migration (a rebuild: its shadow) and ends with its own commit (a rebuild:
    # Verify then Swap; a batched run: FinishBatches), which the planning task runs when nothing is read.
    assert stages[0] == (PrepareShadow("r") if rebuild else Migrate("r"))
    task = Task.PLAN if plan.is_empty else Task.COMMIT
    if rebuild:
        assert stages[-2:] == (Verify("r", task=task), Swap("r", plan.is_empty, task=task))
    elif plan.is_empty or len(batches) == 1:
        assert stages[-1] == Merge("r", into, False, plan.ranges, plan.is_empty, task=task)
    else:
        assert stages[-1] == FinishBatches("r")
    reads = [s for s in stages if isinstance(s, Read)]
    if plan.is_empty:
        assert reads == []
        return
    if mode is RunMode.MERGE and len(batches) == 1:  # fits: one read of the plan, no batches
        assert reads == [Read("r", ranges)]
        return
    # Every batch not yet committed is read once and committed right after its read.
    left_ids = [child_run_id("r", k) for k in range(len(batches)) if child_run_id("r", k) not in done]
    assert [r.stage_id for r in reads] == left_ids
    assert [s for s in stages if isinstance(s, CutBatches)] == [CutBatches("r", tuple(batches))]
    for i, stage in enumerate(stages):
        if isinstance(stage, Read):
            assert stages[i + 1] == Merge(stage.stage_id, into, False, () if rebuild else stage.ranges)
    read = sorted(o for r in reads for o in _offsets(r.ranges))
    left = sorted(o for k, b in enumerate(batches) if child_run_id("r", k) not in done for o in _offsets(b))
    assert read == left


@EXAMPLES
@given(st.integers(0, 60), st.integers(0, 60), st.lists(st.tuples(st.integers(0, 70), st.integers(0, 30)), max_size=6))
def test_uncovered_is_the_window_minus_the_committed_ranges_in_ascending_runs(start, width, spans):
    end = start + width
    committed = [(a, a + w) for a, w in spans]
    gaps = uncovered(start, end, committed)
    held = {o for a, b in committed for o in range(a, b)}
    assert [o for a, b in gaps for o in range(a, b)] == [o for o in range(start, end) if o not in held]
    assert all(a < b for a, b in gaps) and all(b < c for (_, b), (c, _) in pairwise(gaps))


@EXAMPLES
@given(plans())
def test_offset_json_round_trips_for_both_ends(ranges):
    for field in ("start", "end"):
        assert parse_offsets_json(offsets_json(ranges, field), field) == {r.tp: getattr(r, field) for r in ranges}
