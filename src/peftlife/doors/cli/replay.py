"""``peftlife replay``: replay a saved report deterministically, on its scheduler or another.

Exit codes: 0 every invariant held (a fix holds); 1 the case fails again; 2 bad input.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import attrs
from rich.console import Console

from peftlife import reports
from peftlife.doors.cli.common import (
    EXIT_FOUND,
    EXIT_HELD,
    BadInput,
    NewCommand,
    common_options,
    validate,
)


def add_parser(command: NewCommand) -> None:
    replay = command("replay", "replay a saved report deterministically")
    replay.add_argument("report", help="a report's .json file")
    replay.add_argument("--sut", default=None, help="replay against this scheduler instead")
    common_options(replay, "replay", quiet={"help": "only the exit code"})
    replay.set_defaults(run=run)


def run(args: argparse.Namespace, console: Console) -> int:
    try:
        case = reports.load_json(Path(args.report))
    except reports.ReportError as err:
        raise BadInput(str(err)) from err
    spec = args.sut or case.sut
    validate(spec)
    outcome = reports.replay(case, sut=spec)
    if spec != case.sut:
        case = attrs.evolve(case, sut=spec)
    if not args.quiet:
        reports.render_terminal(case, outcome, console)
    return EXIT_HELD if outcome.held else EXIT_FOUND
