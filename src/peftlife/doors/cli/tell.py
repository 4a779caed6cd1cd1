"""How the commands that search tell what they found, or what a pass never reached."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console

from peftlife import reports
from peftlife.doors import ci_outputs
from peftlife.search import scenarios
from peftlife.search.hunt import SearchResult


def tell_case(
    case: reports.Case,
    args: argparse.Namespace,
    console: Console,
    outcome: reports.Outcome | None = None,
) -> tuple[reports.Outcome, dict[str, Path]]:
    """Replay a case (unless its ``outcome`` is given), tell its story (unless quiet),
    write its reports; return the outcome and the reports' paths.

    Reports that cannot be written lose nothing: the story is then told whatever
    ``-q`` says, a line says where writing failed, and no paths come back.
    """
    outcome = outcome or reports.replay(case)
    if not args.quiet:
        reports.render_terminal(case, outcome, console)
        console.print()
    try:
        return outcome, reports.write(case, outcome, Path(args.report_dir))
    except OSError as err:
        if args.quiet:
            reports.render_terminal(case, outcome, console)
        print(
            f"peftlife: could not write reports to {args.report_dir!r} ({err.strerror}); "
            "the counterexample above is the whole finding",
            file=sys.stderr,
        )
        return outcome, {}


def for_ci(
    case: reports.Case,
    outcome: reports.Outcome,
    paths: dict[str, Path],
    invariant: str,
    known: bool = False,
) -> tuple[ci_outputs.Finding, str, str]:
    """A told case as the CI outputs carry it: the finding, its story, its Markdown."""
    report = str(paths["json"]) if paths else ""
    finding = ci_outputs.Finding(invariant, reports.trace_hash(case), report, known)
    story = reports.terminal_text(case, outcome, width=100)
    return finding, story, reports.render_markdown(case, outcome)


def written(paths: dict[str, Path]) -> str:
    """The end of a verdict line: where the reports went, if they were written."""
    return "; reports: " + ", ".join(str(p) for p in paths.values()) if paths else ""


def warn_unreached(result: SearchResult, console: Console) -> None:
    """Say which witnesses a run never reached: a pass that never got there proved little."""
    if result.unreached:
        console.print(
            f"warning: never reached {', '.join(result.unreached)}; "
            "a longer profile or another scenario (--scenario all) may reach them"
        )


def note_unchecked(scenarios: Iterable[str], console: Console) -> None:
    """Say once that invariant 14 went unchecked, if a scenario searched tells the
    scheduler nothing in flight (a finding's story says it of its own world)."""
    if note := ci_outputs.unchecked_note(scenarios):
        console.print(f"note: {note}")


def note_sut_world(sut: str, names: list[str], console: Console) -> None:
    """Say, before searching, where the SUT's world is not its scenarios' (a catalogue
    mutant carries the world its defect lives in) or where it cannot be caught."""
    if note := scenarios.sut_note(sut, names):
        console.print(f"note: {note}", soft_wrap=True)
