"""``peftlife bisect``: find the first commit of a repository whose scheduler fails.

Each commit's scheduler files are written to a scratch folder and tested: a
saved case replayed (``--case``) or a bounded, derandomized search
(``--scenario``). Exit codes: 0 the first bad commit is named; 1 skipped
commits leave more than one candidate; 2 bad input; 130 Ctrl-C (once the first
bad commit is named, its finding, shrunk as far as the shrink had got, is
written first). Like ``check`` it leaves its CI outputs (``outputs``):
summary.json, the step summary and ``--junit-xml`` (a test case per commit probed).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import attrs
import hypothesis
from rich.console import Console

from peftlife import reports, sut
from peftlife.doors import outputs
from peftlife.doors.cli.common import (
    EXIT_FOUND,
    EXIT_HELD,
    SCENARIO_HELP,
    BadInput,
    NewCommand,
    Repeated,
    common_options,
    max_examples_option,
    outputs_writable,
    scenario_words,
    searched,
    shrink_timeout_option,
    targets,
    teller,
)
from peftlife.doors.cli.common import settings as common_settings
from peftlife.doors.outputs.records import BisectSummary, Finding, Probed, Replay
from peftlife.doors.outputs.story import for_ci
from peftlife.search import bisect, outside
from peftlife.search.failure import ShrinkInterrupted, minimized
from peftlife.search.hunt import hunt, search
from peftlife.world.words import count


def add_parser(command: NewCommand) -> None:
    p = command("bisect", "find the first commit whose scheduler fails")
    p.add_argument("--repo", metavar="PATH", required=True, help="a git repository (read only)")
    p.add_argument("--good", metavar="REV", required=True, help="a commit that does not fail")
    p.add_argument("--bad", metavar="REV", required=True, help="a later commit that fails")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--case", metavar="REPORT.json", help="replay this saved case on each commit")
    what.add_argument(
        "--scenario",
        metavar="NAME",
        action=Repeated,
        help=f"run a bounded, derandomized search on each commit: {SCENARIO_HELP} "
        "(repeatable: every one named takes turns)",
    )
    p.add_argument(
        "--sut-prefix",
        metavar="PREFIX",
        default=bisect.DEFAULT_PREFIX,
        help="the SUT string of each commit: this prefix, then the folder its files are written "
        "to (or the folder in place of {}, as in 'trtllm:{}:ClassName'); a scheduler written "
        "to the protocol, 'package.module:attr', is imported from that folder",
    )
    p.add_argument(
        "--path",
        dest="paths",
        metavar="DIR",
        action="append",
        default=None,
        help="the files of each commit to write, a folder or a file of the repository "
        f"(repeatable; default: {bisect.SCHEDULER_FILES})",
    )
    max_examples_option(p)
    shrink_timeout_option(p)
    outputs.add_options(p, junit_cases="a test case per commit probed, failed where it was bad")
    common_options(
        p,
        "bisect",
        quiet={"help": "only the verdict and the report"},
        profile={
            "default": "ci",
            "help": "settings profile of each commit's search, with one seed for every "
            "commit (default: ci)",
        },
        seed={"help": "the seed of every commit's search (default: 0)"},
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, console: Console) -> int:
    case, names = None, []
    if args.case is not None:
        try:
            case = reports.load_json(Path(args.case))
        except reports.ReportError as err:
            raise BadInput(str(err)) from err
    else:
        names = searched(args.scenario)
    outputs_writable(args)
    start = time.perf_counter()
    try:
        repo = bisect.Repo.open(Path(args.repo).expanduser())
        good, bad = repo.commit(args.good, "--good"), repo.commit(args.bad, "--bad")
        candidates = repo.between(good, bad)
    except bisect.BisectError as err:
        raise BadInput(str(err)) from err
    settings = hypothesis.settings(
        common_settings(args.profile, args.max_examples), derandomize=True
    )
    paths = tuple(args.paths or (bisect.SCHEDULER_FILES,))
    seed = _seed(args)

    def test(subject: sut.Resolved) -> bisect.Failure | None:
        if case is not None:
            outcome = outside.replay(case.config, case.actions, subject.factory, sut=subject.spec)
            if not outcome.violations:
                return None
            return bisect.Failure(outcome.violations[0].invariant, None, subject)
        if len(names) > 1:
            found = hunt(subject, settings, scenario_names=names, seed=seed).failure
        else:
            found = search(subject, names[0], settings, seed=seed, shrink=False).failure
        return None if found is None else bisect.Failure(found.invariant, found, subject)

    def say(probe: bisect.Probe) -> None:
        if not args.quiet:
            console.print(f"  {probe.describe()}", soft_wrap=True, highlight=False)

    with tempfile.TemporaryDirectory(prefix="peftlife-bisect-") as scratch:
        prober = bisect.Prober(repo, Path(scratch), args.sut_prefix, paths, test)
        if not args.quiet:
            console.print(
                f"bisecting {count(len(candidates), 'commit')} after {good.short} (good) up to "
                f"{bad.short} (bad), about {count(bisect.steps(len(candidates)), 'step')}"
            )
        ends = [prober.probe(bad), prober.probe(good)]
        for probe in ends:
            say(probe)
        problem = bisect.ends_problem(ends[1], ends[0], "a replay" if case else "a search")
        if problem:
            raise BadInput(problem)
        result = bisect.bisect(candidates, prober.probe, say)
        told = _bisect_verdict(args, console, case, prober, result, good)
    summary, story, details = _summary(args, prober, result, told, time.perf_counter() - start)
    outputs.write(outputs.for_bisection(summary, story, details), targets(args))
    return EXIT_FOUND if result.candidates else EXIT_HELD


def _bisect_verdict(
    args: argparse.Namespace,
    console: Console,
    case: reports.Case | None,
    prober: bisect.Prober,
    result: bisect.Result,
    good: bisect.Commit,
) -> _Told:
    """Name the first bad commit, tell its failure, and replay it on the last good one."""
    first = result.first_bad
    if not args.quiet:
        console.print()
    if result.candidates:
        console.print(
            "only skipped commits are left to test; the first bad commit could be any of:",
            highlight=False,
            soft_wrap=True,
        )
        for commit in result.candidates:
            console.print(f"  {commit.short} {commit.subject}", highlight=False, soft_wrap=True)
    else:
        console.print(
            f"first bad commit: {first.commit.sha} {first.commit.subject}",
            highlight=False,
            soft_wrap=True,
        )
    report_dir = Path(args.report_dir)
    last_good = result.last_good or bisect.Probe(good, "good")
    # Both commits' files are kept beside the report: it replays later, and diff compares them.
    kept = {
        which: _keep(prober, probe.commit, report_dir)
        for which, probe in (("first bad", first), ("last good", last_good))
    }
    spec = prober.spec(first.commit, kept["first bad"])
    failure = first.failure
    assert failure is not None
    interrupted = False
    if case is not None:
        found = attrs.evolve(case, sut=spec)
    else:
        assert failure.found is not None
        try:
            smaller = minimized(
                failure.found, timeout=args.shrink_timeout, subject=failure.resolved
            )
        except ShrinkInterrupted as stop:  # written below, then exit 130
            smaller, interrupted = stop.failure, True
        # The seed every probe was searched with, so the report replays the search.
        found = reports.Case.from_failure(smaller, seed=_seed(args), profile=args.profile)
        found = attrs.evolve(found, sut=spec)
    # Replayed with the factory the probe loaded: the kept folder holds the same files.
    same = None if failure.resolved is None else sut.Resolved(spec, failure.resolved.factory)
    outcome, paths = teller(args, console).case(found, reports.replay(found, same))
    if interrupted:
        if paths:
            console.print("reports: " + ", ".join(str(p) for p in paths.values()), soft_wrap=True)
        raise KeyboardInterrupt  # the one line and exit 130
    held = prober.replays_clean(last_good.commit, found)
    verdict = (
        "the case replays and every invariant holds"
        if held
        else "the case FAILS there too: the search missed it at that commit (raise --max-examples)"
    )
    console.print(
        f"last good commit: {last_good.commit.short} {last_good.commit.subject}: {verdict}",
        highlight=False,
        soft_wrap=True,
    )
    if paths:
        console.print(
            "reports: " + ", ".join(str(p) for p in paths.values()), highlight=False, soft_wrap=True
        )
    good_files, bad_files = kept["last good"], kept["first bad"]
    if good_files is not None and bad_files is not None:
        console.print(
            f"their files: {good_files} (last good), {bad_files} (first bad); "
            f"'peftlife diff {prober.spec(last_good.commit, good_files)} "
            f"{prober.spec(first.commit, bad_files)}' compares them",
            highlight=False,
            soft_wrap=True,
        )
    return _Told(*for_ci(found, outcome, paths, failure.invariant), held)


@attrs.frozen
class _Told:
    """The first bad commit's finding as the CI outputs carry it, and the last good's replay."""

    finding: Finding
    story: str
    details: str
    last_good_clean: bool


def _summary(
    args: argparse.Namespace,
    prober: bisect.Prober,
    result: bisect.Result,
    told: _Told,
    seconds: float,
) -> tuple[BisectSummary, str, str]:
    """The bisection as its CI outputs read it, with the finding's story and Markdown."""
    probes = tuple(
        Probed(
            p.commit.sha,
            p.commit.subject,
            p.verdict,
            None if p.failure is None else p.failure.invariant,
        )
        for p in prober.probes.values()
    )
    first = None if result.candidates else result.first_bad.commit
    summary = BisectSummary(
        args.repo,
        args.good,
        args.bad,
        f"a replay of {args.case}" if args.case else f"a search in {', '.join(args.scenario)}",
        args.profile,
        probes,
        round(seconds, 2),
        None if first is None else (first.sha, first.subject),
        tuple((c.sha, c.subject) for c in result.candidates),
        told.finding,
        told.last_good_clean,
        None if args.case else Replay(_seed(args), rerun_command(args)),
    )
    return summary, told.story, told.details


