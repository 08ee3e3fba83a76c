"""The bench's figures: the ratios printed in docs/benchmarks.md and the checks that fail the run,
computed from the results the cases measured (:func:`bench.cli.main` runs them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median

from bench import cdc_sink, report
from bench.context import Result
from bench.interleave import Interleaved
from bench.left_out import RATIO

BIG = 10_000_000
BATCHED = 1_000_000  # the former default batch_size: the 10 M case cut in 3 batches
PER_PARTITION = 21  # records per partition in the --partitions case: an hourly increment of a wide topic


@dataclass
class Measured:
    """What one bench run measured, by case (each dict holds the cases that ran)."""

    n: int  # records per main case
    ceil_a: Result
    ceil_b: Result
    base: Result
    default: str  # the default launcher's name
    results: list[Result]
    failed: list[str]  # optional cases that raised
    peers: dict[str, Result]
    conc: dict[int, Result]
    by_launcher: dict[str, tuple[Result, Result]]  # (N records, 1,000 records)
    cold: dict[str, Result]
    settling: dict[str, list[float]]
    by_format: dict[str, Result]
    scaled: dict[str, Result]
    partitions: int  # --partitions (0: not run)
    peers_ran: bool  # --no-peers not given
    ab: Interleaved | None = None  # ceiling A and the warm product, A B A B A B (bench.interleave)
    second: dict[str, Result] = field(default_factory=dict)  # the second N-record run after the start


def figures(m: Measured) -> tuple[dict[str, float | str], dict[str, bool]]:
    """The ratios (name → value) and the checks (name → passed) of ``m``, in the order they print."""
    same = {k: m.ceil_a.detail[k] for k in ("rows", "checksum")}
    checks = {"baseline target == ceiling A target": {k: m.base.detail[k] for k in same} == same}
    for name, (full, _fixed) in m.by_launcher.items():
        checks[f"product on {name}: target == ceiling A target"] = {k: full.detail[k] for k in same} == same
        checks[f"product on {name}: records_read == N"] = full.detail["records_read"] == m.n
    for fmt, result in m.by_format.items():
        checks[f"product on format {fmt}: target == ceiling A target"] = {k: result.detail[k] for k in same} == same
    checks.update({f"optional case {label} ran": False for label in m.failed})
    for k, r in m.conc.items():
        checks[f"{k} concurrent runs: every run's target the same"] = r.detail["runs_exact"]

    prod, fixed = m.by_launcher[m.default]
    if "wrong_after_replay" in prod.detail:
        checks["product: no row wrong after the load and after a replay (bench.oracle)"] = (
            prod.detail["wrong_after_load"]["total"] == prod.detail["wrong_after_replay"]["total"] == 0
        )
    ratios: dict[str, float | str] = {}
    if m.ab is None:
        ratios["product ÷ ceiling A (records/s)"] = prod.rate / m.ceil_a.rate
    else:
        # The ratio of medians of three of each timed A B A B A B: one number every run can compare.
        ab_same = all({k: r.detail[k] for k in same} == same for r in (*m.ab.a, *m.ab.b))
        checks["interleaved ceiling A and product runs: target == ceiling A target"] = ab_same
        ratios["product ÷ ceiling A (records/s, medians of ceiling A and the warm product timed A B A B A B)"] = (
            m.ab.ratio
        )
        ratios["  product ÷ ceiling A, the spread"] = m.ab.spread("ceiling A", "product")
    ratios |= {
        "product ÷ ceiling B (records/s)": prod.rate / m.ceil_b.rate,
        "product ÷ baseline (records/s)": prod.rate / m.base.rate,
        "baseline ÷ ceiling A (records/s)": m.base.rate / m.ceil_a.rate,
        "fixed overhead: 1,000-record product run (s)": fixed.seconds,
        "product time minus fixed overhead, records/s": m.n / max(1e-9, prod.seconds - fixed.seconds),
    }
    for name, (full, small_run) in m.by_launcher.items():
        ratios[f"product on {name} ÷ ceiling A (records/s)"] = full.rate / m.ceil_a.rate
        ratios[f"product on {name} ÷ baseline (records/s)"] = full.rate / m.base.rate
        ratios[f"fixed overhead: 1,000-record product run on {name} (s)"] = small_run.seconds
        if name in m.cold:
            ratios[f"  product on {name}, first N-record run after the server's start ÷ ceiling A"] = (
                m.cold[name].rate / m.ceil_a.rate
            )
        if name in m.settling:
            shares = ", ".join(f"{share:.0%}" for share in m.settling[name])
            ratios[f"  product on {name}: untimed N-record runs between that one and the warm one, and the JIT "
                   "compilers' share of the server's CPU in each"] = f"{len(m.settling[name])} ({shares})"  # fmt: skip
    airflow_1k = next((r for r in m.results if r.case.endswith("(airflow_1k)")), None)
    if airflow_1k is not None:
        ratios["fixed overhead: 1,000-record run through Airflow, trigger → committed (s)"] = airflow_1k.seconds
        ratios["  the same, first run after Airflow's start (s)"] = airflow_1k.detail["first_run_after_start_s"]
    if "scale_n_10" in m.scaled:
        # 10x the records should cost at most 11x the time above the fixed overhead.
        ratios["time above fixed overhead, N ÷ N/10 (target ≤ 11)"] = (prod.seconds - fixed.seconds) / max(
            1e-9, m.scaled["scale_n_10"].seconds - fixed.seconds
        )
    if "scale_3n" in m.scaled:
        ratios["product at 3N ÷ ceiling A at N (records/s)"] = m.scaled["scale_3n"].rate / m.ceil_a.rate
    if "big" in m.scaled:
        big = m.scaled["big"]
        ratios[f"product at {BIG:,} ÷ product at N (records/s, target ≥ 1)"] = big.rate / prod.rate
        ratios[f"{BIG / 1e6:g} M records/s ÷ {m.n / 1e6:g} M records/s"] = big.rate / prod.rate
        for group in ("jvm", "python workers"):
            at_n, at_big = prod.detail["peak_rss_mb"].get(group), big.detail["peak_rss_mb"].get(group, 0)
            if at_n:
                ratios[f"peak RSS {group} at {BIG:,} ÷ at N (flat ≈ 1)"] = at_big / at_n
    if "big_batched" in m.scaled:
        batched, of = m.scaled["big_batched"], ("rows", "checksum")
        cut = f"in batches of {BATCHED:,} offsets per partition"
        ratios[f"  the same {BIG / 1e6:g} M records {cut}, records/s ÷ {m.n / 1e6:g} M records/s"] = (
            batched.rate / prod.rate
        )
        if "big" in m.scaled:
            alike = {k: batched.detail[k] for k in of} == {k: m.scaled["big"].detail[k] for k in of}
            checks[f"{BIG / 1e6:g} M records: {cut} and at the default batch_size, the same target"] = alike
    if 1 in m.conc and 4 in m.conc:
        ratios["k = 4 concurrent runs, total records/s ÷ one run's"] = m.conc[4].rate / m.conc[1].rate
    if "jdbc" in m.peers:
        ratios["product ÷ Debezium JDBC sink (records/s)"] = prod.rate / m.peers["jdbc"].rate
    if "spark" in m.peers:
        ratios["product ÷ Spark AvailableNow job (records/s)"] = prod.rate / m.peers["spark"].rate
    if {"jdbc", "spark"} <= m.peers.keys() and "wrong_after_replay" in prod.detail:
        ratios["rows wrong after a replay — product / JDBC sink / Spark job"] = " / ".join(
            f"**{r.detail['wrong_after_replay']['total']:,}**" for r in (prod, m.peers["jdbc"], m.peers["spark"])
        )
    # Issue 28's lines, appended so the earlier ones keep their place.
    if "partitions" in m.scaled:
        wide = m.scaled["partitions"]
        ratios[f"{m.partitions:,} partitions × {PER_PARTITION} records, product run (s)"] = wide.seconds
        if "partitions_again" in m.scaled:
            ratios[f"  the same {m.partitions:,}-partition run again (s)"] = m.scaled["partitions_again"].seconds
        checks[f"product over {m.partitions:,} partitions: records_read and rows"] = (
            wide.detail["records_read"] == wide.records and wide.detail["rows"] == m.partitions
        )
    if m.default in m.cold:
        # Issue 58 item 3: what an hourly run meets after a deploy or a crash restarted the server;
        # warm: the interleaved product runs' median (the settled run alone without them).
        warm = median(r.seconds for r in m.ab.b) if m.ab else prod.seconds
        ceiling = median(r.seconds for r in m.ab.a) if m.ab else m.ceil_a.seconds
        ratios["first run after the server's start ÷ warm (seconds, N records)"] = m.cold[m.default].seconds / warm
        if m.default in m.second:
            ratios["second run after the server's start ÷ ceiling A (records/s)"] = (
                ceiling / m.second[m.default].seconds
            )
            ratios["  the first, the second and the settled (warm) N-record run after the server's start (s)"] = (
                f"{m.cold[m.default].seconds:.1f} / {m.second[m.default].seconds:.1f} / {warm:.1f}"
            )
    if "plan" in m.scaled:  # issue 38: a plan's read and rolled-back diff against the apply of exactly it
        ratios[f"plan ÷ apply at {m.n:,} records (seconds)"] = m.scaled["plan"].detail["plan_over_apply"]
    if "big_reconcile" in m.scaled:
        ratios[f"reconciliation of a {BIG / 1e6:g} M-record window (s)"] = m.scaled["big_reconcile"].seconds
        if "big_reconcile_lineage" in m.scaled:  # issue 38: what comparing values costs (target ≤ 1.5)
            ratios[f"reconciliation of a {BIG / 1e6:g} M-record window, with values ÷ lineage only (seconds)"] = (
                m.scaled["big_reconcile"].seconds / m.scaled["big_reconcile_lineage"].seconds
            )
    if m.peers_ran:  # issue 41: the Flink peer, and every peer's replays side by side
        if "flink" in m.peers:
            ratios["product ÷ Flink job (records/s)"] = prod.rate / m.peers["flink"].rate
        four = [prod, *(m.peers.get(k) for k in ("jdbc", "spark", "flink"))]
        ratios["rows wrong after a replay — product / JDBC sink / Spark job / Flink"] = report.wrong_counts(
            four, "wrong_after_replay"
        )
        ratios["rows wrong after an older-slice replay — product / JDBC sink / Spark job / Flink"] = (
            report.wrong_counts(four, "wrong_after_older_slice")
        )
    if {"cdc", "cdc_sink"} <= m.peers.keys():  # issue 58 item 2
        cdc = m.peers["cdc"]
        ratios.update(cdc_sink.ratios(cdc, m.peers["cdc_sink"], m.ceil_a))
        checks["debezium: no row wrong after the load, a replay and an older-slice replay (the model table)"] = all(
            cdc.detail[k]["total"] == 0 for k in ("wrong_after_load", "wrong_after_replay", "wrong_after_older_slice")
        )
    if "tamper" in m.scaled:
        ratios[f"tamper check of the {m.n:,}-record load's target ÷ ceiling A's merge (seconds, target ≤ 2)"] = (
            m.scaled["tamper"].seconds / m.ceil_a.phases["merge+commit"]
        )
    # Issue 57 item 2: the whole-table audit (checksum bisection) against the window check of the same records.
    audit, corrupted, window = (m.scaled.get(k) for k in ("big_audit", "big_audit_corrupted", "big_reconcile"))
    size = f"{BIG / 1e6:g} M"
    if audit and window:
        ratios[f"audit of the {size}-record table finding nothing ÷ the {size}-record window reconciliation "
               "(s, target ≤ 1.5)"] = audit.seconds / window.seconds  # fmt: skip
    # "One that finds 10 corrupted rows costs at most 1.1x that": that = the audit finding nothing. Finding rows
    # is that audit's work plus the differing ranges' rows, so it can never undercut it; the window is context.
    if corrupted and audit:
        found = corrupted.detail["counts"]["differ"]
        ratios[f"audit of the {size}-record table finding its {found} corrupted rows ÷ the audit finding nothing "
               "(s, target ≤ 1.1)"] = corrupted.seconds / audit.seconds  # fmt: skip
    if corrupted and window:
        ratios["  the audit finding the corrupted rows ÷ the window reconciliation (s)"] = (
            corrupted.seconds / window.seconds
        )
    tamper, ceiling = m.scaled.get("big_tamper"), m.scaled.get("big_ceil_a")
    if tamper and ceiling:  # issue 57 item 3: one scan of what ceiling A's merge of the same records writes
        ratios[f"tamper check of the {size}-record table ÷ ceiling A's merge of the same {size} records "
               "(s, target ≤ 2)"] = tamper.seconds / ceiling.phases["merge+commit"]  # fmt: skip
    elif tamper:
        ratios[f"tamper check of the {size}-record load's target (s)"] = tamper.seconds
    if "left_out" in m.scaled:  # issue 58 item 1: the left-out lookups indexed, moved values pruned
        left = m.scaled["left_out"]
        at = "" if left.detail["values"] == 10**6 else f", here {left.detail['values']:,} of each"
        ratios[f"a Debezium incremental leaving a large column out, {RATIO} (median seconds, target ≤ 1.3{at})"] = (
            left.detail["ratio"]
        )
        ratios["  its commit alone, the same ratio"] = left.detail["commit_ratio"]
        checks["Debezium left-out case: no row wrong (bench.left_out's oracle)"] = (
            left.detail["wrong_after_load"]["total"] == 0
        )
    _change_cost(m, ratios, checks)
    return ratios, checks


def _change_cost(m: Measured, ratios: dict[str, float | str], checks: dict[str, bool]) -> None:
    """Issue 58 item 1's lines (bench.change_cost): medians of three interleaved runs each, their spread."""
    big, empty = m.scaled.get("increment_big"), m.scaled.get("increment_empty")
    if big and empty:
        rows = big.detail["history_rows"]
        ratios[f"incremental of {big.records:,} records into a {rows / 1e6:g} M-row target ÷ into an empty target "
               "(seconds, medians of 3 interleaved, target ≤ 1.3)"] = big.seconds / empty.seconds  # fmt: skip
        ratios["  the incremental's runs"] = (
            f"into the big target {big.detail['spread']}; into the empty one " + (empty.detail["spread"])
        )
        checks["incremental into a big and an empty target: no row wrong (bench.oracle)"] = (
            big.detail["wrong_after_load"]["total"] == empty.detail["wrong_after_load"]["total"] == 0
        )
    wide, narrow = m.scaled.get("window_wide"), m.scaled.get("window_narrow")
    if wide and narrow:
        rows = wide.detail["history_rows"]
        ratios[f"the day's reconciliation of a 1,000-partition topic whose target holds {rows / 1e6:g} M rows, "
               "1,000 partitions ÷ 10 partitions (seconds, medians of 3 interleaved, target ≤ 1.5)"] = (
            wide.seconds / narrow.seconds
        )  # fmt: skip
        ratios["  the reconciliation's runs"] = (
            f"on 1,000 partitions {wide.detail['spread']}; on 10 partitions {narrow.detail['spread']}"
        )
        checks["reconciliation on 1,000 and 10 partitions: every partition ok"] = (
            wide.detail["partitions_ok"] == 1_000 and narrow.detail["partitions_ok"] == 10
        )
