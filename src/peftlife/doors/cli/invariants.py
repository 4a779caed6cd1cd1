"""``peftlife invariants``: list the invariants, each with its meaning."""

from __future__ import annotations

import argparse

from rich import box
from rich.console import Console
from rich.table import Table

from peftlife.checker import catalogue
from peftlife.doors.cli.common import EXIT_HELD, NewCommand


def add_parser(command: NewCommand) -> None:
    command("invariants", "list the invariants, each with its meaning").set_defaults(run=run)


def run(args: argparse.Namespace, console: Console) -> int:
    table = Table(title="the invariants (--exclude-invariant NAME)", box=box.SIMPLE_HEAD)
    table.add_column("invariant", overflow="fold")
    table.add_column("what it says", overflow="fold")
    for name, meaning in catalogue.meanings().items():
        table.add_row(name, meaning)
    console.print(table)
    return EXIT_HELD
