"""docs/cli.md is the command's reference: generated from its parsers, complete, and its examples parse."""

from __future__ import annotations

import argparse
import shlex

import pytest

from reprocess.cli import main as cli
from scripts import cli_reference


def test_the_cli_reference_is_what_the_parsers_generate():
    written = cli_reference.OUTPUT.read_text()
    assert written == cli_reference.render(), (
        f"docs/cli.md differs from the reprocess command's parsers: run `{cli_reference.COMMAND}` and commit it"
    )


def test_every_command_has_a_section_with_its_options_and_an_example():
    reference = cli_reference.OUTPUT.read_text()
    names = [command.NAME for command in cli.commands()]
    assert {"init", "status", "reset", "redrive", "validate", "spark-connect", "plan", "apply"} <= set(names)
    for name, parser in cli_reference.subcommands(cli.parser()).items():
        section = reference.split(f"## `reprocess {name}`\n", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue  # every command has --help; the page says so once
            for option in action.option_strings:
                assert f"`{option}" in section or f", {option}" in section, (name, option)
        assert cli_reference.module_of(name).EXAMPLES, f"reprocess {name}: no EXAMPLES in its module"


@pytest.mark.parametrize(
    "line", [line for command in cli.commands() for _, line in command.EXAMPLES], ids=lambda line: line[:60]
)
def test_every_example_is_a_command_line_the_parser_accepts(line: str):
    program, *argv = shlex.split(line)
    assert program == "reprocess", line
    cli.parser().parse_args(argv)  # argparse exits 2 on a command line it refuses
