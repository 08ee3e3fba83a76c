"""A chain of renames (``c2`` → ``c2_r1`` → ``c2_r2`` → ``c2_r3``, each aliasing the one before, the
latest with a default): a record of the second version is read at the field its writer has, not at
the latest's default (the adversary's long-tier Avro example found it; its case file replays it)."""

import json

from reprocess.formats.avro_schema import read_path, versions


def _schema(name: str, aliases: list[str] | None = None, default: bool = False) -> str:
    field: dict[str, object] = {"name": name, "type": ["null", "string"]}
    field |= {"aliases": aliases} if aliases else {}
    field |= {"default": None} if default else {}
    return json.dumps({"type": "record", "name": "Row", "fields": [{"name": "k", "type": "string"}, field]})


def test_a_spec_name_renamed_three_times_reads_each_writers_own_field():
    chain = [_schema("c2"), _schema("c2_r1", ["c2"]), _schema("c2_r2", ["c2_r1"]), _schema("c2_r3", ["c2_r2"], True)]
    by_id = versions({"t-value": dict(enumerate(chain, start=1))}, ["t-value"])
    got = {sid: read_path(v, "c2") for sid, v in by_id.items()}
    # v3's c2_r2 is what the latest's c2_r3 aliases: Avro reads it under the reader's name. v1's and v2's
    # fields no reader field aliases are kept as the writer has them, beside the latest's default.
    assert {sid: found[0] if found else None for sid, found in got.items()} == {
        1: "c2",
        2: "c2_r1",
        3: "c2_r3",
        4: "c2_r3",
    }
