"""A run as explicit stages: what happens after its ranges are snapshotted, in order, as values.

A run's snapshot (``operations.snapshot.snapshot_run``: offsets snapshotted, ranges resolved and
stored) fixes its ranges; :func:`build_stages` turns them into the ordered stages that carry them
out, with no side effects, so a run's whole course can be shown and tested without services. It
is the ONLY reader of a run's mode, preview and dry run: each stage carries what they decide (a
:class:`Merge` knows its :class:`WriteTarget`), so nothing downstream asks PostgreSQL what kind
of run it is serving. One evaluator (``reprocess.runner.evaluate``) runs them, whatever launches
it: an Airflow task, the Spark driver of spark-submit, the benchmarks or the tests. Each stage
names the Airflow :class:`Task` that runs it (:func:`for_task`).

- a merge that fits: ``Migrate → Read(run) → Merge(run→live)``;
- a merge wider than ``batch_size`` on some partition: ``Migrate → CutBatches → Read(#0) →
  Merge(#0→live) → … → FinishBatches(run)``; each batch commits on its own in the Spark task, so
  a failure resumes after the last committed one, and the evaluator commits batch k while batch
  k+1 reads;
- a rebuild: ``PrepareShadow → CutBatches → Read(#0) → Merge(#0→shadow) → … → Verify(run) →
  Swap(run)``; its batches commit into the shadow table, and the swap is what makes it visible;
- an empty range: ``Migrate → Merge(run→live)`` in the planning task (a rebuild: ``PrepareShadow →
  Verify → Swap``);
- a dry run: nothing (it migrates nothing either);
- a preview (what a replay would change, ``reprocess plan``): ``Read(run) → Diff(run)``, one read
  of the whole range, whose stage the diff compares with the live target and drops;
- a window check (reconciliation): ``SnapshotWindow → ReadWindow → Verdicts`` (``reprocess.core.window_stages``),
  one task of the reconcile DAG each; it writes verdicts, never a target.

Every write to a target happens in a :class:`Merge`, :class:`Migrate`, :class:`PrepareShadow` or
:class:`Swap`; the Spark side only reads, decodes and stages (:class:`Read`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from reprocess.core.names import child_run_id, rebuild_owner, shadow_table
from reprocess.core.ranges import OffsetRange
from reprocess.core.runs import RunKind, RunMode, RunRanges
from reprocess.core.tasks import Task
from reprocess.core.window_stages import ReadWindow, SnapshotWindow, Verdicts

if TYPE_CHECKING:
    from reprocess.core.spec import PipelineSpec


@dataclass(frozen=True, slots=True)
class WriteTarget:
    """Where a :class:`Merge` writes, decided once by the builder: the live table, or a rebuild's
    shadow. The live target moves the ledger (and the committed ranges), resolves dead letters and
    is the table plans compare with; the shadow does none of that until its :class:`Swap`, keeps its
    dead letters apart and records the newest staged record per key, which :class:`Verify` checks."""

    table: str  # in the spec's target schema
    markers: str  # in reprocess_deleted (tombstones: delete)
    dead_letters_owner: str  # the ``pipeline`` value of the dead letters it writes
    keeps_keys: bool  # records the newest staged record per key (postgres.rebuild_keys)
    moves_ledger: bool

    @classmethod
    def live(cls, spec: PipelineSpec) -> WriteTarget:
        return cls(spec.target_table, spec.markers_table or spec.name, spec.name, False, True)

    @classmethod
    def shadow(cls, spec: PipelineSpec) -> WriteTarget:
        """``<table>__rebuild``, ``reprocess_deleted.<pipeline>__rebuild`` and ``<pipeline>/rebuild``."""
        return cls(shadow_table(spec.target_table), shadow_table(spec.name), rebuild_owner(spec.name), True, False)

    @property
    def name(self) -> str:
        return "live" if self.moves_ledger else "shadow"

    def spec(self, spec: PipelineSpec) -> PipelineSpec:
        """``spec`` writing here (the live target is the spec itself)."""
        return spec if self.moves_ledger else replace(spec, target_table=self.table, markers_table=self.markers)


@dataclass(frozen=True, slots=True)
class Migrate:
    """Create or evolve the live target to the spec (a merge's; a rebuild's table is its shadow)."""

    run_id: str
    task: Task = field(default=Task.PLAN, kw_only=True)


@dataclass(frozen=True, slots=True)
class PrepareShadow:
    """Start a rebuild's shadow state empty: table, deletion markers, dead letters, kept keys."""

    run_id: str
    task: Task = field(default=Task.PLAN, kw_only=True)


@dataclass(frozen=True, slots=True)
class CutBatches:
    """Record the run's batches as child runs, once (a resumed run keeps its cut)."""

    run_id: str
    batches: tuple[tuple[OffsetRange, ...], ...]
    task: Task = field(default=Task.SPARK, kw_only=True)


