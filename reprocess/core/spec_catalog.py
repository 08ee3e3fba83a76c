"""The specs of a folder: every ``*.yaml`` file of it, each pipeline name and target table once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from reprocess.core.errors import SpecError
from reprocess.core.spec import PipelineSpec
from reprocess.core.spec_parse import read_spec

# Points the DAG files and the ``reprocess`` command at another folder of specs (the tests use it).
PIPELINES_DIR_ENV: Final = "REPROCESS_PIPELINES_DIR"


def pipelines_dir() -> Path:
    """The folder of specs: ``REPROCESS_PIPELINES_DIR`` (the tests use it) or the repo's ``pipelines/``."""
    return Path(os.environ.get(PIPELINES_DIR_ENV) or Path(__file__).resolve().parents[2] / "pipelines")


def find_spec(name: str, directory: Path | None = None) -> PipelineSpec:
    """The spec named ``name``; the error lists the pipelines that exist."""
    specs = load_specs(directory or pipelines_dir())
    for spec in specs:
        if spec.name == name:
            return spec
    raise SpecError(
        f"no pipeline named {name!r} in {directory or pipelines_dir()} (have: {[s.name for s in specs]})", pipeline=name
    )


def load_specs(directory: Path) -> list[PipelineSpec]:
    """Every ``*.yaml`` spec in a folder, sorted by name; a name or a target table used twice is an
    error (a pipeline's ledger, ordering and deletion markers describe its own table alone)."""
    specs = [read_spec(p) for p in sorted(directory.glob("*.yaml"))]
    names: dict[str, str] = {}
    targets: dict[str, str] = {}
    for s in specs:
        if s.name in names:
            raise SpecError(
                f"{s.source_file}: field 'name': {s.name!r} is also used by {names[s.name]}", pipeline=s.name
            )
        if s.qualified_target in targets:
            raise SpecError(
                f"{s.source_file}: field 'target_table': {s.qualified_target} is also the target of "
                f"{targets[s.qualified_target]}; two pipelines cannot share a table. Give each its own target_table",
                pipeline=s.name,
            )
        names[s.name] = s.source_file
        targets[s.qualified_target] = s.source_file
    return specs
