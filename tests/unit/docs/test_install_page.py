"""The install page (docs/getting-started/install.md, the README's seven steps in full) is what
tests/integration/install/test_readme_install.py does: the test's DAG file, commands and REST calls are read from
its source, so a step changed on one side and not the other fails here, without the install's venv."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "getting-started" / "install.md"
INSTALL_TEST = REPO / "tests" / "integration" / "install" / "test_readme_install.py"
# The team's Airflow before the install: the test makes its metadata DB, the page assumes one.
AIRFLOW_OWN_SETUP = {"airflow db migrate"}


def _calls(name: str) -> list[ast.Call]:
    """The install test's calls of the function or method ``name``, in source order."""
    tree = ast.parse(INSTALL_TEST.read_text())
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and name in (getattr(node.func, "id", None), getattr(node.func, "attr", None))
    ]
    return sorted(calls, key=lambda call: (call.lineno, call.col_offset))


def _command_line(words: list[ast.expr]) -> str:
    """The words the test spells out, up to the first value it computes or the first option's value:
    ``airflow connections add spark_default --conn-type spark_connect`` (the page has placeholders after)."""
    line: list[str] = []
    for word in words:
        if not (isinstance(word, ast.Constant) and isinstance(word.value, str)):
            break
        line.append(word.value)
        if len(line) >= 2 and line[-2].startswith("--"):
            break
    return " ".join(line)


def commands_the_install_test_runs() -> list[str]:
    """``_run(env, work, "reprocess", "init")`` -> ``reprocess init``; ``spawn(["airflow", "standalone"], …)`` too."""
    ran = [_command_line(call.args[2:]) for call in _calls("_run")]
    spawned = [_command_line(call.args[0].elts) for call in _calls("spawn") if isinstance(call.args[0], ast.List)]
    return [line for line in ran + spawned if line not in AIRFLOW_OWN_SETUP]


def test_the_install_test_runs_the_commands_the_install_page_gives() -> None:
    commands = commands_the_install_test_runs()
    assert {"reprocess init", "reprocess validate", "reprocess spark-connect start", "airflow standalone"} <= set(
        commands
    ), commands
    page = PAGE.read_text()
    assert [line for line in commands if line not in page] == [], "on the page, the test runs it otherwise"


def test_the_install_test_writes_the_dag_file_the_page_and_the_readme_give() -> None:
    (written,) = [
        call.args[0].value
        for call in _calls("write_text")
        if isinstance(call.args[0], ast.Constant) and "dags_from_specs" in str(call.args[0].value)
    ]
    for doc in (PAGE, REPO / "README.md"):
        (block,) = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)
        block = "\n".join(re.sub(r"\s*#.*$", "", line.strip()) for line in block.strip().splitlines()) + "\n"
        assert block == written, f"{doc.relative_to(REPO)}: the DAG file differs from the one the install test writes"


def test_the_install_test_unpauses_and_triggers_with_the_bodies_the_page_sends() -> None:
    bodies = [ast.literal_eval(call.args[4]) for call in _calls("_call") if len(call.args) > 4]
    assert {"is_paused": False} in bodies, bodies
    page = PAGE.read_text()
    for body in bodies:
        assert f"-d '{json.dumps(body)}'" in page, body
