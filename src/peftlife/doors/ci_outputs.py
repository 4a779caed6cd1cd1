"""What a command leaves for CI: the run summary, the step summary and the JUnit file.

``check``, ``mutants``, ``diff``, ``fuzz`` and ``explore`` each end by calling
``write`` with their ``CiOutputs``: ``summary.json`` in the report directory
(``check``, ``fuzz``, ``explore``), the Markdown appended to ``--summary`` or
``$GITHUB_STEP_SUMMARY``, and the JUnit XML of ``--junit-xml``. ``add_options``
gives a command those two options.

Every ``check`` has a summary, a passing one included: the examples searched
out of the budget, the executor iterations, the scheduler paths reached (the
labels the coverage test asserts) and a warning for each path never reached,
plus each finding with its invariant, trace hash and report; a run that searched
a scenario that leaves an invariant it could break unchecked (invariant 14 where
the scheduler is told nothing in flight) says so once (``unchecked_note``, from
``registry.not_checked``). The JSON's
``findings`` list is also a valid ``--baseline`` file. The JUnit file has one
test case per scenario searched, per row of the mutant gate, or per diff; a
finding's invariant, trace and report ride along as properties, as the pytest
plugin records them, so CI systems (GitHub, GitLab, Jenkins) show them.

A fuzzing campaign's summary (``CampaignSummary``) has its scenarios,
examples and workers, and its findings grouped by defect, each with how often
it was found and its reports; each defect, and each crashed worker, is a failed
JUnit case, and a campaign that found nothing is one passing case. An
exploration's (``ExplorationSummary``) has the states explored, the depth
covered, whether the state limit cut it short, and its counterexample, if any,
as its one JUnit case's failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from peftlife import reports
from peftlife.checker import registry
from peftlife.search import gate, scenarios
from peftlife.search.machine import COVERAGE_LABELS, unreached
from peftlife.world.words import count

if TYPE_CHECKING:
    from peftlife.doors.fuzz import Campaign, Group


class CiOutputError(Exception):
    """A step summary or JUnit file that cannot be written, found before the run: exit 2."""


# ---- what a command tells CI, and where it goes ----


def add_options(parser: argparse.ArgumentParser, junit: str = "") -> None:
    """``--junit-xml`` and ``--summary``, read by ``write``; ``junit`` says what its cases are."""
    parser.add_argument(
        "--junit-xml",
        metavar="FILE",
        default=None,
        help="also write JUnit XML to this file" + (f": {junit}" if junit else ""),
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
    summary: RunSummary | CampaignSummary | ExplorationSummary | None = None


def refuse_unwritable(args: argparse.Namespace) -> None:
    """Refuse, before the run, a step summary or JUnit file that cannot be written.

    Bad input (``CiOutputError``, exit 2) as a report directory is: found after the
    search, it would turn a found bug's exit 1 into a 2.
    """
    targets = {
        "--junit-xml": args.junit_xml,
        "--summary": args.summary,
        "$GITHUB_STEP_SUMMARY": None if args.summary else os.environ.get("GITHUB_STEP_SUMMARY"),
    }
    for option, target in targets.items():
        if target and (problem := reports.unwritable(Path(target), option, "file")):
            raise CiOutputError(problem)


def write(outputs: CiOutputs, args: argparse.Namespace) -> None:
    """Write what CI reads of one run, where the command's options say.

    Called after the run: a file that cannot be written (``refuse_unwritable`` let it
    through, then it went away) costs a line on stderr, and the run's verdict stands;
    a found bug still exits 1.
    """
    summary, junit = outputs.summary, args.junit_xml
    writes: list[Callable[[], object]] = [lambda: append_markdown(outputs.markdown, args.summary)]
    if summary is not None:
        writes.insert(0, lambda: write_json(summary, Path(args.report_dir) / "summary.json"))
    if junit:
        writes.append(
            lambda: write_junit(Path(junit), f"peftlife {outputs.command}", outputs.cases)
        )
    for write_one in writes:
        try:
            write_one()
        except OSError as err:
            print(f"peftlife: could not write {err.filename} ({err.strerror})", file=sys.stderr)


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
    worlds leave an invariant they could break not checked (``registry.not_checked``).

    >>> unchecked_scenarios(["default", "overlap,overlap-empty"])
    ['overlap-empty']
    """
    return list(dict.fromkeys(name for where in _unchecked(names).values() for name in where))