@dataclass(frozen=True, slots=True)
class Read:
    """Read ``ranges`` from Kafka, decode, keep the newest row per key, COPY into the stage of
    ``stage_id`` (the run, or one of its batches) and record it staged. Writes no target."""

    stage_id: str
    ranges: tuple[OffsetRange, ...]
    batch: int | None = None  # k of a batched run
    batches: int | None = None  # n
    task: Task = field(default=Task.SPARK, kw_only=True)

    @property
    def run_id(self) -> str:
        return self.stage_id

    @property
    def offsets(self) -> int:
        return sum(r.width for r in self.ranges)


@dataclass(frozen=True, slots=True)
class Merge:
    """The commit protocol (postgres.commit) of ``run_id`` (a run, or one batch of it) into ``into``:
    its stage merged, its dead letters written and, into the live target, the ledger moved, in one
    transaction. ``fenced``: an incremental's compare-and-set on the ledger; ``rederives``: the ranges
    whose rows of another spec version it re-derives or deletes (a backfill into the live target);
    ``empty``: nothing was read (no stage), recorded staged here."""

    run_id: str
    into: WriteTarget
    fenced: bool = False
    rederives: tuple[OffsetRange, ...] = ()
    empty: bool = False
    task: Task = field(default=Task.SPARK, kw_only=True)


@dataclass(frozen=True, slots=True)
class FinishBatches:
    """A batched run's own commit: check every batch committed and covers its ranges, and sum them."""

    run_id: str
    task: Task = field(default=Task.COMMIT, kw_only=True)


@dataclass(frozen=True, slots=True)
class Verify:
    """Check a rebuild's shadow against the newest record per key its batches staged (a swapped run: nothing)."""

    run_id: str
    task: Task = field(default=Task.COMMIT, kw_only=True)


@dataclass(frozen=True, slots=True)
class Swap:
    """A rebuild's commit: its shadow swapped in with the ledger, in one transaction (postgres.swap);
    ``empty``: nothing was read, recorded staged here."""

    run_id: str
    empty: bool = False
    task: Task = field(default=Task.COMMIT, kw_only=True)


@dataclass(frozen=True, slots=True)
class Diff:
    """A preview's last stage instead of a commit: the commit's own statements over the stage, in a
    transaction rolled back, counting what they would change (reprocess.operations.preview)."""

    run_id: str
    empty: bool = False
    rederives: tuple[OffsetRange, ...] = ()
    task: Task = field(default=Task.COMMIT, kw_only=True)


Stage = (
    Migrate | PrepareShadow | CutBatches | Read | Merge | FinishBatches | Verify | Swap | Diff
    | SnapshotWindow | ReadWindow | Verdicts
)  # fmt: skip


