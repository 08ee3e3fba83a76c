"""OpenLineage is an optional extra: the DAGs build without the one module that needs the provider
(the facets). With it, a run's facts become the datasets and facets docs/operations/lineage.md names."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# The provider is installed here (the dev extra); what the DAG build must not import is the one
# module that needs it. (Other providers import the OpenLineage client when it is installed.)
BUILD_DAG = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from reprocess.airflow.run_dags import build_run_dag
    from reprocess.core.runs import RunKind
    from reprocess.formats.specs import read_spec

    dag = build_run_dag(read_spec(Path("pipelines/orders.yaml")), RunKind.BACKFILL)
    assert dag.get_task("commit_transaction").lineage_target == "public.orders"
    assert dag.get_task("spark_read_stage").lineage_target == "public.orders"
    print("reprocess.airflow.lineage_facets" in sys.modules)
    """
)


def test_the_dags_build_without_importing_the_module_that_needs_the_provider():
    result = subprocess.run([sys.executable, "-c", BUILD_DAG], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "False", result.stdout


def test_a_committed_run_becomes_topic_inputs_with_ranges_and_a_table_output_with_its_row_count():
    from openlineage.client.serde import Serde

    from reprocess.airflow.lineage import failure_of
    from reprocess.airflow.lineage_facets import operator_lineage
    from reprocess.airflow.lineage_facts import Failure, RunFacts
    from reprocess.core.errors import StageRefusedError
    from reprocess.core.ranges import OffsetRange

    facts = RunFacts(
        run_id="r", kafka_namespace="kafka://k:9092", postgres_namespace="postgres://db:5432", table="app.s.t",
        ranges=(OffsetRange("a", 0, 0, 5), OffsetRange("b", 0, 3, 4), OffsetRange("a", 1, 2, 9)),
        committed=True, rows_upserted=7, rows_deleted=1, dead_letters=2, records_read=13,
    )  # fmt: skip
    lineage = operator_lineage(facts, failure_of("commit_transaction", StageRefusedError("too many")))
    inputs = [Serde.to_dict(d) for d in lineage.inputs]
    assert [(d["namespace"], d["name"]) for d in inputs] == [("kafka://k:9092", "a"), ("kafka://k:9092", "b")]
    assert inputs[0]["inputFacets"]["reprocess_offsetRanges"]["ranges"] == [
        {"partition": 0, "startOffset": 0, "endOffset": 5},
        {"partition": 1, "startOffset": 2, "endOffset": 9},
    ]
    (output,) = [Serde.to_dict(d) for d in lineage.outputs]
    assert (output["namespace"], output["name"]) == ("postgres://db:5432", "app.s.t")
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 7
    error = Serde.to_dict(lineage.run_facets["reprocess_error"])
    assert (error["errorKind"], error["productError"]) == ("StageRefusedError", True)
    assert failure_of("x", KeyError("k")) == Failure("KeyError", False, failure_of("x", KeyError("k")).message)

    uncommitted = operator_lineage(RunFacts(**{**facts.__dict__, "committed": False}), None)
    assert Serde.to_dict(uncommitted.outputs[0])["outputFacets"] == {}
    assert "reprocess_error" not in uncommitted.run_facets
