"""Which paths a sample holds, and the warnings ``validate`` derives from them: a mapped path or
header in none of the records names the closest one they hold; a non-required column NULL in every
row is named too. Pure: the records are built here, the decoder's verdict is given."""

from __future__ import annotations

import json

from reprocess.core.sample import PathCensus, SampleRecord, SampleResult, header_census, value_census
from reprocess.formats import decoder
from reprocess.formats.specs import parse_spec
from reprocess.operations.dead_columns import dead_columns
from reprocess.operations.findings import Severity

READINGS = [{"id": f"s{n}", "reading": {"temp_c": 20 + n, "humidity": None}} for n in range(3)]


def _spec(**columns: object) -> object:
    return parse_spec({"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text", **columns}})


def _records(values: list[object], headers: tuple[tuple[str, bytes | None], ...] = ()) -> list[SampleRecord]:
    return [SampleRecord("t", 0, n, 0, None, json.dumps(v).encode(), headers) for n, v in enumerate(values)]


def _census(spec, records):  # as validate takes it: the format's decoder says where a value's row is
    return value_census(records, decoder(spec).sampled_row(spec))


def test_a_json_sample_holds_every_nested_field_path_once_per_record():
    census = _census(_spec(), [*_records(READINGS), SampleRecord("t", 0, 9, 0, None, b"not json")])

    assert census == PathCensus(3, {"id": 3, "reading": 3, "reading.humidity": 3, "reading.temp_c": 3})


def test_a_debezium_sample_holds_the_row_paths_of_after_and_of_a_delete_before():
    spec = parse_spec({"name": "p", "format": "debezium", "topics": ["t"], "key": ["id"], "columns": {"id": "integer"}})
    events = [{"payload": {"op": "c", "after": {"id": 1, "v": "a"}}}, {"op": "d", "before": {"id": 1}, "after": None}]

    assert _census(spec, _records(events)) == PathCensus(2, {"id": 2, "v": 1})


def test_an_avro_sample_is_not_parsed_on_the_driver():
    spec = parse_spec({"name": "p", "format": "avro", "topics": ["t"], "key": ["id"], "columns": {"id": "text"}})

    assert _census(spec, _records(READINGS)) is None


def test_header_names_are_counted_once_per_record():
    records = _records(READINGS[:2], (("source", b"a"), ("source", b"b")))

    assert header_census(records) == PathCensus(2, {"source": 2})


def test_a_typod_path_is_found_in_no_record_and_the_closest_path_is_named():
    spec = _spec(temp_c={"type": "real", "path": "reading.tmp_c"})
    result = SampleResult(3, {}, {"temp_c": 3}, rows=3)

    (finding,) = dead_columns(spec, _records(READINGS), result)

    assert finding.severity is Severity.WARNING
    assert finding.problem == "column 'temp_c': `reading.tmp_c` found in 0 of 3 records; did you mean `reading.temp_c`?"
    assert "columns.temp_c.path" in finding.fix


def test_a_typod_header_names_the_closest_header():
    spec = _spec(src={"type": "text", "path": "$headers.sorce"})
    result = SampleResult(3, {}, {"src": 3}, rows=3)

    (finding,) = dead_columns(spec, _records(READINGS, (("source", b"a"),)), result)

    assert finding.problem == "column 'src': `$headers.sorce` found in 0 of 3 records; did you mean `$headers.source`?"


def test_a_path_with_nothing_close_is_reported_without_a_suggestion():
    spec = _spec(x={"type": "text", "path": "zzz"})

    (finding,) = dead_columns(spec, _records(READINGS), SampleResult(3, {}, {"x": 3}, rows=3))

    assert finding.problem == "column 'x': `zzz` found in 0 of 3 records"


def test_a_present_path_never_valued_is_a_null_warning_unless_required():
    spec = _spec(humidity={"type": "real", "path": "reading.humidity"}, temp_c={"type": "real",
                 "path": "reading.temp_c"})  # fmt: skip
    result = SampleResult(3, {}, {"humidity": 3, "temp_c": 1}, rows=3)

    (finding,) = dead_columns(spec, _records(READINGS), result)

    assert finding.problem == "column 'humidity' (`reading.humidity`) is NULL in all 3 decoded rows"
    required = _spec(humidity={"type": "real", "path": "reading.humidity", "required": True})
    assert dead_columns(required, _records(READINGS), result) == []


def test_a_correct_spec_gets_no_path_warning():
    spec = _spec(temp_c={"type": "real", "path": "reading.temp_c"})

    assert dead_columns(spec, _records(READINGS), SampleResult(3, {}, {}, rows=3)) == []
