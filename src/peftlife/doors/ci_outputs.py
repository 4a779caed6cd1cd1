"""What a command leaves for CI: the run summary, the step summary and the JUnit file.

``check``, ``mutants`` and ``diff`` each end by calling ``write`` with their
``CiOutputs``: ``summary.json`` in the report directory (``check``), the
Markdown appended to ``--summary`` or ``$GITHUB_STEP_SUMMARY``, and the JUnit
XML of ``--junit-xml``. ``add_options`` gives a command those two options.

Every ``check`` has a summary, a passing one included: the examples searched
out of the budget, the executor iterations, the scheduler paths reached (the
labels the coverage test asserts) and a warning for each path never reached,
plus each finding with its invariant, trace hash and report; a run that searched
a scenario whose scheduler is told nothing in flight (``inflight_ids =
"empty"``) says once that invariant 14 was not checked there
(``unchecked_note``). The JSON's
``findings`` list is also a valid ``--baseline`` file. The JUnit file has one
test case per scenario searched, per row of the mutant gate, or per diff; a
finding's invariant, trace and report ride along as properties, as the pytest
plugin records them, so CI systems (GitHub, GitLab, Jenkins) show them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from peftlife.reports.story import UNCHECKED_WHEN_EMPTY
from peftlife.search import gate, scenarios
from peftlife.search.machine import COVERAGE_LABELS, unreached


class CiOutputError(Exception):
    """A step summary or JUnit file that cannot be written: bad input, exit 2."""


# ---- what a command tells CI, and where it goes ----


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--junit-xml`` and ``--summary``, read by ``write``."""
    parser.add_argument(
        "--junit-xml", metavar="FILE", default=None, help="also write JUnit XML to this file"
    )
    parser.add_argument(
        "--summary",
        metavar="FILE",
        default=None,
        help="append a Markdown summary to this file (default: $GITHUB_STEP_SUMMARY when set)",
    )


@attrs.frozen
class CiOutputs:
    """What one run of a command tells CI."""

    # The command: the JUnit suite is "peftlife COMMAND".
    command: str
    # The step summary.
    markdown: str
    cases: tuple[JunitCase, ...]
    # Written as summary.json in the report directory (check's, which a baseline reads).
    summary: RunSummary | None = None


def write(outputs: CiOutputs, args: argparse.Namespace) -> None:
    """Write what CI reads of one run, where the command's options say.

    A summary.json that cannot be written costs only a line on stderr: the run's
    verdict stands, and a found bug is never an exit 2. A step summary or JUnit
    file that cannot be written is bad input (``CiOutputError``).
    """
    if outputs.summary is not None:
        path = Path(args.report_dir) / "summary.json"
        try:
            write_json(outputs.summary, path)
        except OSError as err:
            print(f"peftlife: could not write {path} ({err.strerror})", file=sys.stderr)
    try:
        append_markdown(outputs.markdown, args.summary)
        if args.junit_xml:
            write_junit(Path(args.junit_xml), f"peftlife {outputs.command}", outputs.cases)
    except OSError as err:
        raise CiOutputError(f"cannot write {err.filename!r}: {err.strerror}") from err


def for_check(summary: RunSummary, story: str, details: str) -> CiOutputs:
    """A check's outputs: its summary, its finding's Markdown report (``details``) and story."""
    (run,) = summary.runs
    return CiOutputs("check", summary.markdown(details), (_check_case(run, story),), summary)


def for_gate(table: gate.Gate, profile: str) -> CiOutputs:
    """The mutant gate's outputs: its table, and one JUnit case per row."""
    title = f"peftlife mutants: {'passed' if table.ok else 'FAILED'} ({profile} profile)"
    cells = [row.cells() for row in table.rows]
    markdown = table_markdown(title, gate.HEADER, cells) + f"\n{table.verdict}\n"
    if note := unchecked_note(row.scenario for row in table.rows):
        markdown += f"\n- note: {note}\n"
    return CiOutputs("mutants", markdown, tuple(_gate_case(row) for row in table.rows))


# ---- what a run did not check ----


