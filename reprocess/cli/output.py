"""Text renderings the commands print: aligned tables, a pipeline's status, its reconciliation calendar."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

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
        f"dead letters 24h {p.dead_letters_day}; retention {p.risk})"
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
    lines.append(calendar_text(cells))
    return "\n".join(lines)


def calendar_text(cells: Sequence[CalendarCell]) -> str:
    """The calendar in a few lines: counts per verdict, then each gap and each healed window."""
    if not cells:
        return "RECONCILIATION: no window checked yet"
    counts = {v: sum(c.verdict == v for c in cells) for v in ("ok", "healed", "gap")}
    lines = [f"RECONCILIATION ({len({c.window_start for c in cells})} windows): "
             + ", ".join(f"{n} {v}" for v, n in counts.items())]  # fmt: skip
    for c in cells:
        where = f"  {c.window_start.date()} {c.topic}[{c.partition}]"
        if c.verdict == "gap":
            lines.append(f"{where} gap: {c.detail}")
        elif c.verdict == "healed":
            found = c.gap_checked_at.isoformat(timespec="seconds") if c.gap_checked_at else "?"
            lines.append(f"{where} healed by {c.healed_by or 'a later run'} (gap found {found}: {c.gap_detail})")
    return "\n".join(lines)
