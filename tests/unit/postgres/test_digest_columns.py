"""Which columns a row's digest covers, and in what order (the SQL side, sql/026's
``reprocess.digest_text_sql``, orders the table's columns by name under ``COLLATE "C"``; spec
column names are lowercase ASCII, so Python's order of their bytes is the same)."""

from __future__ import annotations

from reprocess.formats.specs import parse_spec
from reprocess.postgres.digest import digested_columns


def test_the_digest_covers_payload_lineage_and_spec_version_in_byte_order_of_names_not_run_or_time():
    spec = parse_spec(
        {"name": "p", "topics": ["p"], "key": ["id"], "columns": {"id": "text", "zeta": "text", "a": "bigint"}},
        source="p.yaml",
    )
    assert digested_columns(spec) == [
        "_kafka_offset", "_kafka_partition", "_kafka_timestamp", "_kafka_topic", "_spec_version", "a", "id", "zeta",
    ]  # fmt: skip
