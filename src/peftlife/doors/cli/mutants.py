"""``peftlife mutants``: the mutant gate, run and shown as a table (or the catalogue listed).

Exit codes: 0 the reference held and every mutant was caught on an invariant
its catalogue entry accepts; 1 the gate failed; 2 bad input. The rules are the
gate's (``peftlife.search.gate``); this module runs it with a progress display
and writes its table where asked.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from peftlife import reports
from peftlife.doors import outputs
from peftlife.doors.cli.common import (
    EXIT_FOUND,
    EXIT_HELD,
    NewCommand,
    common_options,
    outputs_writable,
    positive,
    print_table,
    shrink_timeout_option,
    targets,
    writable,
)
from peftlife.doors.outputs.progress import progress
from peftlife.doors.outputs.records import Replay
from peftlife.doors.outputs.story import note_unchecked
from peftlife.search import gate, profiles
from peftlife.sut.mutants import CATALOGUE


def add_parser(command: NewCommand) -> None:
    mutants = command("mutants", "the reference and every mutant of the catalogue")
    mutants.add_argument("--list", action="store_true", help="list the catalogue and stop")
    mutants.add_argument("--json", default=None, help="also write the table as JSON to this file")
    mutants.add_argument(
        "--jobs", type=positive, default=os.cpu_count() or 1, help="worker processes"
    )
    mutants.add_argument("--no-shrink", action="store_true", help="skip shrinking (no step counts)")
    shrink_timeout_option(mutants)
    outputs.add_options(mutants)
    common_options(mutants, "mutants", quiet={"help": "no progress"})
    mutants.set_defaults(run=run)


def run(args: argparse.Namespace, console: Console) -> int:
    if args.list:
        return _list_mutants(console)
    if args.json:
        writable(str(Path(args.json).parent), "--json's directory")
    outputs_writable(args)
    # A random profile's gate searches with a seed of its own choosing, told at the end.
    seed = profiles.run_seed(profiles.get(args.profile), args.seed)
    runs = gate.plan(
        args.profile,
        shrink=not args.no_shrink,
        shrink_timeout=args.shrink_timeout,
        seed=seed,
        replay_saved=args.seed is None,
    )
    show = not args.quiet
    with progress(console, "mutant gate", len(runs), show=show, unit="runs") as emit:
        table = gate.run_gate(runs, jobs=args.jobs, emit=emit)
    print_table(console, gate_table([row.cells() for row in table.rows]))
    console.print(table.verdict)
    if seed is not None:
        console.print(f"seed {seed}: rerun with {rerun_command(args.profile, seed)}")
    note_unchecked(table.searched, console)
    if args.json:
        path = Path(args.json)
        try:
            gate.write(table, reports.report_folder(path.parent) / path.name)
            reports.write_index(path.parent)  # the report directory's index shows the gate
        except OSError as err:
            # The table above is the gate's verdict; its exit code stands.
            print(
                f"peftlife: could not write --json {args.json!r} ({err.strerror}); "
                "the table above is the whole result",
                file=sys.stderr,
            )
    replay = None if seed is None else Replay(seed, rerun_command(args.profile, seed))
    outputs.write(outputs.for_gate(table, args.profile, replay), targets(args))
    return EXIT_HELD if table.ok else EXIT_FOUND


def rerun_command(profile: str, seed: int) -> str:
    """The command that runs the same gate again.

    >>> rerun_command("peftlife-dev", 7)
    'peftlife mutants --profile peftlife-dev --seed 7'
    """
    return f"peftlife mutants --profile {profile} --seed {seed}"


def gate_table(cells: list[list[str]]) -> Table:
    """The gate as a table that reads at 80 columns: long names fold, no column is dropped."""
    table = Table(title="peftlife mutant gate", title_justify="left", box=box.SIMPLE_HEAD)
    for column in gate.HEADER[:4]:
        table.add_column(column, overflow="fold")
    for column in gate.HEADER[4:]:
        table.add_column(column, justify="right", no_wrap=True)
    for row in cells:
        table.add_row(*row)
    return table


def _list_mutants(console: Console) -> int:
    table = Table(title="the mutant catalogue (sut: mutant:NAME)", box=box.SIMPLE_HEAD)
    table.add_column("mutant", overflow="fold")
    table.add_column("defect", overflow="fold")
    table.add_column("caught by", overflow="fold")
    for m in CATALOGUE:
        table.add_row(m.name, m.description, ", ".join(m.acceptable))
    print_table(console, table)
    return EXIT_HELD
