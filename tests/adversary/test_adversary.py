"""The adversary in the suite (issue 56): a seeded slice of generated scenarios, and every case file
``make fuzz`` ever wrote, run through Kafka, Spark Connect and PostgreSQL and checked after every step
against the oracle (the target value by value, the dead letters, the ledger, replays that write nothing).

The slice is fixed (Hypothesis derandomized: the same examples every run, so a red run is reproducible);
``REPROCESS_ADVERSARY_EXAMPLES`` sets its size. ``make fuzz`` explores beyond it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tests.adversary import driver
from tests.adversary.model import Scenario, case_files
from tests.adversary.strategies import scenarios

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

SLICE_EXAMPLES = int(os.environ.get("REPROCESS_ADVERSARY_EXAMPLES", "3"))


@settings(
    max_examples=SLICE_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.generate,),  # shrinking reruns Spark: make fuzz shrinks, the suite reports the example
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(s=scenarios(max_records=25, max_steps=3))
def test_generated_pipelines_match_the_oracle_after_every_step(s: Scenario, engine: Any, kafka_config: Any) -> None:
    driver.run(s, engine, kafka_config)


@pytest.mark.parametrize("case", case_files(), ids=lambda p: Path(p).stem)
def test_a_case_the_fuzzer_found_stays_fixed(case: Path, engine: Any, kafka_config: Any) -> None:
    driver.run(Scenario.from_json(case.read_text()), engine, kafka_config)
