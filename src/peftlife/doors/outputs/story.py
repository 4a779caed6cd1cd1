"""The terminal's story of a finding, and the lines a run that held ends with.

``Teller`` tells a finding (a counterexample, or a divergence of ``diff``):
its story on the terminal unless quiet, its reports written to the report
directory. Reports that cannot be written lose nothing: the story is then told
whatever ``-q`` says, a line says where writing failed, and no paths come back.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs
from rich.console import Console

from peftlife import reports
from peftlife.doors.outputs.records import Finding
from peftlife.doors.outputs.unchecked import note
from peftlife.reports import divergence as diff_reports
from peftlife.search import diff
from peftlife.search.hunt import SearchResult
from peftlife.search.scenarios import Scenario
from peftlife.world.words import count


@attrs.frozen
class Teller:
    """Where a command tells its findings: its console, whether quiet, its report folder."""

    console: Console
    quiet: bool
    report_dir: Path

    def case(
        self, case: reports.Case, outcome: reports.Outcome | None = None
    ) -> tuple[reports.Outcome, dict[str, Path]]:
        """Replay a case (unless its ``outcome`` is given), tell its story, write its
        reports; return the outcome and the reports' paths."""
        told = outcome or reports.replay(case)
        paths = self._tell(
            lambda console: reports.render_terminal(case, told, console),
            lambda folder: reports.write(case, told, folder),
            "counterexample",
        )
        return told, paths

    def divergence(
        self, dcase: diff_reports.DiffCase, outcome: diff.PairOutcome
    ) -> dict[str, Path]:
        """Tell a divergence side by side and write its reports; their paths."""
        return self._tell(
            lambda console: diff_reports.render_terminal(dcase, outcome, console),
            lambda folder: diff_reports.write(dcase, outcome, folder),
            "divergence",
        )

    def _tell(
        self,
        render: Callable[[Console], None],
        write: Callable[[Path], dict[str, Path]],
        what: str,
    ) -> dict[str, Path]:
        if not self.quiet:
            render(self.console)
            self.console.print()
        try:
            return write(self.report_dir)
        except OSError as err:
            if self.quiet:
                render(self.console)
            print(
                f"peftlife: could not write reports to {str(self.report_dir)!r} "
                f"({err.strerror}); the {what} above is the whole finding",
                file=sys.stderr,
            )
            return {}


def for_ci(
    case: reports.Case,
    outcome: reports.Outcome,
    paths: dict[str, Path],
    invariant: str,
    known: bool = False,
) -> tuple[Finding, str, str]:
    """A told case as the CI outputs carry it: the finding, its story, its Markdown."""
    report = str(paths["json"]) if paths else ""
    finding = Finding(invariant, reports.trace_hash(case), report, known)
    story = reports.terminal_text(case, outcome, width=100)
    return finding, story, reports.render_markdown(case, outcome)


def trace_length(case: reports.Case) -> str:
    """How long a told case is, and whether that is after a shrink (a case whose
    scheduler took its process down is the example as the search met it)."""
    actions = count(len(case.actions), "action")
    if not case.shrunk:
        return f"not shrunk ({actions} as the search met them)"
    if case.shrink_note:
        return f"shrunk to {actions} ({case.shrink_note})"
    return f"shrunk to {actions}"


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


def note_unchecked(searched: Iterable[Scenario], console: Console) -> None:
    """Say once that invariant 14 went unchecked, if a scenario searched tells the
    scheduler nothing in flight (a finding's story says it of its own world)."""
    if said := note(searched):
        console.print(f"note: {said}")