def unchecked_scenarios(names: Iterable[str]) -> list[str]:
    """Of the scenarios searched (a hunt's run names them joined by commas), those whose
    scheduler is told nothing in flight: there invariant 14 is not checked.

    >>> unchecked_scenarios(["default", "overlap,overlap-empty"])
    ['overlap-empty']
    """
    found: list[str] = []
    for name in (n for joined in names for n in joined.split(",") if n):
        try:
            s = scenarios.load(name)
        except (scenarios.ScenarioError, OSError):
            continue  # a scenario that does not read was never searched
        if s.executor == "overlap" and s.inflight_ids == "empty" and name not in found:
            found.append(name)
    return found


def unchecked_note(names: Iterable[str]) -> str | None:
    """The one sentence a command's output and summary carry when it searched a scenario
    whose scheduler is told nothing in flight; None when it searched none.

    >>> unchecked_note(["default"]) is None
    True
    """
    unchecked = unchecked_scenarios(names)
    return in_flight_note(unchecked) if unchecked else None


def in_flight_note(where: Sequence[str]) -> str:
    """The sentence itself, for the worlds of ``where`` (scenario names)."""
    return (
        f"{UNCHECKED_WHEN_EMPTY} is not checked in {', '.join(where)}: the scheduler is told "
        'nothing in flight there (inflight_ids = "empty"), so moving a request that is on the '
        "device is the executor's fault, not the scheduler's"
    )


def _check_case(run: ScenarioRun, story: str) -> JunitCase:
    finding = run.finding
    if finding is None:
        return JunitCase(run.scenario, run.sut, run.seconds)
    properties = [("peftlife_invariant", finding.invariant), ("peftlife_trace", finding.trace)]
    if finding.report:
        properties.append(("peftlife_report", finding.report))
    failure = None if finding.known else f"counterexample: {finding.invariant}"
    return JunitCase(run.scenario, run.sut, run.seconds, failure, story, tuple(properties))


def _gate_case(row: gate.GateRow) -> JunitCase:
    name = row.name.replace(" @ ", "@")
    properties = (("peftlife_invariant", row.invariant), ("peftlife_scenario", row.scenario))
    return JunitCase(name, "peftlife.mutants", row.seconds, row.failure, "", properties)


# ---- the run summary: summary.json and its Markdown ----


@attrs.frozen
class Finding:
    """A counterexample: its invariant, the hash of its shrunk trace, its report."""

    invariant: str
    trace: str
    report: str | None = None
    # In the baseline: known and accepted, so it does not fail the run.
    known: bool = False


@attrs.frozen
class ScenarioRun:
    """One search of one SUT in one scenario."""

    sut: str
    scenario: str
    examples: int
    budget: int
    iterations: int
    seconds: float
    coverage: dict[str, int]
    finding: Finding | None = None

    @classmethod
    def of(cls, result: Any, budget: int, finding: Finding | None = None) -> ScenarioRun:
        """From a ``SearchResult``."""
        return cls(
            result.sut,
            result.scenario,
            result.examples,
            budget,
            result.iterations,
            round(result.seconds, 2),
            dict(Counter(result.coverage)),
            finding,
        )

    @property
    def paths(self) -> list[str]:
        """The scheduler paths reached, in the order the coverage test lists them."""
        return [label for label in COVERAGE_LABELS if self.coverage.get(label)]

    @property
    def never_reached(self) -> list[str]:
        return list(unreached(self.coverage))

    @property
    def verdict(self) -> str:
        if self.finding is None:
            return "held"
        return "known finding" if self.finding.known else "counterexample"


