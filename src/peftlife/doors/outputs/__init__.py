"""What a command leaves behind, one module per kind of output.

A command ends with one record of its run (``records``); from it are written
``summary.json`` in the report directory (``summary_json``: ``check``,
``fuzz``, ``explore``, ``bisect``), the Markdown appended to ``--summary`` or
``$GITHUB_STEP_SUMMARY`` (``step_summary``) and the JUnit XML of
``--junit-xml`` (``junit``). While it runs, its events go to the terminal's
progress bar or heartbeat (``progress``), and a finding's story to the
terminal (``story``). What a run did not check is asked of one place
(``unchecked``).

Where the files go is a ``Targets``, read from the command line once by the
door; ``refuse_unwritable`` refuses bad ones before the search. When the run
concludes, ``write`` emits its ``CiOutputs`` to the handler of each file.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import attrs

from peftlife import reports
from peftlife.doors.outputs import junit, step_summary, summary_json
from peftlife.doors.outputs.records import (
    BisectSummary,
    CampaignSummary,
    DiffSummary,
    ExplorationSummary,
    Replay,
    RunSummary,
)
from peftlife.search import events, gate


class CiOutputError(Exception):
    """A step summary or JUnit file that cannot be written, found before the run: exit 2."""


def add_options(parser: argparse.ArgumentParser, junit_cases: str = "") -> None:
    """``--junit-xml`` and ``--summary``; ``junit_cases`` says what its cases are."""
    parser.add_argument(
        "--junit-xml",
        metavar="FILE",
        default=None,
        help="also write JUnit XML to this file" + (f": {junit_cases}" if junit_cases else ""),
    )
    parser.add_argument(
        "--summary",
        metavar="FILE",
        default=None,
        help="append a Markdown summary to this file (default: $GITHUB_STEP_SUMMARY when set)",
    )


@attrs.frozen
class Targets:
    """Where a command's CI outputs go: the JUnit file, the step summary, the report folder."""

    junit_xml: str | None = None
    # None: $GITHUB_STEP_SUMMARY when set, else nowhere.
    summary: str | None = None
    report_dir: Path = Path("peftlife-reports")

    @property
    def step_summary(self) -> str | None:
        return self.summary or os.environ.get("GITHUB_STEP_SUMMARY")


@attrs.frozen
class CiOutputs:
    """What one run of a command tells CI."""

    # The command: the JUnit suite is "peftlife COMMAND".
    command: str
    # The step summary.
    markdown: str
    cases: tuple[junit.JunitCase, ...]
    # Written as summary.json in the report directory (check's, which a baseline reads).
    summary: summary_json.Summary | None = None


def refuse_unwritable(targets: Targets) -> None:
    """Refuse, before the run, a step summary or JUnit file that cannot be written.

    Bad input (``CiOutputError``, exit 2) as a report directory is: found after the
    search, it would turn a found bug's exit 1 into a 2.
    """
    where = {
        "--junit-xml": targets.junit_xml,
        "--summary": targets.summary,
        "$GITHUB_STEP_SUMMARY": None if targets.summary else targets.step_summary,
    }
    for option, target in where.items():
        if target and (problem := reports.unwritable(Path(target), option, "file")):
            raise CiOutputError(problem)


def write(outputs: CiOutputs, targets: Targets) -> None:
    """Write what CI reads of one run, where ``targets`` say: the run's conclusion,
    emitted to each file's writer."""
    events.Events(*writers(targets))(events.RunConcluded(outputs))


def writers(targets: Targets) -> list[events.Handler]:
    """The handlers that write a run's files when it concludes: summary.json (of a
    command that has one), the step summary, the JUnit file."""
    return [_SummaryJson(targets), _StepSummary(targets), _Junit(targets)]


