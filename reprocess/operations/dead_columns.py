"""Columns a sample of records never fills (``reprocess validate``'s online check, after the
decode and the spec's transform): a mapped path or header no sampled record holds, and an optional
column NULL in every decoded row."""

from __future__ import annotations

from collections.abc import Sequence

from reprocess.core.sample import SampleRecord, SampleResult, header_census, value_census
from reprocess.core.spec import PipelineSpec
from reprocess.formats import decoder
from reprocess.operations.findings import Finding, Severity


def dead_columns(spec: PipelineSpec, records: Sequence[SampleRecord], result: SampleResult) -> list[Finding]:
    """Columns the sample never fills: a mapped path or header that none of the records holds (with
    the closest one they do hold), and a non-required column NULL in every decoded row. Neither
    fails a run, but every row it writes gets NULL there, and a later fix of the path re-derives
    every row (the path is part of the fingerprint)."""
    src = spec.source_file
    values, headers = value_census(records, decoder(spec).sampled_row(spec)), header_census(records)
    out, dead = [], set()
    # A column the transform sets has values whatever its path; when the function was not run, it is not judged.
    unknown = set(spec.transform_columns if result.transform_not_run else ())
    filled = {c.name for c in spec.columns if result.rows and result.missing.get(c.name, 0) < result.rows}
    for c in spec.columns:
        if c.name in unknown or c.name in filled:
            continue
        header = c.path.startswith("$headers.")
        census = headers if header else values if c.from_value else None
        prefix = "$headers." if header else ""
        path = c.path.removeprefix(prefix)
        if census is None or not census.records or census.counts.get(path):
            continue
        dead.add(c.name)
        close = census.closest(path)
        out.append(
            Finding(
                src,
                "path",
                Severity.WARNING,
                f"column {c.name!r}: `{c.path}` found in 0 of {census.records} records"
                + (f"; did you mean `{prefix}{close}`?" if close else ""),
                f"point columns.{c.name}.path at a {'header' if header else 'field'} the records hold: "
                "as it is, the column is NULL in every row",
            )
        )
    for c in spec.columns:
        if c.required or c.name in dead or c.name in unknown or c.name in filled or not result.rows:
            continue
        source = f"expr {c.expr!r}" if c.expr else f"`{c.path}`"
        out.append(
            Finding(
                src,
                "path",
                Severity.WARNING,
                f"column {c.name!r} ({source}) is NULL in all {result.rows} decoded rows",
                f"check that columns.{c.name} reads the field that holds the value (the records have "
                "the path but never a value in it), or drop the column",
            )
        )
    return out
