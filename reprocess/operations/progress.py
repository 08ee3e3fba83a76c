"""The coverage page's view of live progress: a pipeline's runs whose Spark stage is going, and the
ones that ended lately, from ``reprocess.run_progress`` (written by the stage job)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from sqlalchemy import Connection, text

from reprocess.operations.views import View, column, from_row

# Runs still going, plus those that ended in the last 15 minutes (the page shows where they ended).
_PROGRESS: Final = text(
    "SELECT run_id, planned, records_read, exact, records_per_s, eta_seconds, done, started_at, updated_at, "
    "extract(epoch FROM now() - updated_at) AS quiet_s FROM reprocess.run_progress "
    "WHERE pipeline = :pipeline AND (NOT done OR updated_at > now() - interval '15 minutes') "
    "ORDER BY done, started_at DESC LIMIT 20"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunProgressRow(View):
    run_id: str
    planned: int
    records_read: int
    exact: bool
    records_per_s: float
    eta_seconds: float | None
    done: bool
    started_at: datetime
    updated_at: datetime
    # seconds since the last line: a run quiet for long has likely died
    quiet_s: float = field(metadata=column(read=float))


def run_progress(conn: Connection, pipeline: str) -> list[RunProgressRow]:
    return [from_row(RunProgressRow, r) for r in conn.execute(_PROGRESS, {"pipeline": pipeline})]
