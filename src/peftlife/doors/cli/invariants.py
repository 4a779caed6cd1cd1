"""``peftlife invariants``: list the invariants, each with its meaning, where it is checked
and, with ``--sources``, where each rule comes from (the table of docs/invariants.md).

Both are made from the checker's registry (``checker.registry``).
"""

from __future__ import annotations

import argparse

from rich import box
from rich.console import Console
from rich.table import Table

from peftlife.checker.registry import REGISTRY
from peftlife.doors.cli.common import EXIT_HELD, NewCommand, print_table


def add_parser(command: NewCommand) -> None:
    parser = command("invariants", "list the invariants, each with its meaning")
    parser.add_argument(
        "--sources",
        action="store_true",
        help="print where each rule comes from, as the Markdown table of docs/invariants.md",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, console: Console) -> int:
    if args.sources:
        print(sources_table(), end="")
        return EXIT_HELD
    table = Table(title="the invariants (--exclude-invariant NAME)", box=box.SIMPLE_HEAD)
    table.add_column("#", overflow="fold")
    table.add_column("invariant", overflow="fold")
    table.add_column("checked in", overflow="fold", ratio=1)
    table.add_column("what it says", overflow="fold", ratio=2)
    for i in REGISTRY:
        table.add_row(i.number, i.name, i.scope.text.replace("`", ""), i.meaning)
    print_table(console, table)
    return EXIT_HELD


def sources_table() -> str:
    """Every invariant with where it is checked and its sources, as a Markdown table.

    >>> print(sources_table().splitlines()[3])
    | 2 | `exclusive_ownership` | every world | the C++ `PeftCacheManager` |
    """
    lines = ["| # | invariant | checked in | source |", "|---|---|---|---|"]
    lines += [
        f"| {i.number} | `{i.name}` | {i.scope.text} | {'; '.join(map(str, i.sources))} |"
        for i in REGISTRY
    ]
    return "\n".join(lines) + "\n"
