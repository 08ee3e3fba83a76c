"""A run as an explicit plan of stages: what happens after its snapshot, in order, as values.

A run's snapshot (``operations.plan.plan_run``: offsets snapshotted, ranges resolved and stored)
is its plan; :func:`build_stages` turns the plan into the ordered stages that carry it out, with no
side effects, so a run's whole course can be shown and tested without services. One evaluator
(``reprocess.runner.evaluate``) runs them, whatever launches it: an Airflow task, the Spark
driver of spark-submit, the benchmarks or the tests.

- a merge that fits: ``Read(run) → Commit(run)``;
- a merge wider than ``batch_size`` on some partition: ``CutBatches → Read(#0) → Commit(#0) → …
  → Commit(run)``; each batch commits on its own, so a failure resumes after the last committed
  one, and the evaluator commits batch k while batch k+1 reads;
- a rebuild: ``PrepareShadow → CutBatches → Read(#0) → Commit(#0) → … → Swap(run)``; its batches
  commit into the shadow table, and the swap (verify, then swap in with the ledger) is what makes
  it visible;
- an empty plan: ``Commit(run)`` (a rebuild: ``PrepareShadow → Swap(run)``);
- a dry run: nothing;
- a preview (a plan of what a replay would change, ``reprocess plan``): ``Read(run) → Diff(run)``,
  one read of the whole range, whose stage the diff compares with the live target and drops.

Every write to the target happens in a :class:`Commit` or a :class:`Swap`; the Spark side only
reads, decodes and stages (:class:`Read`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from reprocess.core.names import child_run_id
from reprocess.core.ranges import OffsetRange
from reprocess.core.runs import RunMode, RunPlan


@dataclass(frozen=True, slots=True)
class PrepareShadow:
    """Start a rebuild's shadow state empty: table, deletion markers, dead letters."""

    run_id: str


@dataclass(frozen=True, slots=True)
class CutBatches:
    """Record the run's batches as child runs, once (a resumed run keeps its cut)."""

    run_id: str
    batches: tuple[tuple[OffsetRange, ...], ...]


@dataclass(frozen=True, slots=True)
class Read:
    """Read ``ranges`` from Kafka, decode, keep the newest row per key, COPY into the stage of
    ``stage_id`` (the run, or one of its batches) and record it staged. Writes no target."""

    stage_id: str
    ranges: tuple[OffsetRange, ...]
    batch: int | None = None  # k of a batched run
    batches: int | None = None  # n

    @property
    def offsets(self) -> int:
        return sum(r.width for r in self.ranges)


@dataclass(frozen=True, slots=True)
class Commit:
    """The commit protocol (postgres.commit) for ``run_id``: a run, or one batch of it. A batched
    run's own commit checks and sums its batches; a run that reads nothing (``empty``) is
    recorded staged here, with nothing to stage."""

    run_id: str
    empty: bool = False


@dataclass(frozen=True, slots=True)
class Swap:
    """A rebuild's commit: verify the shadow against Kafka, then swap it in with the ledger."""

    run_id: str
    empty: bool = False


@dataclass(frozen=True, slots=True)
class Diff:
    """A preview's last stage instead of a commit: the commit's own statements over the stage, in a
    transaction rolled back, counting what they would change (reprocess.operations.preview)."""

    run_id: str
    empty: bool = False


Stage = PrepareShadow | CutBatches | Read | Commit | Swap | Diff


