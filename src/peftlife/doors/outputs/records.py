"""What one run of a command was, as every output reads it: one record per kind of run.

A command ends with one of these (``RunSummary`` for ``check``,
``CampaignSummary`` for ``fuzz``, ``ExplorationSummary`` for ``explore``,
``BisectSummary`` for ``bisect``; the gate's own ``gate.Gate``); summary.json
(``summary_json``), the step summary (``step_summary``) and the JUnit file
(``junit``) are each written from it, so they cannot disagree. ``Replay``
says how to run a random search again: its seed and the command.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import attrs

from peftlife import reports
from peftlife.doors.outputs.unchecked import note
from peftlife.search.machine import COVERAGE_LABELS, unreached
from peftlife.search.scenarios import Scenario
from peftlife.world.words import count

if TYPE_CHECKING:
    from peftlife.doors.fuzz import Campaign, Group, Seen


@attrs.frozen
class Replay:
    """How a run searched: under a seed (a random run, rerun by ``command``), or derandomized.

    >>> Replay(7, "peftlife check --seed 7").said, Replay(None, "peftlife check").said
    ('seed 7', 'derandomized')
    """

    seed: int | None
    # The command that runs the same search again, its seed included.
    command: str

    @property
    def derandomized(self) -> bool:
        return self.seed is None

    @property
    def said(self) -> str:
        return "derandomized" if self.seed is None else f"seed {self.seed}"


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
    # The scenarios it searched, as read (none for a run read back from a summary).
    searched: tuple[Scenario, ...] = ()

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
            result.searched,
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
    # None for a summary that predates seeds (a baseline read back).
    replay: Replay | None = None

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

    def notes(self, told: bool = False) -> list[str]:
        """What it did not check; ``told``: a finding's report, which says it of its own
        scenario (its world line), goes with it."""
        said = note(s for r in self.runs if not (told and r.finding) for s in r.searched)
        return [] if said is None else [said]


@attrs.frozen
class Defect:
    """One defect of a campaign (``defect.Signature``): how often it was found, its report."""

    invariant: str
    # The scheduler's calls in the iteration that broke the invariant, each once.
    move: tuple[str, ...]
    # Findings of this defect, and the workers that found them.
    count: int
    workers: tuple[int, ...]
    # The shortest finding: its scenario, its length, its trace hash and its JSON report
    # ("" when it could not be written).
    scenario: str
    actions: int
    shrunk: bool
    trace: str
    report: str
    # The defect's report by its trace: the shortest's, the one written (none if not).
    reports: tuple[tuple[str, str], ...]
    # The shortest finding's story: the JUnit failure's text.
    story: str = ""
    # How to search the shortest finding's slice again (None: not known).
    replay: Replay | None = None
    # Where and when the campaign first met it.
    first: Seen | None = None
    # Why its report could not be written ("" when it was).
    unwritten: str = ""

    @classmethod
    def of(cls, group: Group, sut: str = "", profile: str = "") -> Defect:
        """From a campaign's ``Group``; ``sut`` and ``profile`` name its rerun command,
        with its slice's budget: the same seed searches the same examples only with
        the same budget (Hypothesis draws the first tenth small). A finding met
        replaying the database has none: no seed finds it again."""
        case = group.shortest
        trace = reports.trace_hash(case)
        story = reports.terminal_text(case, group.outcome, 100)
        replay = None
        if case.seed is not None and sut and not group.replayed:
            command = check_command(sut, case.scenario, profile, case.seed, group.budget)
            replay = Replay(case.seed, command)
        report = str(group.paths["json"]) if "json" in group.paths else ""
        return cls(
            group.invariant,
            group.move,
            group.count,
            tuple(group.workers),
            case.scenario,
            len(case.actions),
            case.shrunk,
            trace,
            report,
            ((trace, report),) if report else (),
            story,
            replay,
            group.first,
            group.unwritten,
        )

    @property
    def name(self) -> str:
        """The invariant and the scheduler's calls: two defects never share it."""
        return f"{self.invariant} ({', '.join(self.move) or 'none'})"


