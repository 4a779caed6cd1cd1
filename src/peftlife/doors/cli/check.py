"""``peftlife check``: search one scheduler for a counterexample, shrink it and report it.

Exit codes: 0 every example held, or every finding is in the baseline; 1 a
new counterexample; 2 bad input; 130 Ctrl-C (a finding met before it, shrunk
as far as the shrink had got, is written first).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import attrs
import hypothesis
from rich.console import Console

from peftlife import reports, sut
from peftlife.checker import invariants
from peftlife.doors import baseline, outputs
from peftlife.doors.cli.common import (
    DATABASE_DEFAULT,
    EXIT_FOUND,
    EXIT_HELD,
    SCENARIO_HELP,
    SUT_HELP,
    BadInput,
    NewCommand,
    Repeated,
    budget,
    common_options,
    invariant_name,
    max_examples_option,
    note_sut_world,
    outputs_writable,
    positive,
    rerun_words,
    scenario_words,
    searched,
    seeded,
    settings,
    shrink_timeout_option,
    targets,
    teller,
    validate,
    where_searched,
)
from peftlife.doors.outputs.progress import progress
from peftlife.doors.outputs.records import Finding, Replay, RunSummary, ScenarioRun, check_command
from peftlife.doors.outputs.story import (
    for_ci,
    note_unchecked,
    trace_length,
    warn_unreached,
    written,
)
from peftlife.search import defect, events, profiles
from peftlife.search.failure import ShrinkInterrupted, minimized
from peftlife.search.hunt import SearchResult, hunt, search
from peftlife.search.scenarios import Scenario
from peftlife.search.shrink import HUNG_DEADLINE
from peftlife.world.words import count

# Rounds of a keep-going check per defect it may report: a round whose finding shrinks
# to a defect already told searches again past that one too.
ROUNDS_PER_FAILURE = 3


def add_parser(command: NewCommand) -> None:
    check = command("check", "search for a counterexample in one scheduler, or several in turn")
    check.add_argument(
        "--sut",
        action=Repeated,
        default=("reference",),
        help=f"{SUT_HELP}; repeatable: each is checked in turn (default: reference)",
    )
    check.add_argument(
        "--scenario",
        action=Repeated,
        default=("default",),
        help=f"{SCENARIO_HELP}; repeatable: every one named takes turns (default: default)",
    )
    max_examples_option(check)
    check.add_argument(
        "--exclude-invariant",
        metavar="NAME",
        type=invariant_name,
        action="append",
        default=[],
        help="leave this invariant out (repeatable; 'peftlife invariants' lists them)",
    )
    check.add_argument(
        "--baseline",
        metavar="FILE",
        default=None,
        help="known findings (a summary.json of an earlier run): they do not fail the run",
    )
    check.add_argument(
        "--max-failures",
        metavar="N",
        type=positive,
        default=1,
        help="keep going after a finding: search past each defect found (its invariant and "
        "the scheduler's calls where it broke) and report each distinct one once, up to N "
        "for each SUT (default: 1, stop at the first)",
    )
    shrink_timeout_option(check)
    outputs.add_options(check)
    common_options(
        check,
        "check",
        database={
            "help": "Hypothesis's example database, a directory or redis://host:port/db, so a "
            "failure found once (by any run pointing at it) is tried first; turns "
            f"derandomization off, --seed still fixes the search ({DATABASE_DEFAULT})"
        },
    )
    check.set_defaults(run=run)


@attrs.frozen
class _Checked:
    """One scheduler's check: its run as the summary has it, its finding's story and
    Markdown, and whether Ctrl-C stopped its shrink."""

    run: ScenarioRun
    story: str = ""
    details: str = ""
    interrupted: bool = False
    # A finding met replaying the example database: its report replays it.
    replay: str | None = None


def run(args: argparse.Namespace, console: Console) -> int:
    names = searched(args.scenario)
    # Each SUT once, however often it is named; every one loads before any is searched.
    subjects = [validate(spec) for spec in dict.fromkeys(args.sut)]
    report_dir = Path(args.report_dir)
    outputs_writable(args)
    try:
        known = baseline.load(Path(args.baseline)) if args.baseline else frozenset()
    except baseline.BaselineError as err:
        raise BadInput(str(err)) from err
    searching = settings(args.profile, args.max_examples, args.database, report_dir)
    searching = seeded(searching, args.seed, args.database)
    # A random run searches with a seed of its own choosing, so its finding can be replayed.
    # Every SUT is searched with it, so the one command reruns them all.
    args.seed = profiles.run_seed(searching, args.seed)
    checked: list[_Checked] = []
    for subject in subjects:
        checked += _check(args, console, subject, names, searching, known)
        if checked[-1].interrupted:
            break
    if not args.quiet:
        held = [s for c in checked if c.run.finding is None for s in c.run.searched]
        note_unchecked(held, console)
    rerun = rerun_command(args)
    replayed = [c.replay for c in checked if c.replay]
    if replayed and len(subjects) == 1:
        rerun = replayed[0]  # no seed finds it: its report does
    summary = RunSummary(
        "check", args.profile, tuple(c.run for c in checked), Replay(args.seed, rerun)
    )
    details = "\n\n".join(c.details for c in checked if c.details)
    stories = [c.story for c in checked]
    outputs.write(outputs.for_check(summary, stories, details), targets(args))
    if checked[-1].interrupted:
        raise KeyboardInterrupt  # what was found is written: now the one line and exit 130
    return EXIT_HELD if summary.ok else EXIT_FOUND


def _check(
    args: argparse.Namespace,
    console: Console,
    subject: sut.Resolved,
    names: list[Scenario],
    searching: hypothesis.settings,
    known: frozenset[baseline.Known],
) -> list[_Checked]:
    """Search one scheduler in the scenarios ``names``, then shrink and tell its finding;
    with ``--max-failures`` N above 1, each distinct defect's, up to N.

    Keep-going: each defect found is searched past by its signature (``search.defect``),
    the search run again from its start, so each round goes further than the one before;
    a finding that shrinks to a defect told already is not told again, and searched past
    too. Rounds end by the budget (a round that holds), by N, and by ROUNDS_PER_FAILURE.
    """
    spec = subject.spec
    examples = budget(searching, len(names))
    if not args.quiet:
        note_sut_world(spec, names, console)
    keep_going = args.max_failures > 1
    past: dict[defect.Signature, int] = {}  # each at 0: no case of it is new
    told: set[defect.Signature] = set()
    checked: list[_Checked] = []
    with invariants.excluding(args.exclude_invariant):
        for _ in range(args.max_failures * ROUNDS_PER_FAILURE):
            result, interrupted, hung = _search(
                args, console, subject, names, searching, past if keep_going else None
            )
            if result.failure is None:
                break
            past[result.signature or defect.Signature(result.failure.invariant)] = 0
            found = _report_finding(
                args,
                console,
                result,
                known,
                subject,
                hurry=interrupted and hung,
                told=told if keep_going else None,
            )
            if found is not None:
                finding, story, details = found
                replayed = None
                if result.failure.replayed and finding.report:
                    replayed = f"peftlife replay {finding.report}"
                run = ScenarioRun.of(result, examples, finding)
                checked.append(_Checked(run, story, details, interrupted, replayed))
            if interrupted or len(checked) >= args.max_failures:
                break
    if checked:
        if keep_going and not args.quiet:
            said = ", ".join(c.run.finding.invariant for c in checked if c.run.finding)
            console.print(
                f"{spec}: {count(len(checked), 'distinct defect')} (up to --max-failures "
                f"{args.max_failures}), each told once above: {said}",
                soft_wrap=True,
            )
        return checked
    if not args.quiet:
        console.print(
            f"held: {count(result.examples, 'example')} of {spec} in "
            f"{where_searched(args.scenario)} "
            f"({args.profile} profile, {result.seconds:.1f} s)"
        )
        warn_unreached(result, console)
    return [_Checked(ScenarioRun.of(result, examples))]


def _search(
    args: argparse.Namespace,
    console: Console,
    subject: sut.Resolved,
    names: list[Scenario],
    searching: hypothesis.settings,
    past: defect.Known | None,
) -> tuple[SearchResult, bool, bool]:
    """One search of ``names``, past the ``past`` defects, and the shrink of what it
    finds: the result, whether Ctrl-C stopped the shrink, and whether the finding hung."""
    label = f"checking {subject.spec} in {', '.join(args.scenario)}"
    examples = budget(searching, len(names))
    with progress(console, label, examples, show=not args.quiet) as emit:
        counted = events.counting(emit)
        if len(names) > 1:
            result = hunt(
                subject,
                searching,
                scenario_names=names,
                seed=args.seed,
                progress=counted,
                known=past,
            )
        else:
            result = search(
                subject,
                names[0],
                searching,
                seed=args.seed,
                progress=counted,
                shrink=False,
                known=past,
            )
        if result.failure is None:
            return result, False, False
        emit(events.PhaseStarted("shrinking"))
        interrupted = False
        try:
            smaller = minimized(
                result.failure,
                timeout=args.shrink_timeout,
                progress=events.shrinking(emit),
                subject=subject,
            )
        except ShrinkInterrupted as stop:  # written by the caller, then exit 130
            smaller, interrupted = stop.failure, True
        return attrs.evolve(result, found=smaller), interrupted, result.failure.hung


def _report_finding(
    args: argparse.Namespace,
    console: Console,
    result: SearchResult,
    known: frozenset[baseline.Known],
    subject: sut.Resolved,
    *,
    hurry: bool = False,
    told: set[defect.Signature] | None = None,
) -> tuple[Finding, str, str] | None:
    """Tell and write a finding; return it with its story and its Markdown.

    ``hurry``: Ctrl-C stopped the shrink of a hang, whose replay for the report then
    waits out the shrink's short deadline, not the engine's. ``told``: the defects a
    keep-going check told already, by their shrunk cases' signatures; a finding of one
    is neither told nor written again (None returned).
    """
    assert result.failure is not None
    # A finding met replaying the example database came from no seed, and says so.
    replayed = result.failure.replayed
    case = reports.Case.from_failure(
        result.failure,
        seed=None if replayed else args.seed,
        profile=reports.REPLAYED if replayed else args.profile,
        examples=result.examples_to_find,
    )
    deadline = HUNG_DEADLINE if hurry else None
    outcome = reports.replay(case, subject, schedule_deadline=deadline)
    if told is not None:
        if (named := defect.signature(outcome)) in told:
            return None
        told.add(named)
    outcome, paths = teller(args, console).case(case, outcome)
    invariant = result.failure.invariant
    trace = reports.trace_hash(case)
    is_known = baseline.Known(invariant, trace) in known
    what = "known finding (in the baseline)" if is_known else "counterexample"
    console.print(
        f"{what} found after {count(result.examples_to_find, 'example')}, {trace_length(case)}"
        f"{written(paths)}"
    )
    report = str(paths["json"]) if paths else None
    again_by = f"peftlife replay {report}" if replayed and report else None
    if again := rerun_words(args.seed, rerun_command(args, subject.spec), again_by):
        console.print(again, soft_wrap=True)
    if outcome.held:
        console.print("warning: the saved case did not fail on replay (a nondeterministic SUT?)")
    return for_ci(case, outcome, paths, invariant, is_known)


def rerun_command(args: argparse.Namespace, sut_spec: str | None = None) -> str:
    """The command that runs this search again, seed included (none when derandomized);
    ``sut_spec``: of that scheduler alone (the same seed searches each the same).

    >>> rerun_command(argparse.Namespace(sut=["reference"], scenario=["all"],
    ...     profile="peftlife-dev", max_examples=None, seed=7))
    'peftlife check --sut reference --scenario all --profile peftlife-dev --seed 7'
    """
    suts = " --sut ".join([sut_spec] if sut_spec else dict.fromkeys(args.sut))
    command = check_command(
        suts, scenario_words(args.scenario), args.profile, args.seed, args.max_examples
    )
    keep_going = getattr(args, "max_failures", 1)
    return command + (f" --max-failures {keep_going}" if keep_going > 1 else "")
