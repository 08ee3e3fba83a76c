"""The soak's printed table says why reconcile runs failed: the verdicts they recorded, per pipeline
(no services: the figures are given)."""

from __future__ import annotations

from soak.report import Figures, render


def test_the_report_shows_each_pipelines_reconcile_verdicts_next_to_its_dag_runs():
    figures = Figures(
        minutes=1, pipelines=["orders"], runs={}, records={}, dead_letters={}, longest_lag={}, faults=[],
        recoveries=[], mended={}, catch_up_s=0, checks=[],
        dag_runs={"reprocess_orders_reconcile": {"success": 5, "failed": 1}},
        verdicts={"orders": {"ok": 8, "not yet stable": 2}},
    )  # fmt: skip

    lines = render(figures).splitlines()

    runs = lines.index("DAG runs: reprocess_orders_reconcile {'success': 5, 'failed': 1}")
    assert lines[runs + 1] == "reconcile verdicts (partitions checked): orders {'ok': 8, 'not yet stable': 2}"
