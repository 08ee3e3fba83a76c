"""The shape of a stage row, shared by the Spark job that writes it, the stage table and COPY
that hold it, and the merge and reconciliation that read it."""

from __future__ import annotations

from reprocess.core.spec import PipelineSpec

ROW: str = "row"
DEAD: str = "dead"
TOMBSTONE: str = "tombstone"  # a null value that deletes its key (spec ``tombstones: delete``)
FILTERED: str = "filtered"  # ONE row whose ``_records`` counts the good records ``where`` did not keep
LINEAGE: tuple[str, ...] = ("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp")
STAGE_EXTRA: tuple[str, ...] = ("_records", "_error", "_raw_key", "_raw_value")
# The row's columns whose value the record left out (``spec.unchanged_columns``): in the decoder's
# output an array of their names, in the stage their names joined by commas (NULL for none). The
# merge keeps the target row's current value there.
UNCHANGED: str = "_unchanged"


def stage_columns(spec: PipelineSpec) -> list[str]:
    """Column order shared by the Spark output, the stage table and COPY."""
    unchanged = [UNCHANGED] if spec.unchanged_columns else []
    return ["_kind", *(c.name for c in spec.columns), *LINEAGE, *STAGE_EXTRA, *unchanged]
