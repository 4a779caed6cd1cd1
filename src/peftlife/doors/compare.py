"""Two commands that compare schedulers: ``peftlife diff A B`` and ``peftlife bisect``.

``diff`` searches traces on which two schedulers behave differently, shrinks
the first divergence and reports it side by side. ``bisect`` finds the first
commit of a repository whose scheduler fails a saved case or a bounded search.
``add_commands`` puts both on the ``peftlife`` parser.

Exit codes of ``diff``: 0 no divergence within the budget, 1 a divergence (with
its reports), 2 bad input. Of ``bisect``: 0 the first bad commit is named, 1
skipped commits leave more than one candidate, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
import hypothesis
from rich.console import Console

from peftlife import reports, sut
from peftlife.doors import ci_outputs
from peftlife.doors.cli import (
    EXIT_FOUND,
    EXIT_HELD,
    BadInput,
    _budget,
    _common_options,
    _positive,
    _settings,
    _shrink_timeout_option,
    _validate,
    _warn_unreached,
    _writable,
)
from peftlife.doors.progress import progress
from peftlife.reports import diff as diff_reports
from peftlife.search import bisect, diff, profiles, scenarios
from peftlife.search.machine import hunt, minimized, search
from peftlife.search.trace import checked_replay

Command = Any  # the ``command(name, text)`` helper of ``cli._parser``


def add_commands(command: Command) -> None:
    """Add ``diff`` and ``bisect`` with the parser's ``command(name, text)`` helper."""
    _diff_parser(command("diff", "search for a trace on which two schedulers behave differently"))
    _bisect_parser(command("bisect", "find the first commit whose scheduler fails"))


# ---- peftlife diff ----


def _diff_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A", help=f"the first scheduler: {sut.FORMS}")
    p.add_argument("b", metavar="B", help="the second scheduler, in the same forms")
    p.add_argument(
        "--ignore",
        choices=diff.IGNORABLE,
        action="append",
        default=[],
        help="'calls': compare only the output lists, states and residency; 'order': compare "
        "every list as a set and the calls as a multiset (repeatable)",
    )
    p.add_argument(
        "--scenario",
        default="default",
        help="a shipped scenario, a .toml path, or 'all': every shipped one, taking turns",
    )
    _max_examples_option(p)
    _shrink_timeout_option(p)
    ci_outputs.add_options(p)
    _common_options(
        p,
        "diff",
        quiet={"help": "no progress, no side-by-side story"},
        database={
            "help": "Hypothesis's example database, a directory or redis://host:port/db, so a "
            "divergence found once is tried first (default: no database)"
        },
    )
    p.set_defaults(run=cmd_diff)


def _max_examples_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-examples",
        metavar="N",
        type=_positive,
        default=None,
        help="examples to search (default: the profile's budget)",
    )


