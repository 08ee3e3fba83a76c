"""Run requests and run bookkeeping types: the parsed form of a trigger and its plan."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Final

from reprocess.core.errors import SpecError
from reprocess.core.ranges import OffsetRange, TopicPartition, parse_offsets_json

# The backfill param (and heal conf key) naming the reconciliation window a backfill heals.
HEALS_WINDOW: Final = "heals_window"
PLAN_ID: Final = "plan_id"  # the form param that applies a stored plan (reprocess.runner.preview)
# A reconciliation verdict: the window reaches a last stable offset an open transaction holds, so
# records of it may still become visible; neither ok nor a gap a backfill could close.
NOT_STABLE: Final = "not yet stable"
# The reconcile DAG's conf of a check the healing backfill asks for: the window, and the run that healed it.
RECHECK_WINDOW: Final = "window"
HEALED_BY: Final = "healed_by"


class RunKind(enum.StrEnum):
    BACKFILL = "backfill"
    INCREMENTAL = "incremental"


class RunMode(enum.StrEnum):
    """Where a run writes: ``merge`` upserts into the live table; ``rebuild`` writes a shadow table
    from the log start, verified and swapped in (postgres/swap.py)."""

    MERGE = "merge"
    REBUILD = "rebuild"


class RunState(enum.StrEnum):
    PLANNED = "planned"
    DRY_RUN = "dry_run"
    STAGED = "staged"
    COMMITTED = "committed"
    FAILED = "failed"


class StartMode(enum.StrEnum):
    EARLIEST = "earliest"
    OFFSETS = "offsets"
    TIMESTAMP = "timestamp"
    GROUP = "group"
    LEDGER = "ledger"


class EndMode(enum.StrEnum):
    LATEST = "latest"
    OFFSETS = "offsets"
    TIMESTAMP = "timestamp"
    GROUP = "group"


# A backfill's choices when its form (or `reprocess plan`) leaves them as they are: the whole
# retained log, merged into the live table.
DEFAULT_START: Final = StartMode.EARLIEST
DEFAULT_END: Final = EndMode.LATEST
DEFAULT_MODE: Final = RunMode.MERGE


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What the user asked for, before it is resolved against a Kafka snapshot."""

    kind: RunKind
    start_mode: StartMode
    end_mode: EndMode
    start_value: str | None = None
    end_value: str | None = None
    topics: tuple[str, ...] = ()  # empty: every topic of the spec
    partitions: tuple[int, ...] = ()  # empty: every partition
    allow_data_loss: bool = False
    batch_size: int | None = None
    dry_run: bool = False
    preview: bool = False  # a plan: read and diff against the target, write nothing (reprocess plan)
    acknowledge_partition_change: bool = False  # see Ordering.check_partition_counts
    mode: RunMode = DEFAULT_MODE
    # The reconciliation window [start, end) this backfill heals: checked again once it commits.
    heals_window: tuple[datetime, datetime] | None = None

    @classmethod
    def incremental(cls) -> RunRequest:
        return cls(RunKind.INCREMENTAL, StartMode.LEDGER, EndMode.LATEST)

    @classmethod
    def from_params(cls, params: Mapping[str, Any], kind: RunKind = RunKind.BACKFILL) -> RunRequest:
        """Parse trigger-form params; every problem is a :class:`SpecError` naming the param."""

        def choice(name: str, enum_type: type[enum.StrEnum], default: str) -> Any:
            value = params.get(name) or default
            try:
                return enum_type(value)
            except ValueError:
                allowed = ", ".join(e.value for e in enum_type)
                raise SpecError(f"param {name}: {value!r} is not one of {allowed}") from None

        def optional_str(name: str) -> str | None:
            value = params.get(name)
            return None if value in (None, "") else str(value)

        request = cls(
            kind=kind,
            start_mode=choice("start_mode", StartMode, DEFAULT_START),
            end_mode=choice("end_mode", EndMode, DEFAULT_END),
            start_value=optional_str("start_value"),
            end_value=optional_str("end_value"),
            topics=tuple(params.get("topics") or ()),
            partitions=_partitions(params.get("partitions")),
            allow_data_loss=bool(params.get("allow_data_loss", False)),
            batch_size=_batch_size(params.get("batch_size")),
            dry_run=bool(params.get("dry_run", False)),
            preview=bool(params.get("preview", False)),
            acknowledge_partition_change=bool(params.get("acknowledge_partition_change", False)),
            mode=choice("mode", RunMode, DEFAULT_MODE),
            heals_window=parse_window(heals, HEALS_WINDOW) if (heals := optional_str(HEALS_WINDOW)) else None,
        )
        request.validate()
        if params.get(PLAN_ID) and (request.preview or request.dry_run or request.mode is not RunMode.MERGE):
            chosen = [
                name
                for name, on in (
                    ("preview", request.preview),
                    ("dry_run", request.dry_run),
                    (f"mode={request.mode.value}", request.mode is not RunMode.MERGE),
                )
                if on
            ]
            raise SpecError(
                f"param plan_id applies a stored plan exactly as it was diffed (a merge, written); it does not "
                f"combine with {', '.join(chosen)}: clear plan_id to {'plan' if request.preview else 'run'} "
                "the range, or clear the other choices to apply the plan"
            )  # fmt: skip
        return request

    def validate(self) -> None:
        for mode, value, name in (
            (self.start_mode, self.start_value, "start"),
            (self.end_mode, self.end_value, "end"),
        ):
            if mode in ("offsets", "timestamp") and not value:
                raise SpecError(f"param {name}_value is required when {name}_mode is {mode.value}")
            if mode == "offsets":
                parse_offsets_json(value or "", f"{name}_value")
            if mode == "timestamp":
                parse_timestamp(value or "", f"{name}_value")
        if self.batch_size is not None and self.batch_size <= 0:
            raise SpecError(f"param batch_size must be positive, got {self.batch_size}")
        if self.preview and self.mode is RunMode.REBUILD:
            raise SpecError("param preview: a plan diffs a merge against the live table; set mode=merge")

    def check_rebuild(self, topics: tuple[str, ...]) -> None:
        """A rebuild reads every partition of every topic from the log start to the log end."""
        whole = self.start_mode is StartMode.EARLIEST and self.end_mode is EndMode.LATEST and not self.partitions
        if self.mode is RunMode.REBUILD and not (whole and set(self.topics) in (set(), set(topics))):
            raise SpecError(
                "mode=rebuild writes a complete new table, so it reads every partition of every topic from "
                "start_mode=earliest to end_mode=latest; clear the topics/partitions/range choices"
            )

    def as_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


