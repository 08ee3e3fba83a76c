"""The OpenLineage datasets and facets of a run (:mod:`reprocess.airflow.lineage`): imported only
when the provider's listener asks for them, so this module alone needs ``reprocess[openlineage]``.

Custom facets carry a ``reprocess_`` key prefix (OpenLineage's rule for facets outside its spec)
and a ``urn:`` schema URL; their fields are camelCase, as OpenLineage's own (docs/operations/lineage.md
describes them).
"""

from __future__ import annotations

from typing import Any

import attr
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.generated.base import InputDataset, InputDatasetFacet, OutputDataset, RunFacet
from openlineage.client.generated.output_statistics_output_dataset import OutputStatisticsOutputDatasetFacet

from reprocess.airflow.lineage_facts import Failure, RunFacts

RANGES_FACET = "reprocess_offsetRanges"
RUN_FACET = "reprocess_run"
ERROR_FACET = "reprocess_error"


class _Urn:
    """The schema URL of a custom facet, named by its class (BaseFacet's ``_get_schema``)."""

    @classmethod
    def _get_schema(cls) -> str:
        return f"urn:reprocess:openlineage:{cls.__name__}:1"


@attr.define
class OffsetRangesInputDatasetFacet(_Urn, InputDatasetFacet):
    """The offsets of the topic the run read: per partition ``[startOffset, endOffset)``."""

    ranges: list[dict[str, int]] = attr.field(factory=list)


@attr.define
class ReprocessRunFacet(_Urn, RunFacet):
    """The product's run: its id (``reprocess.runs.run_id``), whether it committed, and its counts."""

    runId: str
    committed: bool
    recordsRead: int
    rowsUpserted: int
    rowsDeleted: int
    deadLetters: int


@attr.define
class ReprocessErrorRunFacet(_Urn, RunFacet):
    """Why the task failed: ``errorKind`` is a ``reprocess.core.errors`` class name when
    ``productError`` (the message says the fix), otherwise the unexpected exception's class."""

    errorKind: str
    productError: bool
    message: str


def operator_lineage(facts: RunFacts, failure: Failure | None) -> Any:
    """Topics in (with their ranges), the table out (with ``outputStatistics`` once committed)."""
    inputs = [
        InputDataset(
            namespace=facts.kafka_namespace,
            name=topic,
            inputFacets={
                RANGES_FACET: OffsetRangesInputDatasetFacet(
                    ranges=[
                        {"partition": r.partition, "startOffset": r.start, "endOffset": r.end}
                        for r in facts.ranges
                        if r.topic == topic
                    ]
                )
            },
        )
        for topic in facts.topics
    ]
    output_facets: dict[str, Any] = {}
    if facts.committed:
        output_facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(rowCount=facts.rows_upserted)
    output = OutputDataset(namespace=facts.postgres_namespace, name=facts.table, outputFacets=output_facets)
    run_facets: dict[str, Any] = {
        RUN_FACET: ReprocessRunFacet(
            runId=facts.run_id,
            committed=facts.committed,
            recordsRead=facts.records_read,
            rowsUpserted=facts.rows_upserted,
            rowsDeleted=facts.rows_deleted,
            deadLetters=facts.dead_letters,
        )
    }
    if failure is not None:
        run_facets[ERROR_FACET] = ReprocessErrorRunFacet(
            errorKind=failure.kind, productError=failure.product, message=failure.message
        )
    return OperatorLineage(inputs=inputs, outputs=[output], run_facets=run_facets)