def cmd_diff(args: argparse.Namespace, console: Console) -> int:
    every = args.scenario == diff.ALL_SCENARIOS
    _validate(args.a, "default" if every else args.scenario)
    _validate(args.b)
    _writable(args.report_dir, "--report-dir")
    report_dir = Path(args.report_dir)
    settings = _settings(args.profile, args.max_examples, args.database, report_dir)
    ignore = tuple(dict.fromkeys(args.ignore))
    label = f"diff {args.a} against {args.b} in {args.scenario}"
    budget = _budget(settings, every)
    with progress(console, label, budget, show=not args.quiet) as tick:
        found = diff.find(
            args.a, args.b, args.scenario, settings, ignore=ignore, seed=args.seed, progress=tick
        )
        result = found.result
        shrunk = None
        if result.failure is not None:
            shrunk = diff.minimized(
                result.failure,
                args.b,
                ignore,
                timeout=args.shrink_timeout,
                progress=tick.shrinking,
            )
    where = "every shipped scenario" if every else f"scenario {args.scenario}"
    if shrunk is None:
        if not args.quiet:
            console.print(
                f"same: {result.examples} examples of {args.a} and {args.b} in {where} "
                f"({args.profile} profile, {result.seconds:.1f} s)"
            )
            _warn_unreached(result, console)
            for line in found.broken_lines(args.a, args.b):
                console.print(f"note: {line}")
        markdown = (
            f"### peftlife diff: `{args.a}` and `{args.b}` behave the same\n\n"
            f"{result.examples} examples in {where} ({args.profile} profile)\n"
        )
        passed = ci_outputs.JunitCase(result.scenario, f"{args.a} vs {args.b}", result.seconds)
        ci_outputs.write(ci_outputs.CiOutputs("diff", markdown, (passed,)), args)
        return EXIT_HELD
    assert result.failure is not None
    case = reports.Case(
        args.a,
        result.scenario,
        shrunk.config,
        shrunk.actions,
        seed=args.seed,
        profile=args.profile,
        examples=result.examples_to_find,
        shrink_note=shrunk.shrink.note,
    )
    dcase = diff_reports.DiffCase(case, args.b, ignore)
    outcome = shrunk.outcome
    if not args.quiet:
        diff_reports.render_terminal(dcase, outcome, console)
        console.print()
    paths = _write_diff(dcase, outcome, args, console)
    written = "; reports: " + ", ".join(str(p) for p in paths.values()) if paths else ""
    console.print(
        f"divergence found after {_count(result.examples_to_find, 'example')}, shrunk to "
        f"{_count(len(case.actions), 'action')}{written}"
    )
    if outcome.divergence is None:
        console.print(
            "warning: the shrunk case did not diverge on replay (a nondeterministic SUT?)"
        )
    files = {k: v.name for k, v in paths.items()}
    markdown = diff_reports.render_markdown(dcase, outcome, files)
    divergence = outcome.divergence
    message = (
        f"divergence at iteration {divergence.iteration}"
        if divergence is not None
        else "divergence"
    )
    properties = [("peftlife_trace", reports.trace_hash(case))]
    if paths:
        properties.append(("peftlife_report", str(paths["json"])))
    story = diff_reports.terminal_text(dcase, outcome, width=100)
    jcase = ci_outputs.JunitCase(
        result.scenario,
        f"{args.a} vs {args.b}",
        result.seconds,
        message,
        story,
        tuple(properties),
    )
    ci_outputs.write(ci_outputs.CiOutputs("diff", markdown, (jcase,)), args)
    return EXIT_FOUND


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _write_diff(
    dcase: diff_reports.DiffCase,
    outcome: diff.PairOutcome,
    args: argparse.Namespace,
    console: Console,
) -> dict[str, Path]:
    """Write a divergence's reports; if they cannot be written, say so and tell the story."""
    try:
        return diff_reports.write(dcase, outcome, Path(args.report_dir))
    except OSError as err:
        if args.quiet:
            diff_reports.render_terminal(dcase, outcome, console)
        print(
            f"peftlife: could not write reports to {args.report_dir!r} ({err.strerror}); "
            "the divergence above is the whole finding",
            file=sys.stderr,
        )
        return {}


# ---- peftlife bisect ----