def build_stages(
    run: RunRanges,
    spec: PipelineSpec,
    mode: RunMode,
    batch_size: int,
    *,
    dry_run: bool = False,
    preview: bool = False,
    cut: Sequence[Sequence[OffsetRange]] = (),
    committed: Collection[str] = (),
) -> tuple[Stage, ...]:
    """The stages that carry out run ``run``'s ranges (see the module). ``cut`` is the batches an earlier
    attempt recorded (they stand, whatever ``batch_size`` says now) and ``committed`` the batch
    runs already committed, whose stages are left out: the list is what remains to be done.

    Examples
    --------
    >>> from reprocess.formats.specs import parse_spec
    >>> spec = parse_spec({"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text"}})
    >>> wide = RunRanges("r", "p", RunKind.BACKFILL, (OffsetRange("t", 0, 0, 5),))
    >>> empty = RunRanges("r", "p", RunKind.INCREMENTAL, (OffsetRange("t", 0, 5, 5),))
    >>> def show(p, mode=RunMode.MERGE, size=10, **kw):
    ...     print(describe(build_stages(p, spec, mode, size, **kw)).replace(" | ", "\\n") or "(none)")
    >>> show(wide)  # a merge
    plan_offsets: Migrate(r)
    spark_read_stage: Read(r)
    commit_transaction: Merge(r→live)
    >>> show(wide, size=3)  # batched: each batch commits in the Spark task
    plan_offsets: Migrate(r)
    spark_read_stage: CutBatches(r, 2) → Read(r#0) → Merge(r#0→live) → Read(r#1) → Merge(r#1→live)
    commit_transaction: FinishBatches(r)
    >>> show(wide, size=3, cut=split_batches(wide.ranges, 3), committed={"r#0"})  # resumed after batch 0
    plan_offsets: Migrate(r)
    spark_read_stage: CutBatches(r, 2) → Read(r#1) → Merge(r#1→live)
    commit_transaction: FinishBatches(r)
    >>> show(wide, RunMode.REBUILD)
    plan_offsets: PrepareShadow(r)
    spark_read_stage: CutBatches(r, 1) → Read(r#0) → Merge(r#0→shadow)
    commit_transaction: Verify(r) → Swap(r)
    >>> show(empty)  # an empty range commits in the planning task
    plan_offsets: Migrate(r) → Merge(r→live)
    >>> show(empty, RunMode.REBUILD)
    plan_offsets: PrepareShadow(r) → Verify(r) → Swap(r)
    >>> show(wide, dry_run=True)  # a dry run: nothing, not even a migration
    (none)
    >>> show(wide, preview=True)
    spark_read_stage: Read(r)
    commit_transaction: Diff(r)
    >>> show(empty, preview=True)
    plan_offsets: Diff(r)
    """
    if dry_run:
        return ()
    rid = run.run_id
    rederives = run.ranges if run.kind is RunKind.BACKFILL else ()
    if preview:  # one read: the diff is of the range's net effect, whatever batches an apply cuts
        if run.is_empty:
            return (Diff(rid, True, rederives, task=Task.PLAN),)
        return Read(rid, run.ranges), Diff(rid, rederives=rederives)
    rebuild = mode is RunMode.REBUILD
    into = WriteTarget.shadow(spec) if rebuild else WriteTarget.live(spec)
    fenced = run.kind is RunKind.INCREMENTAL and not rebuild
    start: list[Stage] = [PrepareShadow(rid) if rebuild else Migrate(rid)]
    if run.is_empty:  # nothing to read: the run commits (a rebuild: swaps) in the planning task
        if rebuild:
            return (*start, Verify(rid, task=Task.PLAN), Swap(rid, True, task=Task.PLAN))
        return (*start, Merge(rid, into, fenced, rederives, True, task=Task.PLAN))
    finish: tuple[Stage, ...] = (Verify(rid), Swap(rid)) if rebuild else (FinishBatches(rid),)
    # A rebuild always runs in batches: they fill its shadow table, and its own commit is the swap.
    batches = [tuple(b) for b in cut] or split_batches(run.ranges, batch_size)
    if not rebuild and not cut and len(batches) == 1:
        return (*start, Read(rid, run.ranges), Merge(rid, into, fenced, rederives, task=Task.COMMIT))
    stages = [*start, CutBatches(rid, tuple(batches))]
    for k, ranges in enumerate(batches):
        child = child_run_id(rid, k)
        if child not in committed:
            batch_rederives = ranges if rederives and not rebuild else ()
            stages += [Read(child, ranges, k, len(batches)), Merge(child, into, fenced, batch_rederives)]
    return (*stages, *finish)


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


def for_task(stages: Sequence[Stage], task: Task) -> tuple[Stage, ...]:
    """The stages ``task`` runs, in order."""
    return tuple(s for s in stages if s.task is task)


def describe(stages: Sequence[Stage]) -> str:
    """The stages in one line, grouped by the task that runs them, for logs and the run's report."""
    groups: list[tuple[Task, list[str]]] = []
    for s in stages:
        if groups and groups[-1][0] is s.task:
            groups[-1][1].append(_name(s))
        else:
            groups.append((s.task, [_name(s)]))
    return " | ".join(f"{task.value}: {' → '.join(parts)}" for task, parts in groups)


def task_doc(spec: PipelineSpec, task: Task) -> str:
    """Markdown for a run DAG task's doc: per kind of run, the stages ``task`` runs, as the builder
    builds them for a run ``r`` of two offsets (a batch size of one: two batches)."""
    wide = RunRanges("r", spec.name, RunKind.BACKFILL, (OffsetRange("t", 0, 0, 2),))
    empty = RunRanges("r", spec.name, RunKind.INCREMENTAL, (OffsetRange("t", 0, 2, 2),))
    courses = {
        "merge": build_stages(wide, spec, RunMode.MERGE, 2),
        "merge wider than its batch size": build_stages(wide, spec, RunMode.MERGE, 1),
        "rebuild": build_stages(wide, spec, RunMode.REBUILD, 1),
        "empty range": build_stages(empty, spec, RunMode.MERGE, 1),
        "empty range, rebuild": build_stages(empty, spec, RunMode.REBUILD, 1),
        "preview": build_stages(wide, spec, RunMode.MERGE, 1, preview=True),
        "preview of an empty range": build_stages(empty, spec, RunMode.MERGE, 1, preview=True),
        "dry run": build_stages(wide, spec, RunMode.MERGE, 1, dry_run=True),
    }
    lines = [f"- {course}: {' → '.join(map(_name, for_task(s, task))) or 'nothing'}" for course, s in courses.items()]
    return "**Stages** this task runs (`reprocess.core.stages`), per kind of run:\n\n" + "\n".join(lines)


def _name(stage: Stage) -> str:
    if isinstance(stage, CutBatches):
        return f"CutBatches({stage.run_id}, {len(stage.batches)})"
    if isinstance(stage, Merge):
        return f"Merge({stage.run_id}→{stage.into.name})"
    return f"{type(stage).__name__}({stage.run_id})"
