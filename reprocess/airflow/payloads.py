"""What a run's tasks hand each other, typed: the planning task's :class:`PlannedRun` is the one
XCom value the Spark, commit, mirror and report tasks read, in Python and in Jinja templates
(:meth:`PlannedRun.template` refuses a field it does not have)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Final

from reprocess.core.runs import RunMode

PLAN_TASK: Final = "plan_offsets"


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """A planned run as its later tasks need it."""

    run_id: str
    ranges: list[dict[str, Any]]  # core.ranges.ranges_to_rows
    lost: list[dict[str, Any]]  # store.lost_dict
    dry_run: bool
    empty: bool
    batch_size: int
    warnings: list[str]
    mode: RunMode
    stages: str  # core.stages.describe, for the log and the UI
    heals_window: str | None = None  # core.runs.window_text

    def to_xcom(self) -> dict[str, Any]:
        return {**asdict(self), "mode": self.mode.value}

    @classmethod
    def from_xcom(cls, value: Mapping[str, Any]) -> PlannedRun:
        return cls(**{**value, "mode": RunMode(value["mode"])})

    @classmethod
    def template(cls, name: str) -> str:
        """A Jinja expression of one field, pulled from the planning task's XCom.

        >>> PlannedRun.template("run_id")
        "ti.xcom_pull(task_ids='plan_offsets')['run_id']"
        """
        if name not in {f.name for f in fields(cls)}:
            raise KeyError(f"PlannedRun has no field {name!r}")
        return f"ti.xcom_pull(task_ids='{PLAN_TASK}')[{name!r}]"
