"""The ``peftlife`` command: one module per command, put together here.

Each command module (``check``, ``mutants``, ``replay``, ``fuzz``,
``explore``, ``scenarios``, ``invariants``, ``diff``, ``bisect``) has an
``add_parser`` that adds it to the parser and a ``run`` that runs it;
``common`` holds what they share: the errors, the exit codes and the common
options. ``main`` parses, runs, and turns bad input into exit 2 with one line.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from rich.console import Console

import peftlife
from peftlife.doors import outputs
from peftlife.doors.cli import (
    bisect,
    check,
    diff,
    explore,
    fuzz,
    invariants,
    mutants,
    replay,
    scenarios,
)
from peftlife.doors.cli.common import (
    COMMON_OPTIONS,
    EXIT_BAD_INPUT,
    EXIT_FOUND,
    EXIT_HELD,
    EXIT_INTERRUPTED,
    BadInput,
    Help,
    Parser,
    common_table,
)

__all__ = ["COMMON_OPTIONS", "EXIT_BAD_INPUT", "EXIT_FOUND", "EXIT_HELD", "BadInput", "main"]

# The top-level --help's description.
DESCRIPTION = """\
The peftlife command: check a scheduler, run the mutant gate, replay a report.

Exit codes: 0 every example held (or, for mutants, the reference held and
every mutant was caught); 1 a counterexample was found; 2 bad input, with a
one-line message that says how to fix it.
"""
# In the order the top-level --help lists them.
COMMANDS = (check, mutants, replay, fuzz, explore, scenarios, invariants, diff, bisect)


def _parser() -> argparse.ArgumentParser:
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

    for module in COMMANDS:
        module.add_parser(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Let a SUT string name a module of the project the command runs in, as pytest does.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    # Off a terminal (CI logs, pipes) lines are kept long rather than wrapped at 80.
    # COLUMNS, when set, wins (rich reads it), so a table can be asked for at 80 columns.
    wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    console = Console(highlight=False, width=140 if wide else None)
    args: argparse.Namespace | None = None
    try:
        parser = _parser()
        if not (argv if argv is not None else sys.argv[1:]):
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