def _unchecked(names: Iterable[str]) -> dict[registry.Invariant, list[str]]:
    """Each invariant some scenario searched leaves not checked, with those scenarios."""
    found: dict[registry.Invariant, list[str]] = {}
    for name in (n for joined in names for n in joined.split(",") if n):
        try:
            world = scenarios.smallest_world(scenarios.load(name))
        except (ValueError, OSError):
            continue  # a scenario that does not read was never searched
        # Its executor's knobs are the same in every world it draws: one tells.
        for invariant in registry.not_checked(world):
            if name not in found.setdefault(invariant, []):
                found[invariant].append(name)
    return found


def unchecked_note(names: Iterable[str]) -> str | None:
    """The one sentence a command's output and summary carry when it searched a scenario
    that leaves an invariant not checked; None when it searched none.

    >>> unchecked_note(["default"]) is None
    True
    """
    notes = [not_checked_note(i, where) for i, where in _unchecked(names).items()]
    return "; ".join(notes) or None


def not_checked_note(invariant: registry.Invariant, where: Sequence[str]) -> str:
    """The sentence itself, for the worlds of ``where`` (scenario names)."""
    return f"{invariant.label} is not checked in {', '.join(where)}: {invariant.scope.unchecked}"


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


def write_json(summary: RunSummary | CampaignSummary | ExplorationSummary, path: Path) -> None:
    reports.report_folder(path.parent)
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


# ---- fuzz's campaign and explore's exploration ----


@attrs.frozen
class Defect:
    """One defect of a campaign (``fuzz.defect_key``): how often it was found, its reports."""

    invariant: str
    # The scheduler's calls in the iteration that broke the invariant, each once.
    move: tuple[str, ...]
    # Findings of this defect, and the workers that found them.
    count: int
    workers: tuple[int, ...]
    # The shortest finding: its scenario, its length, its trace hash and its JSON report.
    scenario: str
    actions: int
    shrunk: bool
    trace: str
    report: str
    # Every distinct trace of the defect with its JSON report, the shortest's included.
    reports: tuple[tuple[str, str], ...]
    # The shortest finding's story: the JUnit failure's text.
    story: str = ""

    @classmethod
    def of(cls, group: Group) -> Defect:
        """From a campaign's ``Group``."""
        case = group.shortest
        trace = reports.trace_hash(case)
        story = "" if group.outcome is None else reports.terminal_text(case, group.outcome, 100)
        return cls(
            group.invariant,
            group.move,
            group.count,
            tuple(group.workers),
            case.scenario,
            len(case.actions),
            case.shrunk,
            trace,
            str(group.traces.get(trace, group.report)),
            tuple((t, str(path)) for t, path in group.traces.items()),
            story,
        )

    @property
    def name(self) -> str:
        """The invariant and the scheduler's calls: two defects never share it."""
        return f"{self.invariant} ({', '.join(self.move) or 'none'})"

    def to_json(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant,
            "move": list(self.move),
            "found": self.count,
            "workers": list(self.workers),
            "scenario": self.scenario,
            "actions": self.actions,
            "shrunk": self.shrunk,
            "trace": self.trace,
            "report": self.report,
            "reports": dict(self.reports),
        }


