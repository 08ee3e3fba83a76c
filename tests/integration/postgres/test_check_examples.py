"""A check's examples are few and small however many wide rows differ (review V finding 11/12).

Reconciliation's value check and key check name up to a few example rows per partition. They are
picked before they are aggregated, and a wide value is cut: a difference in every row of a 6 kB
column must not aggregate every value (past PostgreSQL's 1 GB array limit the check would fail and
record no gap), nor put whole values into ``reconciliations.detail``.

The target and the check's stage are written by hand (no Spark) with the product's stage writer.
"""

from __future__ import annotations

import json

import psycopg2
from sqlalchemy import text

from reprocess.postgres.compare import differing_rows_sql
from reprocess.postgres.db import libpq_url
from reprocess.postgres.key_checks import key_checks_sql
from reprocess.postgres.stage import drop_stage, stage_identifier
from reprocess.postgres.target import target_identifier
from tests.support.staging import Record, stage_and_commit, text_spec, write_stage

ROWS, WIDTH = 300, 6_000
MOST_EXAMPLES, EXAMPLE_BYTES = 5, 1_000  # what a verdict's detail may hold per partition


def test_value_check_over_many_wide_differing_rows_keeps_few_bounded_examples(engine, db_url, unique_name):
    spec = text_spec(unique_name)
    stored = [Record(0, o, {"id": f"k{o:04}", "s": f"{o}" + "x" * WIDTH}) for o in range(ROWS)]
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", stored)
    with engine.begin() as conn:  # a person's UPDATE of every row: the same length, other values
        conn.execute(text(f"UPDATE {spec.qualified_target} SET s = replace(s, 'x', 'y')"))
    check = f"{unique_name}-check"  # the window's stage: what each row's record derives
    write_stage(db_url, spec, check, stored)
    pg = psycopg2.connect(libpq_url(db_url))
    try:
        with pg, pg.cursor() as cur:
            cur.execute(differing_rows_sql(spec, stage_identifier(spec, check), target_identifier(spec)))
            (value_gap,) = cur.fetchall()
            cur.execute(key_checks_sql(spec, stage_identifier(spec, check)))
            (key_verdict,) = cur.fetchall()
            drop_stage(pg, spec, check)
    finally:
        pg.close()
    rows_differing, examples = value_gap[2], value_gap[-1]
    assert rows_differing == ROWS
    assert 0 < len(examples) <= MOST_EXAMPLES
    sizes = [len(json.dumps(e)) for e in examples]
    print(sizes, examples[0][:2])
    assert max(sizes) <= EXAMPLE_BYTES, sizes
    assert [e[0] for e in examples] == sorted(e[0] for e in examples) and examples[0][:2] == ["k0000", "s"]
    assert key_verdict[2:5] == (ROWS, 0, 0)  # every key there, with the record's lineage


def test_the_derived_vs_stored_comparison_runs_over_the_whole_table_on_key_alone_for_the_audit(
    engine, db_url, unique_name
):
    """Issue 57's audit compares the newest record of every key of the log with every row, whatever
    record a row carries (a row rewritten by SQL with other lineage too): the value check's own
    formulation, matched on the key alone and counted in one group."""
    spec = text_spec(unique_name)
    stored = [Record(0, o, {"id": f"k{o}", "s": f"v{o}"}) for o in range(6)]
    stage_and_commit(engine, db_url, spec, f"{unique_name}-1", stored)
    with engine.begin() as conn:  # k1: another value, as a person's UPDATE; k2: another value AND lineage
        conn.execute(text(f"UPDATE {spec.qualified_target} SET s = 'edited' WHERE id = 'k1'"))
        conn.execute(text(f"UPDATE {spec.qualified_target} SET s = 'moved', _kafka_offset = 99 WHERE id = 'k2'"))
    log = f"{unique_name}-log"  # the whole log's newest record per key, as an audit stages it
    write_stage(db_url, spec, log, stored)
    pg = psycopg2.connect(libpq_url(db_url))
    try:
        with pg, pg.cursor() as cur:
            stage = stage_identifier(spec, log)
            cur.execute(differing_rows_sql(spec, stage, target_identifier(spec), match=spec.key, group=()))
            (whole,) = cur.fetchall()
            cur.execute(differing_rows_sql(spec, stage, target_identifier(spec)))  # the window check's: key + lineage
            window = cur.fetchall()
            drop_stage(pg, spec, log)
    finally:
        pg.close()
    rows, by_column, first, last, examples = whole
    assert (rows, by_column, first, last) == (2, 2, 1, 2)
    assert [(e[0], e[2], e[3]) for e in examples] == [("k1", "edited", "v1"), ("k2", "moved", "v2")]
    assert [r[2] for r in window] == [1]  # on lineage, k2's row is not k2's record's: the key check's (stale)
