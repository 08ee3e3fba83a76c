"""Reading specs, the one way callers do: a mapping (:func:`parse_spec`), a file (:func:`read_spec`)
or a folder (:func:`read_folder`: every ``*.yaml`` file of it, each pipeline name and target table once).

The parser is core's (:mod:`reprocess.core.spec_parse`, format-neutral); the format's part comes from
the registered decoders (:func:`reprocess.formats.rules_of`), passed in here. That is why reading a
spec sits in formats rather than in core: core imports nothing of formats.

A broken file is that file's fault alone: :func:`read_folder` keeps the specs that load next to
the error of each file that does not, so one typo never hides the other pipelines (the DAG
factory turns each broken file into a DAG that says what is wrong).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from reprocess.core import spec_parse
from reprocess.core.errors import SpecError
from reprocess.core.spec import PipelineSpec
from reprocess.core.spec_yaml import load_spec_yaml
from reprocess.formats import rules_of

# Points the DAG files and the ``reprocess`` command at another folder of specs (the tests use it);
# it wins over Airflow's ``[reprocess] pipelines_dir`` (reprocess.airflow.settings reads both).
PIPELINES_DIR_ENV: Final = "REPROCESS_PIPELINES_DIR"


def parse_spec(raw: object, source: str = "<spec>") -> PipelineSpec:
    """The spec a YAML mapping declares (:func:`reprocess.formats.specs.parse_spec` with every
    format's rules); ``source`` names it in the errors (the file's path).

    Examples
    --------
    >>> parse_spec({"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text"}}).format.value
    'json'
    """
    return spec_parse.parse_spec(raw, rules_of, source)


def read_spec(path: Path) -> PipelineSpec:
    """The spec in a YAML file."""
    return parse_spec(load_spec_yaml(path), source=str(path))


@dataclass(frozen=True, slots=True)
class SpecFolder:
    """The specs of a folder that load, sorted by file name, and the error of each file that does not."""

    specs: list[PipelineSpec]
    broken: dict[Path, SpecError]


def find_spec(name: str, directory: Path) -> PipelineSpec:
    """The spec named ``name``; the error lists the pipelines that exist."""
    specs = load_specs(directory)
    for spec in specs:
        if spec.name == name:
            return spec
    raise SpecError(f"no pipeline named {name!r} in {directory} (have: {[s.name for s in specs]})", pipeline=name)


def load_specs(directory: Path) -> list[PipelineSpec]:
    """Every ``*.yaml`` spec in a folder, sorted by file name; the first broken file's error is raised."""
    folder = read_folder(directory)
    for error in folder.broken.values():
        raise error
    return folder.specs


def read_folder(directory: Path) -> SpecFolder:
    """Every ``*.yaml`` file of a folder, sorted by name: its spec, or its error when it does not load.

    A name or a target table used twice is an error of the later file (a pipeline's ledger, ordering
    and deletion markers describe its own table alone); the earlier file keeps its spec.
    """
    specs: list[PipelineSpec] = []
    broken: dict[Path, SpecError] = {}
    names: dict[str, str] = {}
    targets: dict[str, str] = {}
    for path in sorted(directory.glob("*.yaml")):
        try:
            s = read_spec(path)
        except SpecError as exc:
            broken[path] = exc
            continue
        if s.name in names:
            broken[path] = SpecError(
                f"{s.source_file}: field 'name': {s.name!r} is also used by {names[s.name]}", pipeline=s.name
            )
        elif s.qualified_target in targets:
            broken[path] = SpecError(
                f"{s.source_file}: field 'target_table': {s.qualified_target} is also the target of "
                f"{targets[s.qualified_target]}; two pipelines cannot share a table. Give each its own target_table",
                pipeline=s.name,
            )
        else:
            specs.append(s)
            names[s.name] = s.source_file
            targets[s.qualified_target] = s.source_file
    return SpecFolder(specs, broken)
