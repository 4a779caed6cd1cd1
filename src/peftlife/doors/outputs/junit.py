"""The JUnit XML of ``--junit-xml``: a test case per scenario, gate row, defect or commit.

A finding's invariant, trace and report ride along as properties, as the
pytest plugin records them, so CI systems (GitHub, GitLab, Jenkins) show them;
so do a random run's seed and the command that reruns it (``peftlife_seed``,
``peftlife_rerun``), or ``derandomized`` as its seed when it was.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import attrs

from peftlife.doors.outputs.records import (
    BisectSummary,
    CampaignSummary,
    Defect,
    DiffSummary,
    ExplorationSummary,
    Finding,
    Replay,
    RunSummary,
)
from peftlife.search import gate
from peftlife.world.words import count

Properties = tuple[tuple[str, str], ...]


@attrs.frozen
class JunitCase:
    """One test case: a failure message (None when it passed), its text, its properties."""

    name: str
    classname: str
    seconds: float
    failure: str | None = None
    details: str = ""
    properties: Properties = ()
    # Why it was skipped (None: it ran).
    skipped: str | None = None


def render(suite: str, cases: Sequence[JunitCase]) -> str:
    """The XML document of one test suite.

    >>> print(render("peftlife check", [JunitCase("default", "reference", 1.5)]))
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
        skipped=str(sum(c.skipped is not None for c in cases)),
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
        if case.skipped is not None:
            ET.SubElement(item, "skipped", message=case.skipped)
        if case.failure is not None:
            failure = ET.SubElement(item, "failure", message=case.failure)
            failure.text = case.details
    body = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + body


