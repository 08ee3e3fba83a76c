"""``make bench``: produce the data, run every case once, print and record one table.

Usage: ``python -m bench --help`` (the flags: :mod:`bench.args`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from bench import change_cost, jit, report
from bench.airflow import product_airflow
from bench.args import parse_args
from bench.audit import CORRUPTED, audit_table
from bench.baseline import baseline_python_loop
from bench.cdc_sink import cdc_cases
from bench.ceilings import ceiling_a_pg_merge, ceiling_b_kafka_raw, read_alone
from bench.concurrency import LEVELS, concurrent_runs
from bench.context import RESULTS, Result, open_bench
from bench.data import UPDATES_PER_KEY, Dataset, produce_dataset
from bench.figures import BATCHED, BIG, PER_PARTITION, Measured, figures
from bench.flink_peer import flink_job
from bench.formats import FORMATS, format_dataset, format_product
from bench.interleave import PAIRS, interleave
from bench.jdbc_sink import jdbc_sink
from bench.left_out import LEFT_OUT_RECORDS, left_out_incremental
from bench.oracle import Table, count_wrong
from bench.plan import plan_then_apply
from bench.product import Launcher, SparkConnect, SparkSubmit, product
from bench.reconcile import reconcile_window
from bench.slices import older_slice
from bench.spark_peer import spark_availablenow_job
from bench.tamper import tamper_check

log = logging.getLogger("bench")


def launchers() -> list[Launcher]:
    """The launchers measured, the default one (``spark_default``'s type in ``make services``) first."""
    return [SparkConnect(), SparkSubmit()]


def interleaved(r: Result, i: int) -> Result:
    """``r`` named as the ``i``-th of the interleaved timings (bench.interleave)."""
    return dataclasses.replace(r, case=f"{r.case}, interleaved {i + 1} of {PAIRS}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    bench = open_bench()
    tag = bench.tag
    n = args.records
    topics: list[str] = []

    def dataset(records: int) -> Dataset:
        ds = produce_dataset(bench.kafka, f"{tag}_{records}", records)
        topics.append(ds.topic)
        return ds

    def run(case: Callable[..., Result], *a: Any, **kw: Any) -> Result:
        log.info("case %s %s ...", case.__name__, kw.get("label", ""))
        load_before = os.getloadavg()[0]
        r = case(bench, *a, **kw)
        # Other work on the machine skews a case; the 1-minute load average before/after says so.
        r.detail["loadavg_1m_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        log.info("case %s: %.1f s, %.0f records/s %s", r.case, r.seconds, r.rate, r.phases)
        return r

    def wrong(label: str, ds: Dataset) -> dict[str, int]:
        """The oracle's count of what the case ``label``'s target got wrong (bench.oracle)."""
        conn = bench.connect()
        try:
            return count_wrong(conn, ds, Table(f"{tag}_{label}", "orders"))
        finally:
            conn.close()

    def replay(first: Result, label: str, again: Callable[[], Result]) -> None:
        """Count the first load's wrong rows, run the case again over the same range, count again."""
        first.detail["wrong_after_load"] = wrong(label, main_ds)
        first.detail["replay_seconds"] = again().seconds
        first.detail["wrong_after_replay"] = wrong(label, main_ds)

    results: list[Result] = []
    failed: list[str] = []
    peers: dict[str, Result] = {}
    conc: dict[int, Result] = {}
    by_launcher: dict[str, tuple[Result, Result]] = {}
    cold: dict[str, Result] = {}
    second: dict[str, Result] = {}
    settling: dict[str, list[float]] = {}
    by_format: dict[str, Result] = {}
    scaled: dict[str, Result] = {}
    try:
        small = dataset(1_000)
        main_ds = dataset(n)
        ceil_a = run(ceiling_a_pg_merge, main_ds)
        ceil_b = run(ceiling_b_kafka_raw, main_ds)
        reader = run(read_alone, main_ds)
        base = run(baseline_python_loop, main_ds)
        results += [ceil_a, ceil_b, reader, base]
        ceil_a.detail["wrong_after_load"] = wrong("ceil_a", main_ds)
        replay(base, "baseline", lambda: run(baseline_python_loop, main_ds))
        for launcher in launchers():
            if launcher.stays_warm:
                # A warm server's first big job after its start also pays JIT compilation and its
                # Python workers' start: measured apart. Its JIT goes on compiling for a few runs
                # more (bench.jit): replays into the cold run's target until it has settled (at
                # most four), so the figure below is the steady state. The first of them is the
                # second run after the start: printed too (an hourly pipeline's second hour).
                launcher.restart()
                cold_label = f"{launcher.name.replace('-', '_')}_n_cold"
                cold[launcher.name] = run(product, main_ds, launcher, label=cold_label)
                results.append(cold[launcher.name])

                def settle_run(i: int, lc: Launcher = launcher, lb: str = cold_label) -> Result:
                    r = run(product, main_ds, lc, label=lb, run_name=f"settle_{i}")
                    if i == 0:
                        second[lc.name] = dataclasses.replace(r, case=f"{r.case}, the second run after the start")
                    return r

                settling[launcher.name] = jit.settle(launcher.server_pid, settle_run)
                results.append(second[launcher.name])
            label = f"{launcher.name.replace('-', '_')}_n"
            full = run(product, main_ds, launcher, label=label)
            if launcher.name == launchers()[0].name:
                # The replay: the same backfill again over the same range, into the same target.
                again = functools.partial(run, product, main_ds, launcher, label=label, run_name="replay")
                replay(full, label, again)
                # The older slice: the first half of each partition again, into the loaded target.
                run(product, main_ds, launcher, label=label, run_name="older_slice", ends=older_slice(main_ds.ends))
                full.detail["wrong_after_older_slice"] = wrong(label, main_ds)
            fixed = run(product, small, launcher, label=f"{launcher.name.replace('-', '_')}_1k")
            by_launcher[launcher.name] = (full, fixed)
            results += [full, fixed]
        default = launchers()[0]
        # Ceiling A and the warm product, A B A B A B in one sitting (bench.interleave): the ratio
        # of their medians, each into its own empty target.
        ab = interleave(
            lambda i: interleaved(run(ceiling_a_pg_merge, main_ds, label=f"ceil_a_{i}"), i),
            lambda i: interleaved(run(product, main_ds, default, label=f"{default.name.replace('-', '_')}_n_{i}"), i),
        )
        results += [*ab.a, *ab.b]
        optional: list[tuple[str, Callable[[], Result]]] = []

        def plan_case() -> Result:
            scaled["plan"] = run(plan_then_apply, main_ds, label=f"{default.name.replace('-', '_')}_n")
            return scaled["plan"]

        optional.append(("plan_n", plan_case))

        def tamper_case() -> Result:
            scaled["tamper"] = run(tamper_check, main_ds, label=f"{default.name.replace('-', '_')}_n")
            return scaled["tamper"]

        optional.append(("tamper_n", tamper_case))
        if args.left_out:

            def left_out_case() -> Result:
                scaled["left_out"] = run(left_out_incremental, LEFT_OUT_RECORDS, args.left_out)
                return scaled["left_out"]

            optional.append(("left_out", left_out_case))
        if args.airflow:
            optional.append(("airflow_1k", lambda: run(product_airflow, small, label="airflow_1k")))
        if args.scale:
            for records, label in ((n // 10, "scale_n_10"), (3 * n, "scale_3n")):

                def scale_case(r: int = records, lb: str = label) -> Result:
                    scaled[lb] = run(product, dataset(r), default, label=lb)
                    return scaled[lb]

                optional.append((label, scale_case))
        # The 10 M cases next to the 1 M ones, before the formats, peers and concurrent runs: their
        # peak memory is compared with the 1 M run's, and a JVM keeps the heap those cases grew.
        if args.big:
            big_data: list[Dataset] = []

            def big_case() -> Result:
                big_data.append(dataset(BIG))
                scaled["big"] = run(product, big_data[0], default, label="big_10m")
                return scaled["big"]

            def big_batched_case() -> Result:
                # The same records in batches of the former default (1 M offsets per partition: 3
                # batches, each merging all 1 M keys, docs/scale.md): its cost, and a multi-batch run
                # checked against the default's one batch.
                if not big_data:
                    raise RuntimeError("the 10 M product case did not run")
                scaled["big_batched"] = run(product, big_data[0], default, label="big_10m_batched", batch_size=BATCHED)
                return scaled["big_batched"]

            def big_reconcile_case() -> Result:
                if not big_data:
                    raise RuntimeError("the 10 M product case did not run")
                log.info("case reconcile_window big_10m (with values and lineage only) ...")
                load_before = os.getloadavg()[0]
                both = reconcile_window(bench, big_data[0], "big_10m")
                scaled["big_reconcile"], scaled["big_reconcile_lineage"] = both
                for r in both:
                    r.detail["loadavg_1m_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
                results.append(scaled["big_reconcile_lineage"])
                return scaled["big_reconcile"]

            def big_audit_case(corrupt: int) -> Result:
                if not big_data:
                    raise RuntimeError("the 10 M product case did not run")
                key = "big_audit_corrupted" if corrupt else "big_audit"
                scaled[key] = run(audit_table, big_data[0], label="big_10m", corrupt=corrupt)
                return scaled[key]

            def big_tamper_case() -> Result:
                if not big_data:
                    raise RuntimeError("the 10 M product case did not run")
                scaled["big_tamper"] = run(tamper_check, big_data[0], label="big_10m")
                return scaled["big_tamper"]

            def big_ceiling_case() -> Result:  # the tamper check's reference: ceiling A's merge of the same records
                if not big_data:
                    raise RuntimeError("the 10 M product case did not run")
                scaled["big_ceil_a"] = run(ceiling_a_pg_merge, big_data[0], label="ceil_a_10m")
                return scaled["big_ceil_a"]

            optional += [("big_10m", big_case), ("big_10m_batched", big_batched_case),
                         ("big_10m_reconcile", big_reconcile_case), ("big_10m_audit", lambda: big_audit_case(0)),
                         ("big_10m_audit_corrupted", lambda: big_audit_case(CORRUPTED)),
                         ("big_10m_tamper", big_tamper_case), ("big_10m_ceiling_a", big_ceiling_case)]  # fmt: skip
        for fmt in FORMATS if args.formats else ():

            def format_case(f: str = fmt) -> Result:
                ds = format_dataset(bench, f, n)
                topics.append(ds.topic)
                by_format[f] = run(format_product, ds, f, label=f"{f}_n")
                return by_format[f]

            optional.append((f"format_{fmt}", format_case))
        if args.peers:

            def jdbc_case() -> Result:
                peers["jdbc"] = run(jdbc_sink, n)
                return peers["jdbc"]

            def spark_case() -> Result:
                peers["spark"] = run(spark_availablenow_job, main_ds)
                return peers["spark"]

            def flink_case() -> Result:
                peers["flink"] = run(flink_job, main_ds)
                return peers["flink"]

            def cdc_case() -> Result:
                # issue 58: the debezium format and Debezium's JDBC sink on the same N change events
                peers["cdc"], peers["cdc_sink"] = cdc_cases(bench, n, run)
                results.append(peers["cdc"])
                return peers["cdc_sink"]

            optional += [("jdbc_sink", jdbc_case), ("spark_availablenow_job", spark_case), ("flink_job", flink_case),
                         ("cdc_sink", cdc_case)]  # fmt: skip
        if args.concurrency:
            conc_data: list[Dataset] = []

            def conc_case(k: int) -> Result:
                if not conc_data:
                    conc_data.append(dataset(max(UPDATES_PER_KEY, n // 4)))
                conc[k] = run(concurrent_runs, conc_data[0], k)
                return conc[k]

            optional += [(f"concurrent_{k}", lambda k=k: conc_case(k)) for k in LEVELS]
        if args.partitions:

            def partitions_case() -> Result:
                records = args.partitions * PER_PARTITION
                ds = produce_dataset(bench.kafka, f"{tag}_p{args.partitions}", records, partitions=args.partitions,
                                     orders=args.partitions)  # fmt: skip
                topics.append(ds.topic)
                label = f"partitions_{args.partitions}"
                scaled["partitions"] = run(product, ds, default, label=label)
                # The same range again: a wide topic's next hourly run finds the server's code for
                # this shape of read compiled (the first run pays it, and is the figure reported).
                again = run(product, ds, default, label=label, run_name="again")
                scaled["partitions_again"] = dataclasses.replace(again, case=f"{again.case}, the same range again")
                results.append(scaled["partitions"])
                return scaled["partitions_again"]

            optional.append(("partitions", partitions_case))
        if args.change_cost:  # issue 58 item 1: a run's and a window's cost by the change, not the table

            def increment_case() -> Result:
                scaled["increment_big"], scaled["increment_empty"] = change_cost.incremental_cost(
                    bench, default, args.change_rows
                )
                results.append(scaled["increment_empty"])
                return scaled["increment_big"]

            def window_case() -> Result:
                scaled["window_wide"], scaled["window_narrow"] = change_cost.reconcile_cost(
                    bench, default, args.change_rows
                )
                results.append(scaled["window_narrow"])
                return scaled["window_wide"]

            optional += [("increment_change_cost", increment_case), ("window_change_cost", window_case)]
        for label, thunk in optional:
            try:
                results.append(thunk())
            except Exception:  # an optional case failing must not lose the measured ones
                log.exception("optional case %s failed", label)
                failed.append(label)
    finally:
        if not args.keep_topics and topics:
            from reprocess.kafka.clients import make_admin

            admin = make_admin(bench.kafka)
            for fut in admin.delete_topics(topics, operation_timeout=30).values():
                try:
                    fut.result()
                except Exception as exc:  # cleanup must not hide the real error
                    log.warning("could not delete topic: %s", exc)

    measured = Measured(
        n, ceil_a, ceil_b, base, default.name, results, failed, peers, conc, by_launcher, cold, settling, by_format,
        scaled, args.partitions, args.peers, ab=ab, second=second,
    )  # fmt: skip
    ratios, checks = figures(measured)
    text = report.body(n, results, ceil_a, base, ratios, checks)
    print(text)
    meta = {
        "tag": tag,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "records": n,
        "default_launcher": default.name,
    }
    raw = {**meta, "results": [{**asdict(r), "records_per_s": r.rate} for r in results], "ratios": ratios,
           "checks": checks}  # fmt: skip
    (RESULTS / f"{tag}.json").write_text(json.dumps(raw, indent=2, default=str))
    if args.docs:
        report.write_docs(meta, text)
    return 0 if all(checks.values()) else 1