def build_stages(
    plan: RunPlan,
    mode: RunMode,
    batch_size: int,
    *,
    dry_run: bool = False,
    preview: bool = False,
    cut: Sequence[Sequence[OffsetRange]] = (),
    committed: Collection[str] = (),
) -> tuple[Stage, ...]:
    """The stages that carry out ``plan`` (see the module). ``cut`` is the batches an earlier
    attempt recorded (they stand, whatever ``batch_size`` says now) and ``committed`` the batch
    runs already committed, whose stages are left out: the list is what remains to be done.

    Examples
    --------
    >>> from reprocess.core.runs import RunKind
    >>> plan = RunPlan("r", "p", RunKind.BACKFILL, (OffsetRange("t", 0, 0, 5),))
    >>> describe(build_stages(plan, RunMode.MERGE, 10))
    'Read(r) → Commit(r)'
    >>> describe(build_stages(plan, RunMode.MERGE, 2, committed={"r#0"}))
    'CutBatches(r, 3) → Read(r#1) → Commit(r#1) → Read(r#2) → Commit(r#2) → Commit(r)'
    >>> describe(build_stages(plan, RunMode.REBUILD, 10))
    'PrepareShadow(r) → CutBatches(r, 1) → Read(r#0) → Commit(r#0) → Swap(r)'
    >>> empty = RunPlan("r", "p", RunKind.INCREMENTAL, (OffsetRange("t", 0, 5, 5),))
    >>> describe(build_stages(empty, RunMode.MERGE, 10)), describe(build_stages(plan, RunMode.MERGE, 10, dry_run=True))
    ('Commit(r)', '')
    >>> [describe(build_stages(p, RunMode.MERGE, 2, preview=True)) for p in (plan, empty)]
    ['Read(r) → Diff(r)', 'Diff(r)']
    """
    if dry_run:
        return ()
    if preview:  # one read: the diff is of the range's net effect, whatever batches an apply cuts
        return (Diff(plan.run_id, True),) if plan.is_empty else (Read(plan.run_id, plan.ranges), Diff(plan.run_id))
    rebuild = mode is RunMode.REBUILD
    stages: list[Stage] = [PrepareShadow(plan.run_id)] if rebuild else []
    empty = plan.is_empty
    finish = Swap(plan.run_id, empty) if rebuild else Commit(plan.run_id, empty)
    if empty:
        return (*stages, finish)
    # A rebuild always runs in batches: they fill its shadow table, and its own commit is the swap.
    batches = [tuple(b) for b in cut] or split_batches(plan.ranges, batch_size)
    if not rebuild and not cut and len(batches) == 1:
        return (Read(plan.run_id, plan.ranges), finish)
    stages.append(CutBatches(plan.run_id, tuple(batches)))
    for k, ranges in enumerate(batches):
        child = child_run_id(plan.run_id, k)
        if child not in committed:
            stages += [Read(child, ranges, k, len(batches)), Commit(child)]
    return (*stages, finish)


def split_batches(ranges: Sequence[OffsetRange], batch_size: int) -> list[tuple[OffsetRange, ...]]:
    """Batch k holds ``[start + k·size, start + (k+1)·size)`` of every partition still unfinished.

    Examples
    --------
    >>> [[(r.partition, r.start, r.end) for r in b] for b in split_batches([OffsetRange("t", 0, 0, 5),
    ...                                                                     OffsetRange("t", 1, 10, 12)], 2)]
    [[(0, 0, 2), (1, 10, 12)], [(0, 2, 4)], [(0, 4, 5)]]
    """
    batches: list[tuple[OffsetRange, ...]] = []
    k = 0
    while True:
        batch = tuple(
            OffsetRange(r.topic, r.partition, r.start + k * batch_size, min(r.start + (k + 1) * batch_size, r.end))
            for r in ranges
            if r.start + k * batch_size < r.end
        )
        if not batch:
            return batches
        batches.append(batch)
        k += 1


def launched_before_spark(stages: Sequence[Stage]) -> tuple[Stage, ...]:
    """The stages the planning task runs itself: all of them when none reads (an empty plan),
    else those before the first read (a rebuild's shadow)."""
    reads = [i for i, s in enumerate(stages) if isinstance(s, Read | CutBatches)]
    return tuple(stages[: reads[0]]) if reads else tuple(stages)


def launched_with_spark(stages: Sequence[Stage]) -> tuple[Stage, ...]:
    """The stages the Spark task runs: the reads and the batches' commits, up to the run's own
    commit or swap, which is the commit task's (:func:`launched_after_spark`)."""
    reads = [i for i, s in enumerate(stages) if isinstance(s, Read | CutBatches)]
    return tuple(stages[reads[0] : -1]) if reads else ()


def launched_after_spark(stages: Sequence[Stage]) -> tuple[Stage, ...]:
    """The run's own commit, swap or diff, when a Spark task ran before it."""
    return (stages[-1],) if launched_with_spark(stages) else ()


def describe(stages: Sequence[Stage]) -> str:
    """The stages in one line, for logs and the run's report."""
    parts = []
    for s in stages:
        if isinstance(s, CutBatches):
            parts.append(f"CutBatches({s.run_id}, {len(s.batches)})")
        else:
            parts.append(f"{type(s).__name__}({s.stage_id if isinstance(s, Read) else s.run_id})")
    return " → ".join(parts)