@attrs.frozen
class CampaignSummary:
    """A fuzzing campaign: what it searched, on how many workers, its findings by defect."""

    sut: str
    profile: str
    scenarios: tuple[str, ...]
    workers: int
    seed: int
    examples: int
    seconds: float
    # Findings in all, each counted in one of the defects.
    found: int
    defects: tuple[Defect, ...]
    # Workers that died and harness errors: they fail the campaign too.
    crashes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    interrupted: bool = False

    @classmethod
    def of(cls, campaign: Campaign) -> CampaignSummary:
        """From a campaign that has run."""
        plan = campaign.plan
        return cls(
            plan.sut,
            plan.profile,
            plan.scenarios,
            plan.workers,
            plan.seed,
            campaign.examples,
            round(campaign.elapsed, 2),
            campaign.findings,
            tuple(Defect.of(group) for group in campaign.groups.values()),
            tuple(campaign.crashes),
            tuple(campaign.warnings),
            campaign.interrupted,
        )

    @property
    def ok(self) -> bool:
        """Nothing found, no worker crashed: the campaign's exit 0."""
        return not self.defects and not self.crashes

    def findings(self) -> list[Finding]:
        """Every distinct trace of every defect, as a baseline lists findings."""
        return [
            Finding(defect.invariant, trace, report)
            for defect in self.defects
            for trace, report in defect.reports
        ]

    def notes(self) -> list[str]:
        """What the campaign did not check: invariant 14 where the scheduler is told nothing."""
        note = unchecked_note(self.scenarios)
        return [] if note is None else [note]

    def to_json(self) -> dict[str, Any]:
        return {
            "command": "fuzz",
            "profile": self.profile,
            "ok": self.ok,
            "sut": self.sut,
            "scenarios": list(self.scenarios),
            "workers": self.workers,
            "seed": self.seed,
            "examples": self.examples,
            "seconds": self.seconds,
            "interrupted": self.interrupted,
            "found": self.found,
            "defects": [defect.to_json() for defect in self.defects],
            "crashes": list(self.crashes),
            "warnings": list(self.warnings),
            "findings": [attrs.asdict(finding) for finding in self.findings()],
            # Only when there is something to note, as check's.
            **({"notes": notes} if (notes := self.notes()) else {}),
        }

    def markdown(self) -> str:
        """The Markdown for a CI step summary: a row per defect, then the campaign's totals."""
        title = f"peftlife fuzz: {'passed' if self.ok else 'FAILED'} ({self.profile} profile)"
        where = ", ".join(f"`{s}`" for s in self.scenarios)
        line = (
            f"`{self.sut}` in {where}: {self.examples} examples in {self.seconds:.1f} s on "
            f"{count(self.workers, 'worker')}, base seed {self.seed}"
            + (" (interrupted)" if self.interrupted else "")
        )
        if self.defects:
            header = ["invariant", "scheduler's calls", "found", "workers", "actions"]
            header += ["scenario", "shortest report"]
            rows = [
                [
                    f"`{d.invariant}`",
                    ", ".join(d.move) or "none",
                    str(d.count),
                    ",".join(map(str, d.workers)),
                    str(d.actions) + ("" if d.shrunk else " (unshrunk)"),
                    f"`{d.scenario}`",
                    f"`{d.report}`",
                ]
                for d in self.defects
            ]
            text = table_markdown(title, header, rows)
            text += f"\n{line}: {count(self.found, 'finding')} of "
            text += f"{count(len(self.defects), 'defect')}\n"
        else:
            tally = "a worker crashed" if self.crashes else "no finding, every example held"
            text = f"### {title}\n\n{line}: {tally}\n"
        bullets = [f"- crash: {c}" for c in self.crashes]
        bullets += [f"- warning: {w}" for w in self.warnings]
        bullets += [f"- note: {n}" for n in self.notes()]
        return text + ("\n" + "\n".join(bullets) + "\n" if bullets else "")


