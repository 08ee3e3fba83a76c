"""The trigger forms and the command lines offer a closed set's values from its enum (issue 55):
no ``Param`` or ``add_argument`` spells a value of one of the package's enums (a default, an ``enum``
list, ``choices``) or lists several of them in its description or help.

The enums and their values are read from the source (ast), as are the calls, so the scan needs no
services and imports nothing of the product.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCANNED = ("reprocess", "plugins")
TEXT = ("description", "help", "title")  # prose; checked for listed values
NOT_VALUES = ("type", "section", "action", "metavar", "dest", "format")  # JSON Schema / argparse words


def enums(root: Path = REPO) -> dict[str, tuple[str, ...]]:
    """Every ``StrEnum`` of the package: its name and its values."""
    found = {}
    for path in (root / "reprocess").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith("StrEnum") for b in node.bases):
                found[node.name] = tuple(
                    s.value.value
                    for s in node.body
                    if isinstance(s, ast.Assign)
                    and isinstance(s.value, ast.Constant)
                    and isinstance(s.value.value, str)
                )
    return found


def _offers(call: ast.Call) -> bool:
    name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
    return name in ("Param", "add_argument")


def _spelled(value: ast.expr, known: dict[str, str]) -> str | None:
    items = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
    if items and all(isinstance(i, ast.Constant) and i.value in known for i in items):
        constants = [i.value for i in items if isinstance(i, ast.Constant)]
        return f"{known[constants[0]]} value(s) {constants} written by hand"
    return None


def _listed(text: str, all_enums: dict[str, tuple[str, ...]]) -> str | None:
    for name, members in all_enums.items():
        said = [v for v in members if re.search(rf"(^|[\s`(]){re.escape(v)}(?=[:,.)]|\s+or\b|$)", text)]
        if len(members) > 1 and len(said) > 1:
            return f"{name} values {said} listed by hand in prose"
    return None


def enum_values_written_by_hand(root: Path = REPO) -> Iterator[str]:
    all_enums = enums(root)
    known = {v: name for name, members in all_enums.items() for v in members}
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            options: dict[str, list[int]] = {}  # an enum's values spelled as ``--value`` options
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.Call) and _offers(node)):
                    continue
                given = [(None, a) for a in node.args] + [(k.arg, k.value) for k in node.keywords]
                for key, value in given:
                    if _is_option(node, value):
                        name = value.value.removeprefix("--") if isinstance(value, ast.Constant) else None
                        if name in known:
                            options.setdefault(known[name], []).append(node.lineno)
                        continue
                    if key in NOT_VALUES:
                        continue
                    if key in TEXT:
                        what = _listed(value.value, all_enums) if isinstance(value, ast.Constant) else None
                    else:
                        what = _spelled(value, known)
                    if what:
                        yield f"{path.relative_to(root)}:{node.lineno}: {what}"
            for enum_name, lines in options.items():
                if len(lines) > 1:
                    yield f"{path.relative_to(root)}:{lines[0]}: {enum_name} values written by hand as options"


def _is_option(call: ast.Call, value: ast.expr) -> bool:
    """``add_argument("--to-latest", ...)``: the positional arguments of add_argument name the option."""
    return isinstance(call.func, ast.Attribute) and any(value is a for a in call.args)


def test_forms_and_command_lines_take_values_from_their_enums() -> None:
    found = list(enum_values_written_by_hand())
    assert not found, "take these from the enum (reprocess.core.choices):\n" + "\n".join(found)


def test_the_scan_finds_values_written_by_hand(tmp_path: Path) -> None:
    (tmp_path / "reprocess").mkdir()
    (tmp_path / "plugins").mkdir()
    (tmp_path / "reprocess" / "example.py").write_text(
        "class Mode(enum.StrEnum):\n"
        "    MERGE = 'merge'\n"
        "    REBUILD = 'rebuild'\n"
        "a = Param('merge', type='string', enum=['merge', 'rebuild'], description='merge: upsert. rebuild: swap.')\n"
        "b = cmd.add_argument('--mode', default='merge', help='merge or rebuild')\n"
        "c = Param(Mode.MERGE.value, type='string', enum=values(Mode), description=described(MEANINGS))\n"
        "d = cmd.add_argument('--mode', default=Mode.MERGE.value, help=listed(Mode))\n"
        "e = to.add_argument('--merge', action='store_true')\n"
        "f = to.add_argument('--rebuild', action='store_true')\n"
        "g = cmd.add_argument('--json', action='store_true')\n"
    )
    found = sorted(line.split(": ", 1)[0] for line in enum_values_written_by_hand(tmp_path))
    assert found == ["reprocess/example.py:4"] * 3 + ["reprocess/example.py:5"] * 2 + ["reprocess/example.py:8"], found
