"""The coverage page's Plan view in the real Airflow UI: a plan of corrupted rows rendered with its
per-partition table, its updated columns and its samples' before/after, fetched through the plugin
with a logged-in token, then shown in headless Chromium (a screenshot for the note)."""

from __future__ import annotations

import html
import os
from pathlib import Path

import pytest

from tests.integration.operations.test_plan import _plan
from tests.integration.plugins.test_ui_browser import SCREENSHOTS, airflow_ui
from tests.support import airflow_http
from tests.support.browser import Browser, ensure_chromium
from tests.support.helpers import corrupt_rows, loaded_payments

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("airflow")]
CORRUPTED = 6
# Where the note's screenshot goes (PLAN_VIEW_PNG), else beside the UI test's screenshots.
SHOT = Path(os.environ.get("PLAN_VIEW_PNG", str(SCREENSHOTS / "plan_view.png")))


def test_plan_view_shows_the_plans_table_columns_and_before_after_samples(
    kafka_config, engine, unique_name, tmp_path, monkeypatch
):
    monkeypatch.setenv("REPROCESS_PIPELINES_DIR", str(tmp_path))  # the UI's dag-processor reads only ours
    spec, _ = loaded_payments(engine, kafka_config, unique_name, 2, 200)
    corrupted = corrupt_rows(engine, spec, "payment_id", "status = 'wrong'", CORRUPTED)
    plan_id = f"{unique_name}-plan"
    report = _plan(engine, kafka_config, spec, plan_id)
    ensure_chromium()

    with airflow_ui() as ui:
        path = f"/reprocess/pipelines/{spec.name}?plan={plan_id}"
        status, body = airflow_http.get(ui["url"], path, airflow_http.token(ui["url"], "admin", ui["password"]))
        assert status == 200, body[:500]
        page = html.unescape(body.decode())
        plan = page[page.index('<section id="plan">') : page.index("</section>", page.index('<section id="plan">'))]
        assert plan_id in plan and 'id="plan-table"' in plan
        assert f"Updated columns: status ×{CORRUPTED}" in plan
        assert all(f'{{"payment_id": "{k}"}}' in plan for k in corrupted), plan
        assert plan.count('<td>status</td><td>"wrong"</td>') == CORRUPTED
        totals = [p["kinds"]["updated"] for p in report["partitions"]]
        assert sum(totals) == CORRUPTED

        browser = Browser(width=1280, height=900)
        try:
            browser.goto(f"{ui['url']}/")
            browser.wait_for_text("Sign in")
            browser.type_into("input[name=username]", "admin")
            browser.type_into("input[name=password]", ui["password"])
            browser.click("button[type=submit]")
            browser.wait_for("!location.pathname.startsWith('/auth')", "the UI after login")
            browser.goto(ui["url"] + path)
            browser.wait_for("document.getElementById('plan-table') !== null", "the Plan view")
            browser.eval("document.querySelectorAll('#plan details').forEach(d => d.open = true)")
            browser.eval("document.getElementById('plan').scrollIntoView({block: 'start'})")
            browser.wait_for_text(f"status ×{CORRUPTED}")
            browser.screenshot(SHOT)
        finally:
            browser.close()
    print(f"Plan view screenshot: {SHOT}")
