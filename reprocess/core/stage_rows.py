"""The shape of a stage row, shared by the Spark job that writes it, the stage table and COPY
that hold it, and the merge and reconciliation that read it."""

from __future__ import annotations

from reprocess.core.spec import PipelineSpec

ROW: str = "row"
DEAD: str = "dead"
TOMBSTONE: str = "tombstone"  # a null value that deletes its key (spec ``tombstones: delete``)
FILTERED: str = "filtered"  # ONE row whose ``_records`` counts the good records ``where`` did not keep
# A primary-key change's delete of the old key (Debezium: ``op: d`` with header ``__debezium.newkey``),
# staged a second time beside its tombstone: it carries the old key's values at the change, which
# the new key's create left out (``_records`` 0: the record is counted once, as the tombstone).
MOVED: str = "moved"
LINEAGE: tuple[str, ...] = ("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp")
STAGE_EXTRA: tuple[str, ...] = ("_records", "_error", "_raw_key", "_raw_value")
# The row's columns whose value the record left out (``spec.unchanged_columns``): in the decoder's
# output an array of their names, in the stage their names joined by commas (NULL for none). The
# commit resolves them (reprocess.postgres.left_out); what stays listed is an incomplete value.
UNCHANGED: str = "_unchanged"
# Beside it, the links a left-out value follows across a primary-key change: the row's own key
# (of a row listing a value, and of a moved row), the old key its segment was moved from (a create
# with header ``__debezium.oldkey``; NULL when its values need no link), and a ``moved`` row's new
# key; each as the JSON text of the spec's key columns (``{"id":3}``), written by Spark alone so
# that equal keys are equal texts.
ROW_KEY: str = "_row_key"
OLD_KEY: str = "_old_key"
NEW_KEY: str = "_new_key"
# The key change a moved row is (``MOVED_AT``) and the one a row moved from an old key came by
# (``OLD_AT``): the source's commit time (``source.ts_ms``), the same in the change's delete and
# create and in the copies a connector re-sends after a restart; so a create links to its own
# change's delete, never to a later change's.
MOVED_AT: str = "_moved_at"
OLD_AT: str = "_old_at"
LINKS: tuple[str, ...] = (ROW_KEY, OLD_KEY, NEW_KEY, MOVED_AT, OLD_AT)


def stage_columns(spec: PipelineSpec) -> list[str]:
    """Column order shared by the Spark output, the stage table and COPY."""
    unchanged = [UNCHANGED, *LINKS] if spec.unchanged_columns else []
    return ["_kind", *(c.name for c in spec.columns), *LINEAGE, *STAGE_EXTRA, *unchanged]
