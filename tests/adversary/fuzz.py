"""``make fuzz``: the adversary for ``FUZZ_MINUTES`` (default 30) from ``FUZZ_SEED``, then a report.

Run by pytest (``python -m pytest tests/adversary/fuzz.py``: the suite's session fixtures give it the
services and a fresh database); not part of ``make test`` (the file is not named ``test_*``). It runs
Hypothesis in chunks of :data:`CHUNK` examples, chunk ``k`` seeded ``FUZZ_SEED + k``, until the time
is up. A failure is shrunk by Hypothesis (fewer records, fewer steps, smaller cuts) for at most
``FUZZ_SHRINK_MINUTES`` (default 10) and the smallest failing scenario is written to
``tests/adversary/cases/`` with what was expected and found; the suite replays it from then on. The
report (examples, steps, Spark runs, formats, types, orderings, partition counts, time per example, failures) is
printed and written to ``.state/fuzz/``, a line per column type, key type and ordering type with the
examples that covered it. ``FUZZ_KEEP_GOING=1`` goes on after a failure.
``FUZZ_FORMATS`` (default every one of :data:`FORMATS`, comma-separated) restricts the scenarios' formats
(avro's start the Schema Registry on demand); ``FUZZ_TYPES`` and ``FUZZ_KEY_TYPES`` narrow the JSON
scenarios' column and key types (:func:`selected`), ``FUZZ_CONNECTORS`` the Debezium ones' connectors
(``postgresql``, ``mysql``).
``FUZZ_STEPS=beyond`` (or ``rebuild,spec_change,…``) generates json scenarios whose middle steps are
only the steps beyond runs (tests/adversary/steps.py), instead of the formats' scenarios.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.adversary import avro, driver, step_runs
from tests.adversary.debezium import CONNECTORS, debezium_scenarios
from tests.adversary.model import CASES_DIR, MORE_STEP_KINDS, Scenario
from tests.adversary.steps import step_scenarios
from tests.adversary.strategies import JSON_KEY_TYPES, scenarios
from tests.adversary.values import TYPES

CHUNK = 5
FORMATS: dict[str, Any] = {  # format → its scenarios strategy
    "json": lambda: scenarios(
        types=selected("FUZZ_TYPES", TYPES), key_types=selected("FUZZ_KEY_TYPES", JSON_KEY_TYPES)
    ),
    "debezium": lambda: debezium_scenarios(connectors=selected("FUZZ_CONNECTORS", CONNECTORS)),
    "avro": avro.scenarios,
}
REPORTS = Path(__file__).resolve().parents[2] / ".state" / "fuzz"


class Fuzz:
    """One fuzz run's budget, tallies and failures."""

    def __init__(self, minutes: float, first_seed: int, shrink_minutes: float, request: Any = None) -> None:
        self.started = time.monotonic()
        self.request = request  # pytest's: avro scenarios ask it for the schema_registry fixture
        self.until = self.started + minutes * 60
        self.first_seed, self.shrink_minutes = first_seed, shrink_minutes
        self.formats = [f for f in os.environ.get("FUZZ_FORMATS", ",".join(FORMATS)).split(",") if f]
        self.examples = self.steps = self.records = self.spark_runs = 0
        self.seconds: list[float] = []
        self.covered: dict[str, Counter[str]] = {
            k: Counter() for k in ("format", "types", "key", "ordering", "partitions", "tombstones")
        }
        self.failed: dict[str, driver.Mismatch] = {}  # a failing scenario's JSON → what it found
        self.first_failure: float | None = None
        self.cases: list[dict[str, Any]] = []

    def registry(self, s: Scenario) -> str | None:
        return self.request.getfixturevalue("schema_registry") if s.pipeline.format == "avro" else None

    def example(self, s: Scenario, engine: Any, kafka: Any) -> None:
        known = self.failed.get(s.to_json())
        if known is not None:
            raise known  # Hypothesis replays its shrunk example: the answer is known, no Spark needed
        if self.first_failure is not None and time.monotonic() > self.first_failure + self.shrink_minutes * 60:
            return  # the shrink budget is spent: the smallest failure so far is the case
        if self.first_failure is None and time.monotonic() > self.until:
            return  # the time is up: the chunk's remaining examples pass unrun
        try:
            outcome = driver.run(s, engine, kafka, registry=self.registry(s), beyond=step_runs.run_step)
        except driver.Mismatch as exc:
            self.failed[s.to_json()] = exc
            self.first_failure = self.first_failure or time.monotonic()
            raise
        self.examples += 1
        self.steps += outcome.steps
        self.records += len(s.records)
        self.spark_runs += outcome.spark_runs
        self.seconds.append(outcome.seconds)
        d = driver.describe(s)
        self.covered["format"][d["format"]] += 1
        self.covered["types"].update(d["types"])
        self.covered["key"].update(d["key"])
        self.covered["ordering"][d["ordering"]] += 1
        self.covered["partitions"][str(d["partitions"])] += 1
        self.covered["tombstones"][d["tombstones"] + (" batched" if d["batched"] else "")] += 1
        self.covered["tombstones"]["with aborted records"] += d["aborted"]

    def chunk(self, k: int, engine: Any, kafka: Any) -> None:
        @seed(self.first_seed + k)
        @settings(
            max_examples=CHUNK,
            deadline=None,
            database=None,
            phases=(Phase.generate, Phase.shrink),
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )
        @given(_steps_beyond() or st.one_of(*(FORMATS[f]() for f in self.formats)))
        def explore(s: Scenario) -> None:
            self.example(s, engine, kafka)

        try:
            explore()
        except Exception:
            if not self.failed:
                raise  # the bench's own error, not a finding
            self.keep(k)  # a Mismatch, or Hypothesis's Flaky when the product failed once and not again
            if os.environ.get("FUZZ_KEEP_GOING") != "1":
                raise

    def keep(self, k: int) -> None:
        """Write the smallest failing scenario as a case file."""
        smallest = min(self.failed, key=lambda j: (len(json.loads(j)["records"]), len(json.loads(j)["steps"]), len(j)))
        found = Scenario.from_json(smallest)
        mismatch = self.failed[smallest]
        case = Scenario(
            found.pipeline, found.records, found.steps, self.first_seed + k, _plain(mismatch.found), found.registry
        )
        path = CASES_DIR / f"seed{self.first_seed + k}_{int(time.time())}.json"
        driver.write_case(case, path)
        self.cases.append({
            "case": str(path.relative_to(CASES_DIR.parents[2])),
            "found after s": round((self.first_failure or time.monotonic()) - self.started, 1),
            "shrunk to": f"{len(found.records)} records, {len(found.steps)} steps",
            "mismatch": str(mismatch)[:500],
        })  # fmt: skip
        self.failed.clear()
        self.first_failure = None

    def report(self) -> str:
        minutes = (time.monotonic() - self.started) / 60
        per = sum(self.seconds) / len(self.seconds) if self.seconds else 0.0
        lines = [
            f"# make fuzz: seed {self.first_seed}, {minutes:.1f} min",
            f"- examples passed: {self.examples} ({self.examples / minutes:.2f}/min), steps {self.steps}, "
            f"records {self.records}, Spark runs {self.spark_runs}; seconds per example: mean {per:.1f}, "
            f"max {max(self.seconds, default=0):.1f}",
            *(f"- {k}: {dict(sorted(v.items()))}" for k, v in self.covered.items()),
            f"- failures: {len(self.cases)}",
            *(f"  - {json.dumps(c, ensure_ascii=False)}" for c in self.cases),
        ]
        return "\n".join(lines)


