"""What the commands print: aligned tables, a pipeline's status and its reconciliation calendar, the view
of a pipeline that never ran, a spec file that does not load."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Final

from reprocess.checks.registry import kind_counts
from reprocess.core.ranges import PartitionSnapshot
from reprocess.core.runs import NOT_STABLE
from reprocess.operations.coverage import CalendarCell, PipelineOverview

STATUS_COLUMNS: Final = ("TOPIC", "PARTITION", "LOG-START", "LEDGER", "LOG-END", "LAG", "LAST-RUN", "RECONCILED")


def table(header: tuple[str, ...], rows: Sequence[tuple[object, ...]]) -> str:
    """Left-aligned columns separated by two spaces; ``None`` prints as ``-``.

    >>> print(table(("A", "BB"), [(1, None), ("long", 2)]))
    A     BB
    1     -
    long  2
    """
    cells = [header, *(tuple("-" if v is None else str(v) for v in row) for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def pipeline_status_text(p: PipelineOverview, cells: Sequence[CalendarCell]) -> str:
    """One pipeline: its facts, a row per partition, then its reconciliation calendar."""
    last = p.last_committed_at.isoformat(timespec="seconds") if p.last_committed_at else "never"
    lines = [
        f"PIPELINE {p.name} (target {p.target_table}; last commit {last}; lag {p.lag}; "
        + (f"held by open transactions {p.unstable}; " if p.unstable else "")
        + f"dead letters 24h {p.dead_letters_day}; retention {p.risk})"
    ]
    if p.values_incomplete:
        lines.append(
            f"  {p.values_incomplete} incomplete values: left out by the connector and known nowhere, NULL in the "
            "target (reprocess.incomplete_values; fix: REPLICA IDENTITY FULL on the source table, a new snapshot)"
        )
    rows = [
        (x.topic, x.partition, x.log_start, x.ledger, x.log_end, x.lag, x.ledger_run,
         f"{x.verdict} {x.verdict_window.date()}" if x.verdict and x.verdict_window else None)
        for x in p.partitions
    ]  # fmt: skip
    lines.append(table(STATUS_COLUMNS, rows))
    lines += [f"  {held}" for x in p.partitions if (held := x.held_text())]
    if p.latest_run and p.latest_run != p.last_run:
        at = p.latest_at.isoformat(timespec="seconds") if p.latest_at else "?"
        cause = f": {p.latest_error}" if p.failed and p.latest_error else ""
        lines.append(f"  LATEST RUN {p.latest_run} ({at}) {p.latest_state}{cause}")
    lines.append(calendar_text(cells))
    return "\n".join(lines)


def calendar_text(cells: Sequence[CalendarCell]) -> str:
    """The calendar in a few lines: counts per verdict, then each gap and each healed window."""
    if not cells:
        return "RECONCILIATION: no window checked yet"
    counts = {v: sum(c.verdict == v for c in cells) for v in ("ok", "healed", "gap", NOT_STABLE)}
    by_kind = kind_counts([c.kinds for c in cells if c.verdict == "gap"])
    kinds = f" ({', '.join(f'{k} {n}' for k, n in by_kind.items())})" if by_kind else ""
    lines = [f"RECONCILIATION ({len({c.window_start for c in cells})} windows): "
             + ", ".join(f"{n} {v}{kinds if v == 'gap' else ''}" for v, n in counts.items())]  # fmt: skip
    for c in cells:
        where = f"  {c.window_start.date()} {c.topic}[{c.partition}]"
        label = ", ".join(c.kinds)
        if c.verdict == "gap":
            lines.append(f"{where} gap{f' [{label}]' if label else ''}: {c.detail}")
        elif c.verdict == NOT_STABLE:
            lines.append(f"{where} {c.verdict}: {c.detail}")
        elif c.verdict == "healed":
            found = c.gap_checked_at.isoformat(timespec="seconds") if c.gap_checked_at else "?"
            lines.append(f"{where} healed by {c.healed_by or 'a later run'} ({f'{label} ' if label else ''}gap found "
                         f"{found}: {c.gap_detail})")  # fmt: skip
    return "\n".join(lines)


NEVER_RAN_COLUMNS: Final = ("TOPIC", "PARTITION", "LOG-START", "LOG-END", "BACKLOG")


@dataclass(frozen=True, slots=True)
class NeverRan:
    """A spec'd pipeline with no run yet: the DAG that starts it and, asked live, what it would read."""

    name: str
    target_table: str
    topics: tuple[str, ...]
    start_dag: str
    partitions: tuple[PartitionSnapshot, ...] | None = None  # None: the broker was not asked
    broker_error: str | None = None

    @property
    def backlog(self) -> int | None:
        return None if self.partitions is None else sum(p.log_end - p.log_start for p in self.partitions)

    def as_dict(self) -> dict[str, Any]:
        partitions = None if self.partitions is None else [
            {"topic": p.topic, "partition": p.partition, "log_start": p.log_start, "log_end": p.log_end,
             "backlog": p.log_end - p.log_start}
            for p in self.partitions
        ]  # fmt: skip
        return {"name": self.name, "never_ran": True, "target_table": self.target_table, "topics": list(self.topics),
                "start_dag": self.start_dag, "backlog": self.backlog, "partitions": partitions,
                "broker_error": self.broker_error}  # fmt: skip


def never_ran_text(p: NeverRan) -> str:
    """A pipeline that never ran: the DAG that starts it; its topics' backlog when the broker was asked.

    >>> print(never_ran_text(NeverRan("orders", "public.orders", ("orders",), "reprocess_orders_backfill")))
    PIPELINE orders (target public.orders; never ran: `airflow dags trigger reprocess_orders_backfill` starts it)
      topics: orders (--live asks the broker for their backlog)
    """
    lines = [f"PIPELINE {p.name} (target {p.target_table}; never ran: `airflow dags trigger {p.start_dag}` starts it)"]
    if p.partitions is None:
        lines.append(f"  topics: {', '.join(p.topics)} (--live asks the broker for their backlog)")
    elif p.broker_error:
        lines.append(f"  topics: {', '.join(p.topics)} ({p.broker_error})")
    else:
        rows = [(x.topic, x.partition, x.log_start, x.log_end, x.log_end - x.log_start) for x in p.partitions]
        lines.append(table(NEVER_RAN_COLUMNS, rows))
        lines.append(f"BACKLOG {p.backlog} records on the broker now")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class BrokenSpec:
    """A spec file of the pipelines folder that does not load: a finding of ``status``, which lists the rest."""

    file: str
    error: str

    @property
    def name(self) -> str:
        """The file's name without ``.yaml``: its pipeline's, as the placeholder DAG names it."""
        return PurePath(self.file).stem

    @property
    def fix(self) -> str:
        return f"fix the file as the error says; `reprocess validate {self.file}` lists every problem of it"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "broken_spec": True,
                "spec_file": self.file, "error": self.error, "fix": self.fix}  # fmt: skip


def broken_spec_text(b: BrokenSpec) -> str:
    """A spec file that does not load: its error and the fix.

    >>> print(broken_spec_text(BrokenSpec("/specs/typo.yaml", "/specs/typo.yaml: field 'key': required")))
    BROKEN SPEC /specs/typo.yaml: its pipeline is not listed until the file loads
      /specs/typo.yaml: field 'key': required
      fix the file as the error says; `reprocess validate /specs/typo.yaml` lists every problem of it
    """
    return f"BROKEN SPEC {b.file}: its pipeline is not listed until the file loads\n  {b.error}\n  {b.fix}"