@attrs.frozen
class ExplorationSummary:
    """An exploration: how far it proved no violation, or its shortest counterexample."""

    sut: str
    scenario: str
    states: int
    # Every sequence up to this many actions was tried; a counterexample's length when found.
    depth: int
    # The depth and the state limit asked for.
    max_depth: int
    max_states: int
    # False when the state limit stopped it before ``max_depth``.
    complete: bool
    seconds: float
    finding: Finding | None = None
    # What it did not check (``not_checked_note``), as its world leaves it unjudged.
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.finding is None

    @property
    def verdict(self) -> str:
        if self.finding is not None:
            return f"a shortest counterexample has {count(self.depth, 'action')}"
        return f"no violation up to depth {self.depth}"

    def warnings(self) -> list[str]:
        """An exploration the state limit stopped proved less than was asked."""
        if self.complete or self.finding is not None:
            return []
        return [
            f"the state limit ({self.max_states}) stopped depth {self.depth + 1} of "
            f"{self.max_depth} (raise --max-states)"
        ]

    def to_json(self) -> dict[str, Any]:
        finding = None if self.finding is None else attrs.asdict(self.finding)
        return {
            "command": "explore",
            "ok": self.ok,
            "sut": self.sut,
            "scenario": self.scenario,
            "verdict": "held" if self.ok else "counterexample",
            "states": self.states,
            "depth": self.depth,
            "max_depth": self.max_depth,
            "max_states": self.max_states,
            "complete": self.complete,
            "seconds": self.seconds,
            "finding": finding,
            "warnings": self.warnings(),
            "findings": [] if finding is None else [finding],
            **({"notes": list(self.notes)} if self.notes else {}),
        }

    def markdown(self, details: str = "") -> str:
        """The Markdown for a CI step summary; ``details`` (a report) is appended."""
        title = f"peftlife explore: {'passed' if self.ok else 'FAILED'}"
        found = "" if self.finding is None else f" (`{self.finding.invariant}`)"
        text = (
            f"### {title}\n\n`{self.sut}` in `{self.scenario}`: {self.states} states in "
            f"{self.seconds:.1f} s, {self.verdict}{found}\n"
        )
        if warnings := self.warnings():
            text += "\n" + "\n".join(f"- warning: {w}" for w in warnings) + "\n"
        # A counterexample's report, when it follows, says it in its world line.
        if self.notes and not (details and self.finding):
            text += "\n" + "\n".join(f"- note: {n}" for n in self.notes) + "\n"
        return text + (f"\n{details.rstrip()}\n" if details else "")


def for_campaign(summary: CampaignSummary) -> CiOutputs:
    """A campaign's outputs: a failed JUnit case per defect and per crash, else one passing."""
    cases = [_defect_case(summary.sut, defect) for defect in summary.defects]
    cases += [
        JunitCase(f"crash {n}", summary.sut, 0.0, "crash", crash)
        for n, crash in enumerate(summary.crashes, 1)
    ]
    if not cases:
        name = summary.scenarios[0] if len(summary.scenarios) == 1 else "all"
        properties = (("peftlife_examples", str(summary.examples)),)
        cases.append(JunitCase(name, summary.sut, summary.seconds, properties=properties))
    return CiOutputs("fuzz", summary.markdown(), tuple(cases), summary)


def for_exploration(summary: ExplorationSummary, story: str, details: str) -> CiOutputs:
    """An exploration's outputs: one JUnit case, failed by its counterexample if any."""
    properties = [("peftlife_states", str(summary.states)), ("peftlife_depth", str(summary.depth))]
    failure = None
    if (finding := summary.finding) is not None:
        properties += [("peftlife_invariant", finding.invariant), ("peftlife_trace", finding.trace)]
        if finding.report:
            properties.append(("peftlife_report", finding.report))
        failure = f"counterexample: {finding.invariant}"
    case = JunitCase(
        summary.scenario, summary.sut, summary.seconds, failure, story, tuple(properties)
    )
    return CiOutputs("explore", summary.markdown(details), (case,), summary)


def _defect_case(sut: str, defect: Defect) -> JunitCase:
    properties = (
        ("peftlife_invariant", defect.invariant),
        ("peftlife_trace", defect.trace),
        ("peftlife_report", defect.report),
        ("peftlife_scenario", defect.scenario),
        ("peftlife_found", str(defect.count)),
    )
    times = count(defect.count, "time")
    reported = "\n".join(f"  {report}" for _, report in defect.reports)
    details = f"found {times}; its reports:\n{reported}\n"
    if defect.story:
        details = f"{defect.story.rstrip()}\n\n{details}"
    failure = f"counterexample: {defect.invariant}, found {times}"
    return JunitCase(defect.name, sut, 0.0, failure, details, properties)
