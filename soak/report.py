"""The soak's printed table: runs per pipeline, faults by kind, records, dead letters, the longest
lag, each fault's recovery time and every oracle check's verdict."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from soak.chaos import Fault
from soak.oracle import Check


@dataclass
class Figures:
    minutes: float
    pipelines: list[str]
    runs: Mapping[str, Mapping[str, int]]  # pipeline → "kind state" → count
    dag_runs: Mapping[str, Mapping[str, int]]  # dag id → state → count
    records: Mapping[str, int]  # pipeline → records produced (CDC: row changes)
    dead_letters: Mapping[str, int]
    longest_lag: Mapping[str, int]
    faults: list[Fault]
    recoveries: list[float | None]
    mended: Mapping[str, int]
    catch_up_s: float
    checks: list[Check]
    # pipeline → verdict → partitions checked (monitor.reconcile_verdicts)
    verdicts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


def _row(*cells: object, widths: tuple[int, ...]) -> str:
    return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=False))


def render(f: Figures) -> str:
    out = [f"soak: {f.minutes:g} minutes of load and faults, catch-up {f.catch_up_s:.0f} s", ""]
    w = (26, 48, 10, 12, 12)
    out.append(_row("pipeline", "runs (kind state: count)", "records", "dead lett.", "longest lag", widths=w))
    for p in f.pipelines:
        runs = ", ".join(f"{k}: {n}" for k, n in sorted(f.runs.get(p, {}).items()))
        out.append(_row(p, runs, f.records.get(p, 0), f.dead_letters.get(p, 0), f.longest_lag.get(p, 0), widths=w))
    out += ["", "DAG runs: " + "; ".join(f"{d} {dict(s)}" for d, s in f.dag_runs.items())]
    # A reconcile run waits for the incremental to read its window; "not yet stable" here means one
    # that waited past its limit (the incremental was far behind), "gap" one with records missing.
    out.append("reconcile verdicts (partitions checked): "
               + ("; ".join(f"{p} {dict(v)}" for p, v in f.verdicts.items()) or "none"))  # fmt: skip
    kinds = Counter(fault.kind for fault in f.faults)
    out += ["", "faults by kind: " + (", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "none")]
    w2 = (10, 14, 8, 14, 16)
    out.append(_row("at (UTC)", "kind", "down s", "restarted s", "recovery s", widths=w2))
    for fault, recovery in zip(f.faults, f.recoveries, strict=True):
        shown = "never" if recovery is None else f"{recovery:.0f}"
        out.append(_row(f"{fault.at:%H:%M:%S}", fault.kind, f"{fault.down_s:.0f}", f"{fault.restarted_s:.0f}", shown,
                        widths=w2))  # fmt: skip
    known = [r for r in f.recoveries if r is not None]
    if known:
        out.append(f"recovery (fault → every pipeline committed a run started after it): longest {max(known):.0f} s, "
                   f"median {sorted(known)[len(known) // 2]:.0f} s")  # fmt: skip
    out += [
        "",
        "mended by the supervisor: " + (", ".join(f"{k} {n}" for k, n in sorted(f.mended.items())) or "nothing"),
    ]
    out += ["", "oracle checks:"]
    out += [f"  {'PASS' if c.passed else 'FAIL'}  {c.what}" + ("" if c.passed else f"  ({c.detail})") for c in f.checks]
    out += ["", f"soak: {'PASS' if f.passed else 'FAIL'}"]
    return "\n".join(out)