@attrs.frozen
class CampaignSummary:
    """A fuzzing campaign: what it searched, on how many workers, its findings by defect."""

    sut: str
    profile: str
    scenarios: tuple[Scenario, ...]
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
    # The command that starts the same campaign (its slices' seeds), its seed included.
    rerun: str = ""

    @classmethod
    def of(cls, campaign: Campaign, rerun: str = "") -> CampaignSummary:
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
            tuple(Defect.of(g, plan.sut, plan.profile) for g in campaign.defect_groups),
            tuple(campaign.crashes),
            tuple(campaign.warnings),
            campaign.interrupted,
            rerun,
        )

    @property
    def ok(self) -> bool:
        """Nothing found, no worker crashed: the campaign's exit 0."""
        return not self.defects and not self.crashes

    def findings(self) -> list[Finding]:
        """Each defect's shortest trace, as a baseline lists findings."""
        return [Finding(d.invariant, d.trace, d.report or None) for d in self.defects]

    def notes(self) -> list[str]:
        """What the campaign did not check: invariant 14 where the scheduler is told nothing."""
        said = note(self.scenarios)
        return [] if said is None else [said]

    @property
    def tally(self) -> str:
        return f"{count(self.found, 'finding')} of {count(len(self.defects), 'defect')}"


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


@attrs.frozen
class Probed:
    """One commit a bisection tested, and what it was."""

    commit: str
    subject: str
    # "good", "bad" or "skip".
    verdict: str
    invariant: str | None = None


@attrs.frozen
class BisectSummary:
    """A bisection: the first bad commit (or the candidates skips left), and its finding."""

    repo: str
    good: str
    bad: str
    # What each commit ran: "a replay of REPORT" or "a search in SCENARIO".
    test: str
    profile: str
    probes: tuple[Probed, ...]
    seconds: float
    # The first bad commit (sha, subject); None when skipped commits leave candidates.
    first_bad: tuple[str, str] | None
    candidates: tuple[tuple[str, str], ...] = ()
    finding: Finding | None = None
    # The last good commit replays the first bad one's case clean.
    last_good_clean: bool | None = None
    replay: Replay | None = None

    @property
    def ok(self) -> bool:
        """The first bad commit is named: bisect's exit 0."""
        return self.first_bad is not None

    @property
    def verdict(self) -> str:
        if self.first_bad is None:
            return f"{count(len(self.candidates), 'candidate')} left by skipped commits"
        return f"first bad commit {self.first_bad[0][:12]}"


@attrs.frozen
class DiffSummary:
    """A diff of two schedulers: the same within the budget, or where they diverged."""

    a: str
    b: str
    # The scenario its one JUnit case is named after, and what was searched in words.
    scenario: str
    where: str
    profile: str
    examples: int
    seconds: float
    replay: Replay
    # Why it failed ("divergence at iteration N", or the invariant of a scheduler that
    # took the search's process down); None when the two behaved the same.
    failure: str | None = None
    # The divergence's trace hash and JSON report.
    trace: str | None = None
    report: str | None = None

    @property
    def pair(self) -> str:
        return f"{self.a} vs {self.b}"


def check_command(
    sut: str, scenario: str, profile: str, seed: int | None, max_examples: int | None = None
) -> str:
    """The command that runs one check's search again, seed included.

    >>> check_command("reference", "all", "peftlife-dev", 7)
    'peftlife check --sut reference --scenario all --profile peftlife-dev --seed 7'
    """
    words = ["peftlife check", f"--sut {sut}", f"--scenario {scenario}", f"--profile {profile}"]
    if max_examples is not None:
        words.append(f"--max-examples {max_examples}")
    if seed is not None:
        words.append(f"--seed {seed}")
    return " ".join(words)
