"""A divergence in the terminal: the agreed iterations once, the diverging one side by side."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from peftlife.reports.divergence.case import DiffCase
from peftlife.reports.divergence.story import (
    agreed,
    cells_text,
    headline,
    side_rows,
    story,
    verdict_text,
    verdicts,
)
from peftlife.reports.format import Say, captured, say_world, sayer, seed_words
from peftlife.search.diff import Paired, PairOutcome


def render_terminal(dcase: DiffCase, outcome: PairOutcome, console: Console) -> None:
    """Print the divergence: the agreed iterations once, the diverging one side by side."""

    say = sayer(console)
    case = dcase.case
    divergence = outcome.divergence
    say(headline(dcase, outcome), "bold red" if divergence else "bold green")
    say(f"A {dcase.a}")
    say(f"B {dcase.b}")
    say(f"scenario {case.scenario} · seed {seed_words(case.seed, case.profile)}")
    say(f"compared: {dcase.compared}", "dim")
    say_world(say, case.config, case.shrink_note)
    say("")
    for line in story(dcase, outcome):
        if line.number is None and line.paired is None:
            say(f"    … {line.text}", "dim")
            continue
        head = Text(f"{line.number:>3} {line.text}" if line.number else f"    {line.text}")
        head.stylize("bold")
        if line.request_id is not None:
            head.append(f"  → request {line.request_id}", style="cyan")
        p = line.paired
        if p is None:
            say(head)
            continue
        if p.diverges:
            head.append(f"  → iteration {p.iteration}: A and B differ", style="bold red")
            say(head)
            console.print(_side_table(p))
        else:
            head.append(f"  → iteration {p.iteration}, the same on both sides", style="cyan")
            say(head)
            _print_agreed(say, p)
    say("")
    if divergence is not None:
        say(
            f"≠ A and B diverge at iteration {divergence.iteration}: {cells_text(divergence)}",
            "bold",
        )
    say("invariants (a divergence is no verdict on either side):")
    for side, spec, violation in verdicts(dcase, outcome):
        style = "red" if violation is not None else "green"
        say(f"  {side} {spec}: {verdict_text(outcome, violation)}", style)


def _print_agreed(say: Say, p: Paired) -> None:
    for part in agreed(p):
        if part.request_id is not None:
            say(f"      {part.what:<11} {part.text}")
        else:
            say(f"      {part.what}: {part.text}")


def _side_table(p: Paired) -> Table:
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, show_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("A", overflow="fold", ratio=1)
    table.add_column("B", overflow="fold", ratio=1)
    for row in side_rows(p):
        style = "bold red" if row.differs else ""
        table.add_row(Text(row.marked, style=style), row.a, row.b)
    return table


def terminal_text(dcase: DiffCase, outcome: PairOutcome, width: int = 110) -> str:
    """The terminal rendering as plain text (what a log or a test sees)."""
    return captured(lambda console: render_terminal(dcase, outcome, console), width)
