"""A window check's stages as the evaluator runs them (``reprocess.runner.evaluate``): the snapshot asks
the broker for the window's ranges, the read has the Spark side stage the window, the verdicts run
reconciliation's checks (``reprocess.checks``) in Postgres. What each stage found is kept in the
:class:`WindowCheck` the caller passes, for the stages after it and for the caller (an Airflow task
hands it to the next task in XCom)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Engine

from reprocess.checks.verdict import PartitionVerdict
from reprocess.core.errors import ReprocessError
from reprocess.core.spec import PipelineSpec
from reprocess.core.stages import describe
from reprocess.core.window_stages import ReadWindow, SnapshotWindow, Verdicts
from reprocess.operations.reconcile import WindowRanges, record_verdicts, snapshot_window


class WindowReader(Protocol):
    """What stages a :class:`ReadWindow`: the Spark side (``reprocess.spark.job.WindowStager``)."""

    def read_window(self, spec: PipelineSpec, stage: ReadWindow) -> int:
        """Stage the window's newest record per key and its invalid records; returns the stage's rows."""
        ...


@dataclass(slots=True)
class WindowCheck:
    """What a window check's stages need beyond a run's context, and what they found."""

    kafka: Mapping[str, Any] | None = None  # the snapshot's broker (librdkafka config)
    reader: WindowReader | None = None  # the read's Spark side
    ranges: WindowRanges | None = None  # the snapshot's ranges
    staged: int | None = None  # the read's stage rows
    verdicts: list[PartitionVerdict] | None = None


def evaluate_window(
    engine: Engine, spec: PipelineSpec, check: WindowCheck | None, stage: SnapshotWindow | ReadWindow | Verdicts
) -> None:
    """Evaluate one stage of a window check into ``check`` (see the module).

    Raises
    ------
    ReconciliationGap, WindowNotStable
        From :class:`Verdicts`, after the verdicts are stored (:func:`~reprocess.operations.reconcile.record_verdicts`).
    """
    if check is None:
        raise ReprocessError(f"{spec.name}: {describe([stage])} needs a window check's context", pipeline=spec.name)
    if isinstance(stage, SnapshotWindow):
        if check.kafka is None:
            raise ReprocessError(f"{spec.name}: {describe([stage])} needs the Kafka connection", pipeline=spec.name)
        check.ranges = snapshot_window(engine, check.kafka, spec, stage.window_start, stage.window_end)
    elif isinstance(stage, ReadWindow):
        if check.reader is None:
            raise ReprocessError(
                f"{spec.name}: {describe([stage])} needs a Spark session; run it from the Spark task",
                pipeline=spec.name,
            )
        check.staged = check.reader.read_window(spec, stage)
    else:
        check.verdicts = record_verdicts(
            engine, spec, stage.ranges, stage.window_start, stage.window_end, stage.check_id,
            healed_by=stage.healed_by, unstable=stage.unstable, unread=stage.unread,
        )  # fmt: skip