@attrs.frozen
class RunSummary:
    """A whole command's runs, under one profile."""

    command: str
    profile: str
    runs: tuple[ScenarioRun, ...]

    @property
    def ok(self) -> bool:
        """No finding outside the baseline."""
        return all(r.finding is None or r.finding.known for r in self.runs)

    def warnings(self) -> list[str]:
        """A path a search that held never reached is one it could not have tested."""
        return [
            f"{run.sut} in {run.scenario}: path '{label}' never reached"
            for run in self.runs
            if run.finding is None
            for label in run.never_reached
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "profile": self.profile,
            "ok": self.ok,
            "runs": [
                {
                    "sut": r.sut,
                    "scenario": r.scenario,
                    "verdict": r.verdict,
                    "examples": r.examples,
                    "budget": r.budget,
                    "iterations": r.iterations,
                    "seconds": r.seconds,
                    "paths_reached": {p: r.coverage[p] for p in r.paths},
                    "rules": {k: v for k, v in r.coverage.items() if k.startswith("rule: ")},
                    "finding": None if r.finding is None else attrs.asdict(r.finding),
                }
                for r in self.runs
            ],
            "warnings": self.warnings(),
            "findings": [attrs.asdict(r.finding) for r in self.runs if r.finding is not None],
            # Only when there is something to note: a simple-loop run's summary is as before.
            **(
                {"notes": [note]} if (note := unchecked_note(r.scenario for r in self.runs)) else {}
            ),
        }

    def markdown(self, details: str = "") -> str:
        """The Markdown for a CI step summary; ``details`` (a report) is appended."""
        verdict = "passed" if self.ok else "FAILED"
        header = ["scenario", "SUT", "verdict", "examples", "iterations", "paths reached"]
        rows = [
            [
                f"`{r.scenario}`",
                f"`{r.sut}`",
                r.verdict + (f" (`{r.finding.invariant}`)" if r.finding else ""),
                f"{r.examples}/{r.budget}",
                str(r.iterations),
                ", ".join(r.paths) or "none",
            ]
            for r in self.runs
        ]
        title = f"peftlife {self.command}: {verdict} ({self.profile} profile)"
        text = table_markdown(title, header, rows)
        if warnings := self.warnings():
            text += "\n" + "\n".join(f"- warning: {w}" for w in warnings) + "\n"
        # A finding's report, when it follows, says it of its own scenario (its world line).
        searched = [r.scenario for r in self.runs if not (details and r.finding)]
        if note := unchecked_note(searched):
            text += f"\n- note: {note}\n"
        return text + (f"\n{details.rstrip()}\n" if details else "")


def table_markdown(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A titled Markdown table.

    >>> print(table_markdown("t", ["a", "b"], [["1", "x|y"]]), end="")
    ### t
    <BLANKLINE>
    | a | b |
    |---|---|
    | 1 | x/y |
    """
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |"]
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def append_markdown(text: str, path: str | None) -> Path | None:
    """Append to ``path``, else to ``$GITHUB_STEP_SUMMARY`` when set; the file written."""
    target = path or os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    file = Path(target)
    file.parent.mkdir(parents=True, exist_ok=True)
    with file.open("a", encoding="utf-8") as out:
        out.write(text.rstrip() + "\n\n")
    return file


def write_json(summary: RunSummary, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary.to_json(), indent=1) + "\n", "utf-8")


# ---- JUnit XML ----


@attrs.frozen
class JunitCase:
    """One test case: a failure message (None when it passed), its text, its properties."""

    name: str
    classname: str
    seconds: float
    failure: str | None = None
    details: str = ""
    properties: tuple[tuple[str, str], ...] = ()


def render_junit(suite: str, cases: Sequence[JunitCase]) -> str:
    """The XML document of one test suite.

    >>> print(render_junit("peftlife check", [JunitCase("default", "reference", 1.5)]))
    <?xml version="1.0" encoding="utf-8"?>
    <testsuites><testsuite name="peftlife check" tests="1" failures="0" errors="0" \
skipped="0" time="1.500"><testcase name="default" classname="reference" time="1.500" \
/></testsuite></testsuites>
    """
    total = sum(c.seconds for c in cases)
    failures = sum(c.failure is not None for c in cases)
    root = ET.Element("testsuites")
    element = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped="0",
        time=f"{total:.3f}",
    )
    for case in cases:
        item = ET.SubElement(
            element,
            "testcase",
            name=case.name,
            classname=case.classname,
            time=f"{case.seconds:.3f}",
        )
        if case.properties:
            props = ET.SubElement(item, "properties")
            for key, value in case.properties:
                ET.SubElement(props, "property", name=key, value=value)
        if case.failure is not None:
            failure = ET.SubElement(item, "failure", message=case.failure)
            failure.text = case.details
    body = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + body


def write_junit(path: Path, suite: str, cases: Sequence[JunitCase]) -> None:
    """Write the suite to ``path``, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_junit(suite, cases) + "\n", "utf-8")
