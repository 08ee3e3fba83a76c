"""``reprocess validate`` and the DAG factory give the same verdict on every spec file: a corpus of
broken specs (unknown keys at every level, wrong types, bad paths, bad ordering and tombstone
combinations, bad crons, bad transforms, a key given twice) is refused by both, each refused file
becomes its ``reprocess_<file>_broken`` DAG carrying validate's message, and valid ones build DAGs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reprocess.airflow.factory import dags_from_specs
from reprocess.formats.specs import PIPELINES_DIR_ENV
from reprocess.operations.validate import validate_offline

BASE = """\
name: {name}
topics: [t_{name}]
key: [id]
columns:
  id: {type: text, required: true}
  v: {type: bigint, required: true}
  amount: numeric(12,2)
  status: text
{extra}"""

FN = "transform: shop.fixes:fix\ntransform_version: 1\n"  # a transform (not imported offline)
COLUMNS = "columns:\n  id: {type: text, required: true}\n"


def _appended(extra: str) -> str:
    """The base spec with ``extra`` appended (top-level keys)."""
    return BASE.replace("{extra}", extra)


def _columns(lines: str) -> str:
    """A spec whose columns are ``id`` and then ``lines``."""
    return "name: {name}\ntopics: [t_{name}]\nkey: [id]\n" + COLUMNS + lines


# case -> (the spec file, with {name} for the case's name; a phrase validate's error says)
CORPUS: dict[str, tuple[str, str]] = {
    # unknown keys at every level
    "top_level_typo": (_appended("tpoics: [x]\n"), "tpoics"),
    "column_key_typo": (_columns("  v: {type: bigint, requried: true}\n"), "requried"),
    "column_path_typo": (_columns("  v: {type: bigint, pth: a.b}\n"), "pth"),
    "ordering_key_typo": (_appended("ordering: {mode: column, colum: v}\n"), "colum"),
    "reconcile_key_typo": (_appended("reconcile: {crn: '0 3 * * *'}\n"), "crn"),
    # wrong types and values
    "batch_size_text": (_appended("batch_size: big\n"), "batch_size"),
    "batch_size_zero": (_appended("batch_size: 0\n"), "batch_size"),
    "ratio_above_one": (_appended("max_dead_letter_ratio: 2\n"), "max_dead_letter_ratio"),
    "ratio_as_percent": (_appended("max_dead_letter_ratio: 5%\n"), "max_dead_letter_ratio"),
    "tags_number": (_appended("tags: 5\n"), "tags"),
    "auto_heal_text": (_appended("reconcile: {auto_heal: maybe}\n"), "auto_heal"),
    "format_unknown": (_appended("format: xml\n"), "format"),
    "encoding_on_json": (_appended("encoding: avro\n"), "encoding"),
    "column_type_unknown": (_columns("  v: money\n"), "money"),
    "required_as_text": (_columns("  v: {type: bigint, required: 'yes'}\n"), "required"),
    "lineage_column_name": (_columns("  _kafka_x: text\n"), "_kafka"),
    "no_columns": ("name: {name}\ntopics: [t]\nkey: [id]\ncolumns: {}\n", "columns"),
    "key_not_a_column": ("name: {name}\ntopics: [t]\nkey: [nope]\n" + COLUMNS, "key"),
    "empty_key": ("name: {name}\ntopics: [t]\nkey: []\n" + COLUMNS, "key"),
    "topics_not_a_list": ("name: {name}\ntopics: 5\nkey: [id]\n" + COLUMNS, "topics"),
    "name_not_identifier": ("name: Orders-1\ntopics: [t]\nkey: [id]\n" + COLUMNS, "name"),
    "reserved_target_schema": (_appended("target_table: reprocess.x\n"), "target_table"),
    "target_not_identifier": (_appended("target_table: public.Orders-1\n"), "target_table"),
    # bad paths
    "path_double_dot": (_columns("  v: {type: bigint, path: 'a..b'}\n"), "path"),
    "path_unknown_part": (_columns("  v: {type: bigint, path: '$nope'}\n"), "path"),
    "path_and_expr": (_columns("  v: {type: bigint, path: a, expr: 'a + 1'}\n"), "expr"),
    # ordering and tombstones
    "tombstones_unknown": (_appended("tombstones: purge\n"), "tombstones"),
    "ordering_unknown": (_appended("ordering: random\n"), "ordering"),
    "ordering_column_missing": (_appended("ordering: {mode: column, column: nope}\n"), "ordering"),
    "ordering_column_optional": (_appended("ordering: {mode: column, column: status}\n"), "status"),
    "delete_under_column_ordering": (
        _appended("ordering: {mode: column, column: v}\ntombstones: delete\n"), "tombstones"
    ),
    # schedules
    "schedule_words": (_appended("schedule: every hour\n"), "schedule"),
    "schedule_number": (_appended("schedule: 5\n"), "schedule"),
    "schedule_six_fields": (_appended("schedule: '0 0 * * * *'\n"), "schedule"),
    "reconcile_cron_out_of_range": (_appended("reconcile: {cron: '61 * * * *'}\n"), "cron"),
    "min_interval_without_new_records": (_appended("min_interval_seconds: 30\n"), "min_interval_seconds"),
    # transforms
    "where_syntax": (_appended("where: 'status = '\n"), "where"),
    "expr_syntax": (_columns("  v: {type: bigint, expr: 'a +* 2'}\n"), "expr"),
    "expr_reads_expr": (_columns("  a: {type: bigint, expr: 'x + 1'}\n  v: {type: bigint, expr: 'a + 1'}\n"), "expr"),
    "transform_not_module_function": (_appended("transform: nomodule\n"), "transform"),
    "transform_derives_unknown_column": (_appended(FN + "transform_derives: [statsu]\n"), "did you mean 'status'"),
    "transform_derives_ordering_column": (
        _appended("ordering: {mode: column, column: v}\n" + FN + "transform_derives: [status, v]\n"),
        "the ordering column",
    ),
    "transform_derives_key_column": (_appended(FN + "transform_derives: [id]\n"), "a key column"),
    "transform_derives_not_a_list": (_appended(FN + "transform_derives: status\n"), "transform_derives"),
    "transform_derives_without_transform": (_appended("transform_derives: [status]\n"), "only meaningful"),
    # the file itself
    "ratio_given_twice": (
        _appended("max_dead_letter_ratio: 0.05\nbatch_size: 10\nmax_dead_letter_ratio: 0.5\n"), "twice"
    ),
    "yaml_syntax": (_appended("tags: [unclosed\n"), "YAML"),
}  # fmt: skip


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 30


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_validate_and_the_dag_factory_refuse_the_same_broken_spec(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PIPELINES_DIR_ENV, raising=False)  # it would win over the folder given
    text, phrase = CORPUS[case]
    text = text.replace("{name}", case)
    spec_file = tmp_path / f"{case}.yaml"
    spec_file.write_text(text)
    report = validate_offline([spec_file])
    assert report.errors, f"validate accepted {case}:\n{text}"
    assert any(phrase in f"{f.problem} {f.fix}" for f in report.errors), [f.problem for f in report.errors]
    dags = dags_from_specs(tmp_path)
    broken = f"reprocess_{case}_broken"
    assert list(dags) == [broken], f"the DAG factory built {sorted(dags)} from {case}"
    doc = dags[broken].doc_md or ""
    assert any(f.problem.split(";")[0] in doc for f in report.errors), ([f.problem for f in report.errors], doc)


VALID = (
    "",
    "ordering: {mode: column, column: v}\nschedule: '0 * * * *'\n",
    "reconcile: {cron: '@daily', auto_heal: true}\nschedule: on_new_records\n",
    "ordering: {mode: column, column: v}\n" + FN + "transform_derives: [status, amount]\n",
)


@pytest.mark.parametrize("extra", VALID)
def test_validate_and_the_dag_factory_accept_the_same_valid_spec(
    extra: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PIPELINES_DIR_ENV, raising=False)
    spec_file = tmp_path / "fine.yaml"
    spec_file.write_text(_appended(extra).replace("{name}", "fine"))
    assert not validate_offline([spec_file]).errors
    dags = dags_from_specs(tmp_path)
    assert "reprocess_fine_broken" not in dags
    assert "reprocess_fine_backfill" in dags
