"""``peftlife scenarios``: list the shipped scenario profiles, each with what it stresses,
and the groups ``--scenario`` also takes, each with the scenarios it holds."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from peftlife.doors.cli.common import EXIT_HELD, NewCommand, print_table
from peftlife.search import scenarios


def add_parser(command: NewCommand) -> None:
    command("scenarios", "list the shipped scenario profiles and their groups").set_defaults(
        run=run
    )


def run(args: argparse.Namespace, console: Console) -> int:
    table = Table(title="shipped scenario profiles (--scenario NAME, or a path to a .toml)")
    table.add_column("name")
    table.add_column("what it stresses")
    for name in scenarios.shipped_names():
        table.add_row(name, scenarios.load(name).description)
    print_table(console, table)
    groups = Table(title="groups (--scenario NAME: every scenario it holds takes turns)")
    groups.add_column("group")
    groups.add_column("what it holds")
    for name, (meaning, _) in scenarios.GROUPS.items():
        groups.add_row(name, f"{meaning}: {', '.join(scenarios.group(name))}")
    print_table(console, groups)
    return EXIT_HELD
