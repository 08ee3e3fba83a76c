"""What a DAG's tasks hand each other, typed. Each payload is the XCom value of one task: the
later tasks read it back with ``from_xcom`` in Python, and Jinja templates name its fields through
``template``, which refuses a field the payload does not have. Values cross XCom as JSON: an enum
by its value, a datetime as ISO 8601 text, each converted in exactly one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from enum import Enum
from typing import Any, ClassVar, Self

from reprocess.core.ranges import offsets_json, window_ranges
from reprocess.core.runs import RunMode
from reprocess.core.tasks import Task
from reprocess.core.window_stages import ReadWindow, SnapshotWindow, Verdicts, window_stages


class Payload:
    """A dataclass a task returns as its XCom value (``TASK`` is that task's id)."""

    TASK: ClassVar[str]

    def to_xcom(self) -> dict[str, Any]:
        return {f.name: _to_json(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_xcom(cls, value: Mapping[str, Any]) -> Self:
        return cls(**{name: _from_json(v, cls._KINDS.get(name)) for name, v in value.items()})

    _KINDS: ClassVar[Mapping[str, type]] = {}  # the fields whose JSON form is not their value

    @classmethod
    def template(cls, name: str) -> str:
        """A Jinja expression of one field, pulled from the task's XCom.

        >>> PlannedRun.template("run_id")
        "ti.xcom_pull(task_ids='plan_offsets')['run_id']"
        """
        if name not in {f.name for f in fields(cls)}:  # type: ignore[arg-type]
            raise KeyError(f"{cls.__name__} has no field {name!r}")
        return f"ti.xcom_pull(task_ids='{cls.TASK}')[{name!r}]"


def _to_json(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _from_json(value: Any, kind: type | None) -> Any:
    if kind is None or value is None:
        return value
    if kind is datetime:
        return datetime.fromisoformat(value)
    return kind(value)


@dataclass(frozen=True, slots=True)
class PlannedRun(Payload):
    """A planned run (the backfill and incremental DAGs' ``plan_offsets``) as its later tasks need it."""

    TASK: ClassVar[str] = "plan_offsets"
    _KINDS: ClassVar[Mapping[str, type]] = {"mode": RunMode}

    run_id: str
    ranges: list[dict[str, Any]]  # core.ranges.ranges_to_rows
    lost: list[dict[str, Any]]  # store.lost_dict
    dry_run: bool
    empty: bool
    batch_size: int
    warnings: list[str]
    mode: RunMode
    stages: str  # core.stages.describe, for the log and the UI
    heals_window: str | None = None  # core.runs.window_text: a conf value as the reconcile DAG reads it


@dataclass(frozen=True, slots=True)
class PlannedWindow(Payload):
    """A reconciliation's window (the reconcile DAG's ``snapshot_window``) and this attempt's check."""

    TASK: ClassVar[str] = Task.PLAN_WINDOW.value
    _KINDS: ClassVar[Mapping[str, type]] = {"window_start": datetime, "window_end": datetime}

    check_id: str
    starting: str  # Spark's startingOffsets JSON of the window's ranges
    ending: str
    window_start: datetime
    window_end: datetime
    healed_by: str | None = None  # the backfill whose heal this check is
    # Spark offset JSONs of [LSO, HW) where the window reaches a last stable offset an open
    # transaction holds (reconcile.WindowRanges.unstable): those partitions are at best not yet stable
    unstable_start: str = "{}"
    unstable_end: str = "{}"
    # Spark offset JSONs of [ledger, window end) where the window reaches past the ledger
    # (reconcile.WindowRanges.unread): those partitions are at best not yet stable too
    unread_start: str = "{}"
    unread_end: str = "{}"

    @classmethod
    def of(cls, snapshot: SnapshotWindow, plan: Any) -> PlannedWindow:
        """The snapshot stage and the ranges it resolved (an ``operations.reconcile.WindowRanges``)."""
        return cls(
            check_id=snapshot.check_id, starting=offsets_json(plan.ranges, "start"),
            ending=offsets_json(plan.ranges, "end"), window_start=snapshot.window_start,
            window_end=snapshot.window_end, healed_by=snapshot.healed_by,
            unstable_start=offsets_json(plan.unstable, "start"), unstable_end=offsets_json(plan.unstable, "end"),
            unread_start=offsets_json(plan.unread, "start"), unread_end=offsets_json(plan.unread, "end"),
        )  # fmt: skip

    def stages(self) -> tuple[ReadWindow, Verdicts]:
        """The check's stages after its snapshot (core.window_stages.window_stages)."""
        snapshot = SnapshotWindow(self.check_id, self.window_start, self.window_end, self.healed_by)
        return window_stages(
            snapshot, window_ranges(self.starting, self.ending), window_ranges(self.unstable_start, self.unstable_end),
            window_ranges(self.unread_start, self.unread_end),
        )  # fmt: skip
