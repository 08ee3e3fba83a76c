"""The ``reprocess`` command's entry point: one parser, a subcommand per command module, errors as exit codes.

The commands are this package's modules and those that installed packages add through the
``reprocess.commands`` entry point group (name = module; the dev stack adds ``demo`` and
``produce``), listed first as they were before the split.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from importlib.metadata import entry_points
from typing import Final, Protocol, cast

from confluent_kafka import KafkaException
from sqlalchemy.exc import OperationalError

from reprocess.cli import apply, audit, init, plan, redrive, reset, spark_connect, status, validate
from reprocess.cli.common import EXIT_CODES, EXIT_FOUND, EXIT_UNREACHABLE, unreachable
from reprocess.core.errors import ReprocessError, SettingError

COMMANDS_GROUP: Final = "reprocess.commands"


class Command(Protocol):
    """A command module: its name, its help, its examples, its arguments and what it does (an exit code)."""

    @property
    def NAME(self) -> str: ...

    @property
    def SUMMARY(self) -> str: ...

    @property
    def DESCRIPTION(self) -> str: ...

    @property
    def EXAMPLES(self) -> tuple[tuple[str, str], ...]:
        """(what it does, the command line) pairs: docs/cli.md shows them, its test parses them."""
        ...

    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def commands() -> list[Command]:
    """The installed packages' commands, then this package's own."""
    added = [cast(Command, ep.load()) for ep in entry_points(group=COMMANDS_GROUP)]
    return [*added, init, status, reset, redrive, validate, spark_connect, plan, apply, audit]


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="reprocess",
        description="Exactly-once Kafka -> PostgreSQL reprocessing: inspect, move and check pipelines.",
        epilog=EXIT_CODES,
    )
    sub = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands():
        cmd = sub.add_parser(
            command.NAME, help=command.SUMMARY, description=command.DESCRIPTION or command.SUMMARY, epilog=EXIT_CODES
        )
        command.configure(cmd)
        cmd.set_defaults(handler=command.run)  # not `run`: redrive has a --run
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from reprocess.airflow.hooks import read_metastore  # Airflow loads only once the arguments parse

    read_metastore()
    try:
        return int(args.handler(args))
    except (OperationalError, KafkaException) as exc:
        return failed(args, unreachable(exc), EXIT_UNREACHABLE)
    except SettingError as exc:
        return failed(args, exc, EXIT_UNREACHABLE)
    except ReprocessError as exc:
        return failed(args, exc, EXIT_FOUND)


def failed(args: argparse.Namespace, exc: ReprocessError, code: int) -> int:
    """One line on stderr; with ``--json`` also the error as JSON on stdout, for a caller that parses it."""
    print(f"reprocess {args.command}: {exc}", file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps({"error": {"kind": type(exc).__name__, "message": str(exc), "exit_code": code}}, indent=2))
    return code