def _bisect_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", metavar="PATH", required=True, help="a git repository (read only)")
    p.add_argument("--good", metavar="REV", required=True, help="a commit that does not fail")
    p.add_argument("--bad", metavar="REV", required=True, help="a later commit that fails")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--case", metavar="REPORT.json", help="replay this saved case on each commit")
    what.add_argument(
        "--scenario",
        metavar="NAME",
        help="run a bounded, derandomized search on each commit (a shipped scenario, a .toml "
        "path, or 'all')",
    )
    p.add_argument(
        "--sut-prefix",
        metavar="PREFIX",
        default=bisect.DEFAULT_PREFIX,
        help="the SUT string of each commit: this prefix, then the folder its files are written "
        "to (or the folder in place of {}, as in 'trtllm:{}:ClassName')",
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
    _max_examples_option(p)
    _shrink_timeout_option(p)
    _common_options(
        p,
        "bisect",
        quiet={"help": "only the verdict and the report"},
        profile={
            "default": "ci",
            "help": "settings profile of each commit's search, derandomized unless --seed "
            "(default: ci)",
        },
        seed={"help": "a fixed seed for each commit's search (default: derandomized)"},
    )
    p.set_defaults(run=cmd_bisect)


def cmd_bisect(args: argparse.Namespace, console: Console) -> int:
    case = None
    if args.case is not None:
        try:
            case = reports.load_json(Path(args.case))
        except reports.ReportError as err:
            raise BadInput(str(err)) from err
    else:
        try:
            scenarios.load("default" if args.scenario == diff.ALL_SCENARIOS else args.scenario)
        except scenarios.ScenarioError as err:
            raise BadInput(str(err)) from err
    try:
        profile = profiles.get(args.profile)
    except profiles.ProfileError as err:
        raise BadInput(str(err)) from err
    _writable(args.report_dir, "--report-dir")
    try:
        repo = bisect.Repo.open(Path(args.repo).expanduser())
        good, bad = repo.commit(args.good, "--good"), repo.commit(args.bad, "--bad")
        candidates = repo.between(good, bad)
    except bisect.BisectError as err:
        raise BadInput(str(err)) from err
    settings = hypothesis.settings(
        profiles.for_search(profile, max_examples=args.max_examples), derandomize=True
    )
    paths = tuple(args.paths or (bisect.SCHEDULER_FILES,))

    def test(spec: str) -> bisect.Failure | None:
        if case is not None:
            outcome = checked_replay(case.config, case.actions, sut.load(spec))
            return bisect.Failure(outcome.violations[0].invariant) if outcome.violations else None
        if args.scenario == diff.ALL_SCENARIOS:
            found = hunt(spec, settings, seed=args.seed).failure
        else:
            found = search(spec, args.scenario, settings, seed=args.seed, shrink=False).failure
        return None if found is None else bisect.Failure(found.invariant, found)

    def say(probe: bisect.Probe) -> None:
        if not args.quiet:
            console.print(f"  {probe.describe()}", soft_wrap=True, highlight=False)

    with tempfile.TemporaryDirectory(prefix="peftlife-bisect-") as scratch:
        prober = bisect.Prober(repo, Path(scratch), args.sut_prefix, paths, test)
        if not args.quiet:
            console.print(
                f"bisecting {len(candidates)} commits after {good.short} (good) up to "
                f"{bad.short} (bad), about {bisect.steps(len(candidates))} steps"
            )
        ends = [prober.probe(bad), prober.probe(good)]
        for probe in ends:
            say(probe)
        problem = bisect.ends_problem(ends[1], ends[0], "a replay" if case else "a search")
        if problem:
            raise BadInput(problem)
        result = bisect.bisect(candidates, prober.probe, say)
        return _bisect_verdict(args, console, case, prober, result, good)


def _bisect_verdict(
    args: argparse.Namespace,
    console: Console,
    case: reports.Case | None,
    prober: bisect.Prober,
    result: bisect.Result,
    good: bisect.Commit,
) -> int:
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
    if case is not None:
        found = attrs.evolve(case, sut=spec)
    else:
        assert failure.found is not None
        smaller = minimized(failure.found, timeout=args.shrink_timeout)
        found = reports.Case.from_failure(smaller, seed=args.seed, profile=args.profile)
        found = attrs.evolve(found, sut=spec)
    outcome = reports.replay(found)
    if not args.quiet:
        reports.render_terminal(found, outcome, console)
        console.print()
    try:
        paths = reports.write(found, outcome, report_dir)
    except OSError as err:
        print(
            f"peftlife: could not write reports to {args.report_dir!r} ({err.strerror})",
            file=sys.stderr,
        )
        paths = {}
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
    return EXIT_FOUND if result.candidates else EXIT_HELD


def _keep(prober: bisect.Prober, commit: bisect.Commit, report_dir: Path) -> Path | None:
    """A copy of a commit's files in the report directory, or None if it cannot be written."""
    try:
        return prober.keep(commit, report_dir / f"bisect-{commit.short}")
    except OSError:
        return None


__all__ = ["add_commands", "cmd_bisect", "cmd_diff"]