def _partitions(raw: object) -> tuple[int, ...]:
    if not raw:
        return ()

    def number(p: object) -> bool:
        return (isinstance(p, int) and not isinstance(p, bool) and p >= 0) or (isinstance(p, str) and p.isdigit())

    if not isinstance(raw, list | tuple) or not all(number(p) for p in raw):
        raise SpecError(f"param partitions: {raw!r} must be a list of partition numbers")
    return tuple(int(p) for p in raw)


def _batch_size(raw: object) -> int | None:
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        raise SpecError(f"param batch_size must be a positive integer, got {raw!r}")
    return raw


def parse_timestamp(value: str, what: str) -> datetime:
    """An RFC 3339 timestamp with a zone; naive times are refused (whose midnight?)."""
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SpecError(f"{what}: {value!r} is not an RFC 3339 timestamp like 2026-11-01T00:00:00Z") from None
    if ts.tzinfo is None:
        raise SpecError(f"{what}: {value!r} has no time zone; add Z or +00:00")
    return ts


def window_text(start: datetime, end: datetime) -> str:
    """A reconciliation window as one conf value: ``<start>/<end>`` (an ISO 8601 interval).

    Examples
    --------
    >>> from datetime import UTC
    >>> window_text(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC))
    '2026-11-01T00:00:00+00:00/2026-11-02T00:00:00+00:00'
    """
    return f"{start.isoformat()}/{end.isoformat()}"


def parse_window(value: str, what: str) -> tuple[datetime, datetime]:
    """The ``[start, end)`` that :func:`window_text` wrote; both with a zone, start before end.

    Examples
    --------
    >>> [t.day for t in parse_window("2026-11-01T00:00:00Z/2026-11-02T00:00:00Z", "heals_window")]
    [1, 2]
    """
    start, sep, end = value.partition("/")
    if not sep:
        raise SpecError(f"{what}: {value!r} is not a window like 2026-11-01T00:00:00Z/2026-11-02T00:00:00Z")
    window = parse_timestamp(start, what), parse_timestamp(end, what)
    if window[0] >= window[1]:
        raise SpecError(f"{what}: {value!r} ends before it starts")
    return window


@dataclass(frozen=True, slots=True)
class LostRange:
    """Offsets below the log start that a run allowed to be lost; recorded, never hidden."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class RunRanges:
    """A run's snapshotted ranges (``operations.snapshot.snapshot_run``): what it reads, per
    partition, and what it accepted as lost; the stages that carry it out are built from it
    (:mod:`reprocess.core.stages`). Not a "plan": that word is the preview's (``reprocess plan``)."""

    run_id: str
    pipeline: str
    kind: RunKind
    ranges: tuple[OffsetRange, ...]
    lost: tuple[LostRange, ...] = ()
    warnings: tuple[str, ...] = ()
    estimates: Mapping[TopicPartition, int] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return all(r.width == 0 for r in self.ranges)
