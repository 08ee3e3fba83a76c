"""The adversary in the suite (issue 56): a seeded slice of generated scenarios, and every case file
``make fuzz`` ever wrote, run through Kafka, Spark Connect and PostgreSQL and checked after every step
against the oracle (the target value by value, the dead letters, the ledger, replays that write nothing).

The slice is fixed (Hypothesis derandomized: the same examples every run, so a red run is reproducible)
and kept to the scenarios worth their Spark runs: Hypothesis's first examples are its simplest (one
record, one partition), so the slice takes the first ones with a dozen records or more over several
partitions, a column ordering and a replay. The default tier runs one (one topic, 3-5 Spark runs); the
long tier (tests/long_tier.txt) runs :data:`LONG_EXAMPLES` more. ``make fuzz`` explores beyond both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings

from tests.adversary import avro, driver, step_runs
from tests.adversary.debezium import debezium_scenarios
from tests.adversary.model import Scenario, case_files
from tests.adversary.steps import step_scenarios
from tests.adversary.strategies import scenarios

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

LONG_EXAMPLES = 6
STEP_EXAMPLES = 4  # steps beyond runs (tests/adversary/steps.py), long tier


def _slice(examples: int) -> Any:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=(Phase.generate,),  # shrinking reruns Spark: make fuzz shrinks, the suite reports the example
        suppress_health_check=list(HealthCheck),
    )


def _worth_its_runs(s: Scenario, *, ordered: bool) -> None:
    assume(len(s.records) >= 12 and s.pipeline.partitions > 1)
    assume(not ordered or (s.pipeline.ordering is not None and any(x.kind.startswith("replay") for x in s.steps)))


@_slice(1)
@given(s=scenarios(max_records=25, max_steps=2))
def test_a_generated_column_ordered_pipeline_over_partitions_matches_the_oracle_after_every_step(
    s: Scenario, engine: Any, kafka_config: Any
) -> None:
    _worth_its_runs(s, ordered=True)
    driver.run(s, engine, kafka_config)


@_slice(LONG_EXAMPLES)
@given(s=scenarios(max_records=40, max_steps=4))
def test_generated_pipelines_match_the_oracle_after_every_step(s: Scenario, engine: Any, kafka_config: Any) -> None:
    _worth_its_runs(s, ordered=False)
    driver.run(s, engine, kafka_config)


@pytest.mark.parametrize("case", case_files(), ids=lambda p: Path(p).stem)
def test_a_case_the_fuzzer_found_stays_fixed(case: Path, engine: Any, kafka_config: Any, request: Any) -> None:
    s = Scenario.from_json(case.read_text())
    registry = request.getfixturevalue("schema_registry") if s.pipeline.format == "avro" else None
    driver.run(s, engine, kafka_config, registry=registry, beyond=step_runs.run_step)


def _a_debezium_life_worth_its_runs(s: Scenario) -> None:
    assume(len(s.records) >= 12 and s.pipeline.partitions > 1)
    assume(any(r.headers for r in s.records) and any(x.batch_size for x in s.steps))


@_slice(1)
@given(s=debezium_scenarios(max_events=20, max_steps=0))
def test_a_generated_debezium_table_life_over_partitions_matches_the_model_table_after_every_step(
    s: Scenario, engine: Any, kafka_config: Any
) -> None:
    _a_debezium_life_worth_its_runs(s)
    driver.run(s, engine, kafka_config)


@_slice(LONG_EXAMPLES)
@given(s=debezium_scenarios(max_events=30, max_steps=4))
def test_generated_debezium_table_lives_match_the_model_table_after_every_step(
    s: Scenario, engine: Any, kafka_config: Any
) -> None:
    _a_debezium_life_worth_its_runs(s)
    driver.run(s, engine, kafka_config)


@_slice(1)
@given(s=avro.scenarios(max_records=20, max_steps=0))
def test_a_generated_avro_pipeline_over_evolving_writer_versions_matches_the_oracle_after_every_step(
    s: Scenario, engine: Any, kafka_config: Any, schema_registry: str
) -> None:
    assume(len(s.records) >= 12 and len(s.registry["schemas"]) >= 3 and any("delete" in op for op in s.registry["ops"]))
    driver.run(s, engine, kafka_config, registry=schema_registry)


@_slice(LONG_EXAMPLES)
@given(s=avro.scenarios(max_records=30, max_steps=3))
def test_generated_avro_pipelines_match_the_oracle_after_every_step(
    s: Scenario, engine: Any, kafka_config: Any, schema_registry: str
) -> None:
    assume(len(s.records) >= 12 and len(s.registry["schemas"]) >= 2)
    driver.run(s, engine, kafka_config, registry=schema_registry)


@_slice(1)
@given(s=step_scenarios(kinds=("spec_change", "plan_apply"), max_records=12))
def test_a_spec_change_then_a_plan_and_its_apply_match_the_oracle_after_every_step(
    s: Scenario, engine: Any, kafka_config: Any
) -> None:
    """One scenario with a step of each (tests/adversary/steps.py); the other steps beyond runs (a
    rebuild, a killed run retried, a corrupted row and the day's check) run in the long tier."""
    assume(len(s.records) >= 8 and s.pipeline.partitions > 1)
    assume([x.kind for x in s.steps[1:3]] == ["spec_change", "plan_apply"])
    driver.run(s, engine, kafka_config, beyond=step_runs.run_step)


@_slice(STEP_EXAMPLES)
@given(s=step_scenarios(max_records=30))
def test_generated_steps_beyond_runs_match_the_oracle_after_every_step(
    s: Scenario, engine: Any, kafka_config: Any
) -> None:
    assume(len(s.records) >= 8 and len(s.steps) >= 4)
    driver.run(s, engine, kafka_config, beyond=step_runs.run_step)
