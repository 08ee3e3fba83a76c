"""The printed table, the ratios, the cross-checks and ``docs/benchmarks.md``."""

from __future__ import annotations

from typing import Any, Final

from bench.context import REPO, Result

DOCS = REPO / "docs" / "benchmarks.md"


def throughput_table(results: list[Result], ceiling_a: Result, baseline: Result) -> str:
    lines = [
        "| case | records | seconds | records/s | ÷ ceiling A | ÷ baseline | load 1m before→after |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        load = "→".join(f"{x:.1f}" for x in r.detail.get("loadavg_1m_before_after", []))
        lines.append(
            f"| {r.case} | {r.records:,} | {r.seconds:.1f} | {r.rate:,.0f} | {r.rate / ceiling_a.rate:.3f} "
            f"| {r.rate / baseline.rate:.2f} | {load} |"
        )
    return "\n".join(lines)


def phases_table(results: list[Result]) -> str:
    lines = ["| case | phase | seconds | share |", "|---|---|---:|---:|"]
    for r in results:
        for name, s in r.phases.items():
            lines.append(f"| {r.case} | {name} | {s:.1f} | {s / r.seconds:.0%} |")
    return "\n".join(lines)


def memory_table(results: list[Result]) -> str:
    lines = ["| case | JVM (driver or server) MB | Python workers MB | Python driver MB |", "|---|---:|---:|---:|"]
    for r in results:
        mb = r.detail.get("peak_rss_mb")
        if mb:
            cells = " | ".join(f"{mb.get(g, 0):,.0f}" for g in ("jvm", "python workers", "python driver"))
            lines.append(f"| {r.case} | {cells} |")
    return "\n".join(lines)


WRONG: Final = ("older_overwrote_newer", "deleted_came_back", "duplicates", "missing", "other_wrong")


def exactness_table(results: list[Result]) -> str:
    """Speed and exactness in one view: each case that loads a table, its records/s, and the rows
    the oracle (bench.oracle) finds wrong after the load, after a replay of the same range
    (and, where the case was probed while its replay ran, the worst count a reader saw) and after
    an older-slice replay (bench.slices: the first half of each partition into the loaded table)."""
    lines = [
        "| case | records/s | wrong after the load | wrong after a replay | of which older over newer / deleted "
        "back / duplicates / missing / other | replay s | worst seen during the replay "
        "| wrong after an older-slice replay | of which older over newer / deleted back / duplicates / missing "
        "/ other |",
        "|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in results:
        first, again = r.detail.get("wrong_after_load"), r.detail.get("wrong_after_replay")
        if first is None:
            continue
        kinds = " / ".join(f"{again[k]:,}" for k in WRONG) if again else "—"
        replay_s = f"{r.detail['replay_seconds']:.1f}" if "replay_seconds" in r.detail else "—"
        during = r.detail.get("worst_during_replay")
        worst = f"{during['total']:,}" if during else "—"
        older = r.detail.get("wrong_after_older_slice")
        older_kinds = " / ".join(f"{older[k]:,}" for k in WRONG) if older else "—"
        older_total = f"{older['total']:,}" if older else "—"
        lines.append(f"| {r.case} | {r.rate:,.0f} | {first['total']:,} | {again['total'] if again else '—'} "
                     f"| {kinds} | {replay_s} | {worst} | {older_total} | {older_kinds} |")  # fmt: skip
    return "\n".join(lines)


def wrong_counts(results: list[Result | None], key: str) -> str:
    """The oracle's total under ``detail[key]`` of each case, ``**n**`` each, ``**—**`` where it did not run."""
    totals = [r.detail.get(key) if r is not None else None for r in results]
    return " / ".join(f"**{t['total']:,}**" if t else "**—**" for t in totals)


def ratio_line(name: str, value: float | str) -> str:
    """``- name: **value**``; a text value (several figures) carries its own emphasis."""
    return f"- {name}: {value}" if isinstance(value, str) else f"- {name}: **{value:,.2f}**"


def body(n: int, results: list[Result], ceiling_a: Result, baseline: Result, ratios: dict[str, float | str],
         checks: dict[str, bool]) -> str:  # fmt: skip
    return "\n\n".join(
        [
            f"## Throughput (N = {n:,})",
            throughput_table(results, ceiling_a, baseline),
            "## Speed and exactness (bench.oracle; a replay runs the same range again into the same table, an "
            "older-slice replay the first half of each partition)",
            exactness_table(results),
            "## Where the time goes",
            phases_table([r for r in results if r.phases]),
            "## Peak memory (RSS as PSS, sampled every 0.5 s; a Spark Connect server holds memory from earlier runs)",
            memory_table(results),
            "## Ratios",
            "\n".join(ratio_line(k, v) for k, v in ratios.items()),
            "## Correctness cross-checks (same final target in every case)",
            "\n".join(f"- {k}: {'yes' if v else 'NO'}" for k, v in checks.items()),
        ]
    )


# docs/benchmarks.md from this line on is kept by a re-run (comparisons measured apart from the table).
KEPT: Final = "<!-- kept by make bench: what follows is not rewritten -->"


def write_docs(report: dict[str, Any], text: str) -> None:
    old = DOCS.read_text() if DOCS.exists() else ""
    kept = old[old.index(KEPT) :] if KEPT in old else ""
    DOCS.write_text(
        "# Benchmarks\n\n"
        "Produced by `make bench` (`python -m bench`, the `bench/` package; raw JSON in `bench/results/`,\n"
        "git-ignored). All cases run in one process on the same data: N JSON order events (~200 bytes,\n"
        "4 partitions, N/10 order ids, so each key is updated 10 times; one key in 20 has a late older\n"
        "version, one in 20 ends with a tombstone: `bench/data.py`), on the local services (embedded\n"
        "PostgreSQL, Apache Kafka from devstack, the Spark launchers, the Kafka Connect worker), each case\n"
        "into its own empty target table. The peers (Debezium's JDBC sink, a raw Spark job) and the\n"
        "exactness oracle are described below the table (`## Peers`).\n"
        "Ratios are records/s of the row ÷ records/s of the reference (1.00 = as fast). Re-run to refresh;\n"
        "numbers below are one measured run on a machine shared with other work (the load column).\n"
        "The Spark Connect launcher runs N first right after the bench restarts its server (`_n_cold`:\n"
        "JIT compilation, Python workers starting), then replays until its JIT compilers spend under 12 %\n"
        "of a run's CPU, at most four runs (`bench/jit.py`; the Ratios say how many ran and each one's\n"
        "share; the first is printed, the second run after the start), then warm (`_n`, the steady\n"
        "state); then ceiling A and the warm product three times each, alternating (A B A B A B,\n"
        "`bench/interleave.py`): `product ÷ ceiling A` is the ratio of their medians, its spread on the\n"
        "line below. spark-submit starts cold every run.\n"
        "What each optimisation bought, and where a small run's time goes: `docs/performance.md`.\n\n"
        f"- date: {report['date']}\n- machine: {report['cores']} cores, {report['platform']}, Python "
        f"{report['python']}\n- command: `{report['command']}`\n- records (N): {report['records']:,}\n"
        f"- default launcher: {report['default_launcher']}\n\n{text}\n" + (f"\n{kept}" if kept else "")
    )
