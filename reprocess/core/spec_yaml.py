"""A spec file's YAML, read strictly: a key given twice in one mapping is an error naming both lines.

PyYAML's ``safe_load`` keeps the last of two equal keys silently, so a ``max_dead_letter_ratio`` at
the top and again at the bottom of a file took effect without a word; every reader of a spec file
(the DAG factory, the Spark job, ``reprocess validate``) reads it through :func:`load_spec_yaml`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from reprocess.core.errors import SpecError


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a mapping holding the same key twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} is given twice, on line {seen[key]} and on line {line}; keep one "
                    "(YAML would silently take the last)",
                    key_node.start_mark,
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_spec_yaml(path: Path) -> object:
    """The YAML document of a spec file; a syntax error or a key given twice is a :class:`SpecError`."""
    try:
        return yaml.load(path.read_text(), Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from exc
