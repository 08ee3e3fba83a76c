"""A plan's report as text: the table ``reprocess plan`` prints and the run note shows, and its one line."""

from __future__ import annotations

import json
from typing import Any, Final

from reprocess.postgres.diff import KINDS

# The report's columns per partition and in total (the CLI's table and the coverage page's Plan view).
PLAN_COLUMNS: Final = (*KINDS, "dead_letters", "records_filtered", "values_incomplete")


def plan_line(report: dict[str, Any]) -> str:
    """``Plan: 3 to insert, 10 to update (status ×10), 0 to delete, …`` (Terraform's closing line)."""
    t = report["total"]
    columns = ", ".join(f"{c} ×{n}" for c, n in sorted(report["columns"].items()))
    line = (
        f"Plan: {t['inserted']} to insert, {t['updated']} to update{f' ({columns})' if columns else ''}, "
        f"{t['deleted']} to delete, {t['rewritten']} newer with the same values, {t['unchanged']} unchanged, "
        f"{t['refused']} refused as older, {t['dead_letters']} dead letters, {t['records_filtered']} filtered"
    )
    if t.get("values_incomplete"):
        line += f", {t['values_incomplete']} incomplete values"
    if report.get("refused"):
        line += f". The apply would be REFUSED: {report['refused']}"
    elif not reads(report):
        line += ". It reads nothing (every range is empty): its apply commits an empty run that changes no row"
    return line


def reads(report: dict[str, Any]) -> bool:
    """Whether the plan reads any record (a plan from the ledger at the log end reads none)."""
    return any(start < end for _topic, _partition, start, end in report["ranges"])


def format_plan(report: dict[str, Any]) -> str:
    """The per-partition table, the samples and the closing line, in markdown."""
    lines = [
        f"**plan** `{report['plan_id']}` of **{report['pipeline']}** against {report['target']} "
        f"(spec {report['spec_fingerprint']}): nothing was written",
        "",
        "| partition | " + " | ".join(h.replace("_", " ") for h in PLAN_COLUMNS) + " |",
        "|---" * (len(PLAN_COLUMNS) + 1) + "|",
    ]
    for p in report["partitions"]:
        cells = [
            *(p["kinds"][k] for k in KINDS),
            p["dead_letters"],
            p["records_filtered"],
            p.get("values_incomplete", 0),
        ]
        lines.append(f"| {p['topic']}[{p['partition']}] | " + " | ".join(str(c) for c in cells) + " |")
    lines.append("| **total** | " + " | ".join(str(report["total"][h]) for h in PLAN_COLUMNS) + " |")
    for kind, samples in sorted(report["samples"].items()):
        if kind == "unchanged":
            continue
        lines += ["", f"{kind} (up to 20 keys):"]
        for s in samples:
            changes = "; ".join(f"{c}: {_v(b)} → {_v(a)}" for c, (b, a) in s["changes"].items())
            lines.append(f"- {json.dumps(s['key'])}" + (f" {changes}" if changes else ""))
    lines += ["", plan_line(report)]
    if report["changes"] and not report.get("refused") and not report.get("applied_run_id"):
        lines.append(f"Apply exactly this: `reprocess apply {report['plan_id']}`")
    return "\n".join(lines)


def _v(value: Any) -> str:
    return "∅" if value is None else json.dumps(value)