def rerun_command(args: argparse.Namespace) -> str:
    """The command that bisects again, every commit searched with the same seed.

    >>> print(rerun_command(argparse.Namespace(repo="r", good="v1", bad="v2", scenario=["all"],
    ...     sut_prefix="", paths=None, profile="ci", max_examples=None, seed=None)))
    peftlife bisect --repo r --good v1 --bad v2 --scenario all --profile ci --seed 0
    """
    words = [f"peftlife bisect --repo {args.repo} --good {args.good} --bad {args.bad}"]
    words.append(f"--scenario {scenario_words(args.scenario)}")
    if args.sut_prefix and args.sut_prefix != bisect.DEFAULT_PREFIX:
        words.append(f"--sut-prefix {args.sut_prefix}")
    words += [f"--path {path}" for path in args.paths or ()]
    words.append(f"--profile {args.profile}")
    if args.max_examples is not None:
        words.append(f"--max-examples {args.max_examples}")
    return " ".join([*words, f"--seed {_seed(args)}"])


def _keep(prober: bisect.Prober, commit: bisect.Commit, report_dir: Path) -> Path | None:
    """A copy of a commit's files in the report directory, or None if it cannot be written."""
    try:
        return prober.keep(commit, reports.report_folder(report_dir) / f"bisect-{commit.short}")
    except OSError:
        return None


def _seed(args: argparse.Namespace) -> int:
    """The seed of every commit's search. Hypothesis derives a derandomized run's seed
    from the machine's name, which holds the commit's temporary folder, so without a
    seed of its own each probe (and each run of bisect) would search differently."""
    return 0 if args.seed is None else args.seed
