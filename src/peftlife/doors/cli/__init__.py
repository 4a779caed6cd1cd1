"""The ``peftlife`` command: one module per command, put together here.

Each command module (``check``, ``mutants``, ``replay``, ``fuzz``,
``explore``, ``scenarios``, ``invariants``, ``diff``, ``bisect``) has an
``add_parser`` that adds it to the parser and a ``run`` that runs it;
``common`` holds what they share: the errors, the exit codes and the common
options. ``main`` reads the configuration table (``peftlife.doors.config``),
parses, runs, and turns bad input into exit 2 with one line.

The command modules are imported by ``main`` once the run's limits are in the
environment: the world reads its scheduler deadline as it is imported.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console

import peftlife
from peftlife.doors import config

__all__ = ["COMMON_OPTIONS", "EXIT_BAD_INPUT", "EXIT_FOUND", "EXIT_HELD", "BadInput", "main"]

# The top-level --help's description.
DESCRIPTION = """\
The peftlife command: check a scheduler, run the mutant gate, replay a report.

Exit codes: 0 every example held (or, for mutants, the reference held and
every mutant was caught); 1 a counterexample was found; 2 bad input, with a
one-line message that says how to fix it.

Options default to [tool.peftlife] in the nearest pyproject.toml (see
docs/configuration.md); the command line overrides it.
"""
# In the order the top-level --help lists them.
COMMAND_NAMES = (
    "check",
    "mutants",
    "replay",
    "fuzz",
    "explore",
    "scenarios",
    "invariants",
    "diff",
    "bisect",
)
# Options whose [tool.peftlife] key means something else to a command, left out there:
# replay's --sut replaces a report's own scheduler, explore's scenario is a --world
# report's own unless it is told another, and bisect tests what it is told, a --case
# or a --scenario.
NOT_FROM_TABLE = {("replay", "sut"), ("explore", "scenario"), ("bisect", "scenario")}


def __getattr__(name: str) -> Any:
    """The command modules and ``common``'s names, imported on first use."""
    if name in (*COMMAND_NAMES, "common"):
        return importlib.import_module(f"{__name__}.{name}")
    if name in __all__:
        return getattr(importlib.import_module(f"{__name__}.common"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _commands() -> list[ModuleType]:
    return [importlib.import_module(f"{__name__}.{name}") for name in COMMAND_NAMES]


def _parser(table: config.Config | None = None) -> argparse.ArgumentParser:
    from peftlife.doors.cli.common import Help, Parser, common_table

    defaults = (table or config.Config()).defaults()
    parser = Parser(
        prog="peftlife", description=DESCRIPTION, epilog=common_table(), formatter_class=Help
    )
    parser.add_argument("--version", action="version", version=f"peftlife {peftlife.__version__}")
    commands = parser.add_subparsers(
        dest="command", parser_class=Parser, required=True, metavar="COMMAND"
    )

    def command(name: str, text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(
            name, help=text, description=text, formatter_class=Help
        )
        sub.set_defaults(command_prog=sub.prog)  # whose --help an unknown option points at
        return sub

    for name, module in zip(COMMAND_NAMES, _commands(), strict=True):
        module.add_parser(command)
        sub = commands.choices[name]
        dests = {action.dest for action in sub._actions}
        sub.set_defaults(
            **{
                dest: value
                for dest, value in defaults.items()
                if dest in dests and (name, dest) not in NOT_FROM_TABLE
            }
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Let a SUT string name a module of the project the command runs in, as pytest does.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    # Off a terminal (CI logs, pipes) lines are kept long rather than wrapped at 80.
    # COLUMNS, when set, wins (rich reads it), so a table can be asked for at 80 columns.
    wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    console = Console(highlight=False, width=140 if wide else None)
    words = list(argv if argv is not None else sys.argv[1:])
    try:
        table = config.load(Path.cwd(), os.environ)
        limits = config.Limits.asked(words, table)
    except config.ConfigError as err:
        print(f"peftlife: error: {err}", file=sys.stderr)
        return 2
    if table.source is not None and str(table.source.parent) not in sys.path:
        # The table's SUT names a module of its project, from any folder below it.
        sys.path.insert(1, str(table.source.parent))
    with config.applied(limits):
        return _main(words, table, limits, console)


def _main(argv: list[str], table: config.Config, limits: config.Limits, console: Console) -> int:
    from peftlife.doors import outputs
    from peftlife.doors.cli.common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, BadInput, usable

    args: argparse.Namespace | None = None
    try:
        usable(table)
        _deadline_in_force(limits)
        parser = _parser(table)
        if not argv:
            raise BadInput(
                "choose a command: check, diff, bisect, mutants, explore, replay, fuzz, "
                "scenarios or invariants (see --help)"
            )
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            # argparse tells the top parser of them: the fix is in the command's own help.
            prog = getattr(args, "command_prog", parser.prog)
            raise BadInput(f"unrecognized arguments: {' '.join(unknown)} (see '{prog} --help')")
        code: int = args.run(args, console)
    except KeyboardInterrupt:
        # Ctrl-C: one line, never a traceback. Reports are written as findings are
        # made, so what was found before it is on disk already.
        print("peftlife: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (BadInput, outputs.CiOutputError) as err:
        if err.__cause__ is not None and getattr(args, "verbose", False):
            traceback.print_exception(err.__cause__, file=sys.stderr)
        print(f"peftlife: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return code


def _deadline_in_force(limits: config.Limits) -> None:
    """The world took the run's deadline as it was imported: a caller that imported it
    before calling ``main`` with another deadline is told, not held to the old one."""
    from peftlife.doors.cli.common import BadInput
    from peftlife.world import engine

    asked, held = limits.schedule_deadline, engine.DEFAULT_SCHEDULE_DEADLINE
    if asked is not None and asked != held:
        raise BadInput(
            f"this process imported peftlife's world with a {held:g} s scheduler deadline "
            f"before main was called, so {asked:g} s cannot apply: run the peftlife command, "
            f"or set {config.DEADLINE_ENV} before importing peftlife"
        )