class _Writer:
    """Writes one file of a run when it concludes.

    Called after the run: a file that cannot be written (``refuse_unwritable`` let it
    through, then it went away, or no check could tell: ``/proc`` refuses even root)
    costs one line on stderr that names it and the OS's reason, the other files are
    written still, and the run's verdict stands; a found bug still exits 1.
    """

    # What the file is, for the line that says it was not written.
    what = ""

    def __init__(self, targets: Targets) -> None:
        self.targets = targets

    def __call__(self, event: events.Event) -> None:
        if not (isinstance(event, events.RunConcluded) and isinstance(event.record, CiOutputs)):
            return
        try:
            self.write(event.record)
        except OSError as err:
            where = f" ({err.strerror}: {err.filename})" if err.filename else f" ({err.strerror})"
            print(
                f"peftlife: could not write {self.path()}, {self.what}{where}; the run's "
                "verdict stands",
                file=sys.stderr,
            )

    def path(self) -> str | Path | None:
        raise NotImplementedError

    def write(self, outputs: CiOutputs) -> None:
        raise NotImplementedError


class _SummaryJson(_Writer):
    what = "the run's summary"

    def path(self) -> Path:
        return self.targets.report_dir / "summary.json"

    def write(self, outputs: CiOutputs) -> None:
        if outputs.summary is not None:
            summary_json.write(outputs.summary, self.path())


class _StepSummary(_Writer):
    what = "the step summary"

    def path(self) -> str | None:
        return self.targets.step_summary

    def write(self, outputs: CiOutputs) -> None:
        step_summary.append(outputs.markdown, self.targets.summary)


class _Junit(_Writer):
    what = "the JUnit XML"

    def path(self) -> str | None:
        return self.targets.junit_xml

    def write(self, outputs: CiOutputs) -> None:
        if self.targets.junit_xml:
            suite = f"peftlife {outputs.command}"
            junit.write(Path(self.targets.junit_xml), suite, outputs.cases)


# ---- each command's outputs, from its one record ----


def for_check(summary: RunSummary, stories: Sequence[str], details: str) -> CiOutputs:
    """A check's outputs: its summary, its findings' Markdown reports (``details``) and
    stories (one per run, in the runs' order: a SUT that held has none)."""
    cases = junit.run_cases(summary, stories)
    return CiOutputs(summary.command, step_summary.run(summary, details), cases, summary)


def for_gate(table: gate.Gate, profile: str, replay: Replay | None = None) -> CiOutputs:
    """The mutant gate's outputs: its table, and one JUnit case per row; a random
    gate's (``replay``) with its seed and the command that runs it again."""
    markdown = step_summary.gate_table(table, profile)
    if replay is not None:
        markdown += f"\n- {replay.said}: rerun with `{replay.command}`\n"
    return CiOutputs("mutants", markdown, junit.gate_cases(table, replay))


def for_campaign(summary: CampaignSummary) -> CiOutputs:
    """A campaign's outputs: a failed JUnit case per defect and per crash, else one passing."""
    markdown = step_summary.campaign(summary)
    return CiOutputs("fuzz", markdown, junit.campaign_cases(summary), summary)


def for_exploration(summary: ExplorationSummary, story: str, details: str) -> CiOutputs:
    """An exploration's outputs: one JUnit case, failed by its counterexample if any."""
    markdown = step_summary.exploration(summary, details)
    return CiOutputs("explore", markdown, junit.exploration_cases(summary, story), summary)


def for_bisection(summary: BisectSummary, story: str, details: str) -> CiOutputs:
    """A bisection's outputs: a JUnit case per commit probed, the first bad one's story."""
    markdown = step_summary.bisection(summary, details)
    return CiOutputs("bisect", markdown, junit.bisect_cases(summary, story), summary)


def for_diff(summary: DiffSummary, story: str = "", details: str = "") -> CiOutputs:
    """A diff's outputs: one JUnit case, failed by a divergence; its report as the summary."""
    markdown = step_summary.diff(summary, details)
    return CiOutputs("diff", markdown, junit.diff_cases(summary, story))