def write(path: Path, suite: str, cases: Sequence[JunitCase]) -> None:
    """Write the suite to ``path``, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(suite, cases) + "\n", "utf-8")


# ---- the cases of each kind of run ----


def replay_properties(replay: Replay | None) -> Properties:
    """The seed (or ``derandomized``) and the command that reruns the search."""
    if replay is None:
        return ()
    seed = "derandomized" if replay.seed is None else str(replay.seed)
    return (("peftlife_seed", seed), ("peftlife_rerun", replay.command))


def finding_properties(finding: Finding) -> Properties:
    said = [("peftlife_invariant", finding.invariant), ("peftlife_trace", finding.trace)]
    if finding.report:
        said.append(("peftlife_report", finding.report))
    return tuple(said)


def run_cases(summary: RunSummary, stories: Sequence[str]) -> tuple[JunitCase, ...]:
    """A case per scenario run, failed by a counterexample outside the baseline and
    telling that finding's story (``stories``: one per run, in the runs' order)."""
    seed = replay_properties(summary.replay)
    cases = []
    for run, story in zip(summary.runs, stories, strict=True):
        finding = run.finding
        if finding is None:
            cases.append(JunitCase(run.scenario, run.sut, run.seconds, properties=seed))
            continue
        failure = None if finding.known else f"counterexample: {finding.invariant}"
        properties = finding_properties(finding) + seed
        cases.append(JunitCase(run.scenario, run.sut, run.seconds, failure, story, properties))
    return tuple(cases)


def gate_cases(table: gate.Gate, replay: Replay | None = None) -> tuple[JunitCase, ...]:
    """A case per row of the gate: a mutant not caught, or the reference failing, fails.

    ``replay``: a random gate's seed and the command that runs it again, on every case.
    """
    return tuple(
        JunitCase(
            row.name.replace(" @ ", "@"),
            "peftlife.mutants",
            row.seconds,
            row.failure,
            "",
            (
                ("peftlife_invariant", row.invariant),
                ("peftlife_scenario", row.scenario),
                *replay_properties(replay),
            ),
        )
        for row in table.rows
    )


def campaign_cases(summary: CampaignSummary) -> tuple[JunitCase, ...]:
    """A failed case per defect and per crash; one that passed when there is neither."""
    cases = [_defect_case(summary.sut, defect) for defect in summary.defects]
    cases += [
        JunitCase(f"crash {n}", summary.sut, 0.0, "crash", crash)
        for n, crash in enumerate(summary.crashes, 1)
    ]
    if not cases:
        name = summary.scenarios[0].name if len(summary.scenarios) == 1 else "all"
        properties: Properties = (("peftlife_examples", str(summary.examples)),)
        properties += (("peftlife_seed", str(summary.seed)),)
        if summary.rerun:
            properties += (("peftlife_rerun", summary.rerun),)
        cases.append(JunitCase(name, summary.sut, summary.seconds, properties=properties))
    return tuple(cases)


def _defect_case(sut: str, defect: Defect) -> JunitCase:
    written = (
        ("peftlife_report", defect.report)
        if defect.report
        else ("peftlife_report_error", f"not written: {defect.unwritten}")
    )
    first: Properties = ()
    if defect.first is not None:
        first = (("peftlife_first_seen", defect.first.describe()),)
    properties = (
        ("peftlife_invariant", defect.invariant),
        ("peftlife_trace", defect.trace),
        written,
        ("peftlife_scenario", defect.scenario),
        ("peftlife_found", str(defect.count)),
        *first,
        *replay_properties(defect.replay),
    )
    times = count(defect.count, "time")
    seen = "" if defect.first is None else f", first {defect.first.describe()}"
    report = defect.report or f"not written ({defect.unwritten})"
    details = f"found {times}{seen}; its report: {report}\n"
    if defect.story:
        details = f"{defect.story.rstrip()}\n\n{details}"
    failure = f"counterexample: {defect.invariant}, found {times}"
    return JunitCase(defect.name, sut, 0.0, failure, details, properties)


def exploration_cases(summary: ExplorationSummary, story: str) -> tuple[JunitCase, ...]:
    """One case, failed by its counterexample if any (an exploration has no seed)."""
    properties: Properties = (
        ("peftlife_states", str(summary.states)),
        ("peftlife_depth", str(summary.depth)),
    )
    failure = None
    if (finding := summary.finding) is not None:
        properties += finding_properties(finding)
        failure = f"counterexample: {finding.invariant}"
    return (JunitCase(summary.scenario, summary.sut, summary.seconds, failure, story, properties),)


def diff_cases(summary: DiffSummary, story: str) -> tuple[JunitCase, ...]:
    """A diff's one case: the two schedulers, failed by a divergence (``story`` its text)."""
    properties: Properties = ()
    if summary.trace:
        properties += (("peftlife_trace", summary.trace),)
    if summary.report:
        properties += (("peftlife_report", summary.report),)
    properties += replay_properties(summary.replay)
    return (
        JunitCase(
            summary.scenario,
            summary.pair,
            summary.seconds,
            summary.failure,
            story if summary.failure else "",
            properties,
        ),
    )


def bisect_cases(summary: BisectSummary, story: str) -> tuple[JunitCase, ...]:
    """A case per commit probed: a bad one failed, a skipped one skipped; the first bad
    commit's failure carries the story and its finding's properties."""
    first = None if summary.first_bad is None else summary.first_bad[0]
    seed = replay_properties(summary.replay)
    cases = []
    for p in summary.probes:
        name = f"{p.commit[:12]} {p.subject}"
        if p.verdict == "skip":
            cases.append(JunitCase(name, "peftlife.bisect", 0.0, skipped="could not be tested"))
        elif p.verdict == "good":
            cases.append(JunitCase(name, "peftlife.bisect", 0.0, properties=seed))
        elif p.commit == first and summary.finding is not None:
            properties = finding_properties(summary.finding) + seed
            failure = f"first bad commit: {p.invariant}"
            cases.append(JunitCase(name, "peftlife.bisect", 0.0, failure, story, properties))
        else:
            properties = (("peftlife_invariant", p.invariant or "-"), *seed)
            cases.append(
                JunitCase(name, "peftlife.bisect", 0.0, f"bad: {p.invariant}", "", properties)
            )
    return tuple(cases)
