"""``peftlife replay``: replay saved reports deterministically, on their scheduler or another.

Exit codes: 0 every invariant held (a fix holds); 1 a case fails again; 2 bad input.
Several reports (a glob such as ``reports/mutant_*.json``) are each read and checked
before any is replayed, then replayed in turn.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import attrs
from rich.console import Console

from peftlife import reports, sut
from peftlife.doors.cli.common import (
    EXIT_FOUND,
    EXIT_HELD,
    BadInput,
    NewCommand,
    Repeated,
    common_options,
    single,
    validate,
)
from peftlife.search.scenarios import ScenarioError


def add_parser(command: NewCommand) -> None:
    replay = command("replay", "replay a saved report deterministically")
    replay.add_argument(
        "reports",
        nargs="+",
        metavar="report",
        help="a report's .json file; several (a glob) are replayed in turn, exit 1 if any fails",
    )
    replay.add_argument(
        "--sut", action=Repeated, default=None, help="replay against this scheduler instead"
    )
    common_options(replay, "replay", quiet={"help": "only the exit code"})
    replay.set_defaults(run=run)


def run(args: argparse.Namespace, console: Console) -> int:
    single(args.sut, "--sut", "replay", "replay on each scheduler in turn")
    instead = args.sut[0] if args.sut else None
    cases = []
    # Each SUT once, however many reports name it.
    resolved: dict[str, sut.Resolved] = {}
    for path in args.reports:
        try:
            case = reports.load_json(Path(path))
        except reports.ReportError as err:
            raise BadInput(str(err)) from err
        try:  # a user's scenario file it names must still read, as its search's did
            reports.scenario_of(case)
        except ScenarioError as err:
            raise BadInput(f"{path}: {err}") from err
        spec = instead or case.sut
        if spec not in resolved:
            resolved[spec] = validate(spec)
        cases.append(attrs.evolve(case, sut=spec))
    held = True
    for path, case in zip(args.reports, cases, strict=True):
        outcome = reports.replay(case, resolved[case.sut])
        held &= outcome.held
        if not args.quiet:
            if len(cases) > 1:
                console.print(f"{path}:", highlight=False, soft_wrap=True)
            reports.render_terminal(case, outcome, console)
    return EXIT_HELD if held else EXIT_FOUND