def selected(env: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """``FUZZ_TYPES`` / ``FUZZ_KEY_TYPES`` (comma-separated type names): the value and key column types
    to draw from, e.g. ``FUZZ_TYPES=jsonb,text[],numeric(p,s)`` for a finding of those types."""
    chosen = tuple(t.strip() for t in re.split(r",(?![^()]*\))", os.environ.get(env, "")) if t.strip())
    unknown = set(chosen) - set(default)
    assert not unknown, f"{env}: {sorted(unknown)} are not among {default}"
    return chosen or default


def _plain(found: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(found, default=repr))


def _steps_beyond() -> Any:
    """``FUZZ_STEPS`` (``beyond``: every kind, or a comma list of :data:`MORE_STEP_KINDS`): json scenarios
    whose middle steps are only those steps beyond runs (:func:`tests.adversary.steps.step_scenarios`)."""
    chosen = os.environ.get("FUZZ_STEPS", "")
    if not chosen:
        return None
    kinds = MORE_STEP_KINDS if chosen == "beyond" else tuple(chosen.split(","))
    assert set(kinds) <= set(MORE_STEP_KINDS), f"FUZZ_STEPS: beyond or some of {MORE_STEP_KINDS}: {chosen}"
    return step_scenarios(kinds)


def test_fuzz(engine: Any, kafka_config: Any, request: Any) -> None:
    fuzz = Fuzz(
        float(os.environ.get("FUZZ_MINUTES", "30")),
        int(os.environ.get("FUZZ_SEED", "0")),
        float(os.environ.get("FUZZ_SHRINK_MINUTES", "10")),
        request,
    )
    k = 0
    try:
        while time.monotonic() < fuzz.until:
            fuzz.chunk(k, engine, kafka_config)
            k += 1
    finally:
        text = fuzz.report()
        REPORTS.mkdir(parents=True, exist_ok=True)
        (REPORTS / f"report-seed{fuzz.first_seed}-{int(time.time())}.md").write_text(text + "\n")
        print("\n" + text)
    assert not fuzz.cases, fuzz.report()
