"""Render docs/cli.md, the command reference, from the ``reprocess`` command's own parsers.

The parser of reprocess/cli/main.py is the one source: every command (this package's and those an
installed package adds, as the dev stack adds ``demo`` and ``produce``), its summary, description,
usage and arguments come from it, and its examples from the command module's ``EXAMPLES``.
tests/unit/cli/test_cli_reference.py fails when docs/cli.md and the parsers drift, and parses every
example; `python scripts/cli_reference.py` (in the project venv) rewrites the file.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from reprocess.cli import main as cli
from reprocess.cli.common import EXIT_CODES

REPO: Final = Path(__file__).resolve().parent.parent
OUTPUT: Final = REPO / "docs" / "cli.md"
COMMAND: Final = "python scripts/cli_reference.py"
# Usage lines wrapped at a fixed width, whatever the terminal that renders the page.
WIDTH: Final = 100
# How every command finds what it works on: the install page says it in full.
INTRO: Final = (
    "Every command reads the connections as Airflow does (secrets backend, `AIRFLOW_CONN_*` environment, "
    "the metadata DB of its `AIRFLOW_HOME`; see [Connections](getting-started/install.md#connections); in a "
    "checkout `source scripts/env.sh` sets the environment forms for the embedded services) and the same "
    "folder of specs (`[reprocess] pipelines_dir`). A missing connection is an error naming it and the "
    "command that adds it; a service that does not answer names the connection and the setting it was "
    "reached by (exit 3; with `--json` the same error as a JSON object)."
)


def subcommands(root: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """name -> parser of each command, in the order ``reprocess --help`` lists them."""
    (sub,) = (a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def module_of(name: str) -> cli.Command:
    """The command module that made the subcommand ``name``."""
    return next(c for c in cli.commands() if name == c.NAME)


def usage(parser: argparse.ArgumentParser) -> str:
    """argparse's usage line at :data:`WIDTH` columns."""
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=WIDTH)
    return parser.format_usage().strip()


def argument_name(action: argparse.Action) -> str:
    """How an argument is written: ``pipeline``, ``{start,status,stop}``, ``--sample SAMPLE``.

    Examples
    --------
    >>> p = argparse.ArgumentParser()
    >>> argument_name(p.add_argument("--to-offset", metavar="N"))
    '--to-offset N'
    >>> argument_name(p.add_argument("--json", action="store_true"))
    '--json'
    >>> argument_name(p.add_argument("action", choices=("start", "stop")))
    '{start,stop}'
    """
    if not action.option_strings:
        return action.metavar if isinstance(action.metavar, str) else _choices(action) or action.dest
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar if isinstance(action.metavar, str) else _choices(action) or action.dest.upper()
    return f"{names} {metavar}"


def _choices(action: argparse.Action) -> str:
    return "{" + ",".join(map(str, action.choices)) + "}" if action.choices else ""


def argument_text(action: argparse.Action) -> str:
    """Its help, what the command line may leave out, and the default when the help does not say it.

    Examples
    --------
    >>> p = argparse.ArgumentParser()
    >>> argument_text(p.add_argument("--max-gap", type=int, default=10, help="join ranges this close"))
    'join ranges this close (default: `10`)'
    >>> argument_text(p.add_argument("specs", nargs="*", help="spec files"))
    'spec files (any number; optional)'
    """
    text = (action.help or "").replace("|", "\\|")
    if not action.option_strings and action.nargs in ("?", "*"):
        text += " (any number; optional)" if action.nargs == "*" else " (optional)"
    if action.required and action.option_strings:
        text += " (required)"
    shown = action.default not in (None, False, True, argparse.SUPPRESS)
    if shown and "default" not in text.lower():
        text += f" (default: `{action.default}`)"
    return text


def arguments(parser: argparse.ArgumentParser) -> Iterator[str]:
    """The arguments' table (positionals first, ``--help`` left out), then the mutually exclusive sets."""
    actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    if not actions:
        return
    yield "| argument | meaning |"
    yield "|---|---|"
    for action in sorted(actions, key=lambda a: bool(a.option_strings)):
        yield f"| `{argument_name(action)}` | {argument_text(action)} |"
    yield ""
    for group in parser._mutually_exclusive_groups:
        names = ", ".join(f"`{a.option_strings[0]}`" for a in group._group_actions)
        yield f"{'Exactly' if group.required else 'At most'} one of {names}."
        yield ""


def command_section(name: str, parser: argparse.ArgumentParser) -> Iterator[str]:
    """One command: its description, usage, arguments and examples."""
    module = module_of(name)
    yield f"## `reprocess {name}`"
    yield ""
    if module.__name__.startswith("devstack."):
        yield "Added by the checkout's dev stack (`reprocess-devstack`); the wheel does not have it."
        yield ""
    about = module.DESCRIPTION or module.SUMMARY
    yield about[0].upper() + about[1:]
    yield ""
    yield "```text"
    yield usage(parser)
    yield "```"
    yield ""
    yield from arguments(parser)
    yield "Examples:"
    yield ""
    yield "```bash"
    for what, line in module.EXAMPLES:
        yield f"# {what}"
        yield line
    yield "```"
    yield ""


def render() -> str:
    """docs/cli.md's text."""
    root = cli.parser()
    commands = subcommands(root)
    lines = [
        "# Command reference",
        "",
        f"<!-- Generated from the reprocess command's parsers (reprocess/cli/) by `{COMMAND}`; do not edit. -->",
        "",
        f"{root.description} Each command has `--help`.",
        "",
        "```text",
        usage(root),
        "```",
        "",
        INTRO,
        "",
        "| command | what it does |",
        "|---|---|",
        *(f"| [`{name}`](#reprocess-{name}) | {module_of(name).SUMMARY} |" for name in commands),
        "",
        "## Exit codes",
        "",
        EXIT_CODES[0].upper() + EXIT_CODES[1:] + ".",
        "",
    ]
    for name, parser in commands.items():
        lines.extend(command_section(name, parser))
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
