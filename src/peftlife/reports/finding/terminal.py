"""The terminal story (rich): numbered steps, what changed, the violation against expectation."""

from __future__ import annotations

from typing import IO

from rich.console import Console
from rich.text import Text

from peftlife.reports.finding.case import Case
from peftlife.reports.finding.story import (
    Iteration,
    Row,
    story,
)
from peftlife.reports.format import Say, captured, say_world, sayer, seed_words
from peftlife.search.trace import Outcome

# ---- terminal ----


def render_terminal(case: Case, outcome: Outcome, console: Console) -> None:
    """Print the story; colours only on a terminal, none with NO_COLOR."""

    say = sayer(console)
    if outcome.violations:
        say(f"peftlife counterexample: {outcome.violations[0].invariant}", "bold red")
    else:
        say("peftlife replay: every invariant held", "bold green")
    say(f"SUT {case.sut} · scenario {case.scenario} · seed {seed_words(case.seed, case.profile)}")
    say_world(say, case.config, case.shrink_note)
    say("")
    for item in story(case, outcome):
        if isinstance(item, str):
            say(f"    … {item}", "dim")
            continue
        line = Text(item.label, style="bold")
        if item.request_id is not None:
            line.append(f"  → request {item.request_id}", style="cyan")
        if item.entry is not None:
            line.append(f"  → iteration {item.entry.snapshot.iteration}", style="cyan")
        say(line)
        if (view := item.view()) is not None:
            _print_iteration(say, view)
    say("")
    for v in outcome.violations:
        say(f"✗ {v.invariant}: {v.subject} at iteration {v.iteration}", "bold red")
        say(f"    expected  {v.expected}")
        say(f"    found     {v.found}", "red")


def _print_iteration(say: Say, view: Iteration) -> None:
    say(f"      scheduler output: {view.output}")
    if view.in_flight is not None:
        say(f"      {view.in_flight}", "magenta")
    for row in view.requests:
        say(_row_text(row))
    for text, mark in view.ended:
        say(_marked(Text(f"      {text}", style="cyan"), mark))
    for row in view.adapters:
        say(_row_text(row))
    for what, calls in view.calls:
        say(f"      {what} calls: {calls}")
    for message in view.errors:
        say(f"      engine: {message}", "red")


def _row_text(row: Row) -> Text:
    text = Text(f"      {row.name:<11}")
    if row.unchanged:
        text.append(" unchanged", style="dim")
    else:
        for key, value, changed in row.cells:
            text.append(f" {key} ")
            text.append(value, style="bold yellow" if changed else "")
    return _marked(text, row.mark)


def _marked(text: Text, mark: str | None) -> Text:
    """A line about a violation's subject, with the invariant that names it."""
    if mark is not None:
        text.append(f"  ← {mark}", style="bold red")
    return text


def terminal_text(case: Case, outcome: Outcome, width: int = 110) -> str:
    """The terminal rendering as plain text (what a log or a golden test sees)."""
    return captured(lambda console: render_terminal(case, outcome, console), width)


def print_report(case: Case, outcome: Outcome, file: IO[str] | None = None) -> None:
    """The terminal story on a console of its own (stdout by default)."""
    render_terminal(case, outcome, Console(file=file, highlight=False))
