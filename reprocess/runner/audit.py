"""A whole-table audit carried out here (``reprocess audit``, the audit DAG's tasks): snapshot the audited
ranges, have the window check's Spark side stage the newest record per key of the key ranges whose checksums
differ from the target's (checksum bisection, :mod:`reprocess.core.checksums`), and judge them in PostgreSQL
(:mod:`reprocess.operations.audit`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine

from reprocess.core.spec import PipelineSpec
from reprocess.core.window_stages import ReadWindow
from reprocess.operations.audit import AuditRanges, AuditReport, judge_audit, snapshot_audit
from reprocess.runner.window import WindowReader


def audit_here(
    engine: Engine,
    kafka: Mapping[str, Any],
    spec: PipelineSpec,
    reader: WindowReader,
    audit_id: str,
    *,
    heal: bool = False,
    keep: bool = True,
) -> tuple[AuditRanges, AuditReport]:
    """Snapshot, stage and judge one audit (with ``heal``, heal what it finds); returns its ranges and report."""
    audited = snapshot_audit(engine, kafka, spec)
    reader.read_window(spec, ReadWindow(audit_id, tuple(audited.ranges), bisect=True))
    return audited, judge_audit(engine, spec, audit_id, audited, heal=heal, keep=keep)
