"""``peftlife diff A B``: search for a trace on which two schedulers behave differently.

The first divergence found is shrunk and reported side by side. Exit codes: 0
no divergence within the budget; 1 a divergence (with its reports); 2 bad input;
130 Ctrl-C (a divergence met before it, shrunk as far as the shrink had got, is
written first).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import attrs
from rich.console import Console

from peftlife import reports, sut
from peftlife.doors import outputs
from peftlife.doors.cli.common import (
    ALL_SCENARIOS,
    DATABASE_DEFAULT,
    EXIT_FOUND,
    EXIT_HELD,
    BadInput,
    NewCommand,
    Repeated,
    budget,
    common_options,
    max_examples_option,
    note_sut_world,
    outputs_writable,
    read,
    rerun_words,
    seeded,
    settings,
    shrink_timeout_option,
    single,
    targets,
    teller,
    validate,
)
from peftlife.doors.outputs.progress import progress
from peftlife.doors.outputs.records import DiffSummary, Replay
from peftlife.doors.outputs.story import for_ci, trace_length, warn_unreached, written
from peftlife.reports import divergence as diff_reports
from peftlife.search import diff, events, profiles, scenarios
from peftlife.search.hunt import SearchResult
from peftlife.world.words import count


def add_parser(command: NewCommand) -> None:
    p = command("diff", "search for a trace on which two schedulers behave differently")
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
        action=Repeated,
        default=("default",),
        help="a shipped scenario, a .toml path, or 'all': every shipped one, taking turns "
        "(default: default)",
    )
    max_examples_option(p)
    shrink_timeout_option(p)
    outputs.add_options(p)
    common_options(
        p,
        "diff",
        quiet={"help": "no progress, no side-by-side story"},
        database={
            "help": "Hypothesis's example database, a directory or redis://host:port/db, so a "
            f"divergence found once is tried first ({DATABASE_DEFAULT})"
        },
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, console: Console) -> int:
    args.scenario = _one_scenario(args.scenario)
    every = args.scenario == ALL_SCENARIOS
    sut_a = validate(args.a)
    sut_b = validate(args.b)
    searched = [read(n) for n in (scenarios.shipped_names() if every else [args.scenario])]
    try:  # one world for both: each side's defect lives where it carries it
        scenarios.shared_world([args.a, args.b])
    except scenarios.ScenarioError as err:
        raise BadInput(str(err)) from err
    outputs_writable(args)
    if not args.quiet:
        for side in dict.fromkeys([args.a, args.b]):
            note_sut_world(side, searched, console, both=True)
    report_dir = Path(args.report_dir)
    searching = settings(args.profile, args.max_examples, args.database, report_dir)
    searching = seeded(searching, args.seed, args.database)
    # A random run searches with a seed of its own choosing, so its divergence can be replayed.
    args.seed = profiles.run_seed(searching, args.seed)
    replay = Replay(args.seed, rerun_command(args))
    ignore = tuple(dict.fromkeys(args.ignore))
    label = f"diff {args.a} against {args.b} in {args.scenario}"
    with progress(console, label, budget(searching, len(searched)), show=not args.quiet) as emit:
        found = diff.find(
            sut_a,
            sut_b,
            args.scenario if every else searched[0],
            searching,
            ignore=ignore,
            seed=args.seed,
            progress=events.counting(emit),
        )
        result = found.result
        shrunk = None
        if result.failure is not None:  # no divergence: a side took the process down
            return _died(args, console, result, replay, every, (sut_a, sut_b))
        if found.divergence is not None:
            emit(events.PhaseStarted("shrinking"))
            shrunk = diff.minimized(
                found.divergence,
                sut_b,
                ignore,
                timeout=args.shrink_timeout,
                progress=events.shrinking(emit),
                sut_a=sut_a,
            )
    where = "every shipped scenario" if every else f"scenario {args.scenario}"
    summary = DiffSummary(
        args.a,
        args.b,
        result.scenario,
        where,
        args.profile,
        result.examples,
        result.seconds,
        replay,
    )
    if shrunk is None:
        if not args.quiet:
            console.print(
                f"same: {count(result.examples, 'example')} of {args.a} and {args.b} in {where} "
                f"({args.profile} profile, {result.seconds:.1f} s)"
            )
            warn_unreached(result, console)
            for line in found.broken_lines(args.a, args.b):
                console.print(f"note: {line}")
        outputs.write(outputs.for_diff(summary), targets(args))
        return EXIT_HELD
    assert found.divergence is not None  # what was shrunk
    where_found = found.divergence.run.scenario
    case = reports.Case(
        args.a,
        where_found.name,
        shrunk.config,
        shrunk.actions,
        seed=args.seed,
        profile=args.profile,
        examples=result.examples_to_find,
        shrink_note=shrunk.shrink.note,
        scenario_path=where_found.path,
    )
    dcase = diff_reports.DiffCase(case, args.b, ignore)
    outcome = shrunk.outcome
    paths = teller(args, console).divergence(dcase, outcome)
    interrupted = shrunk.shrink.stopped == "interrupted"
    console.print(
        f"divergence found after {count(result.examples_to_find, 'example')}, "
        f"{trace_length(case)}{written(paths)}"
    )
    if found.divergence is not None and found.divergence.replayed:
        # No seed finds it: the same diff in this directory, whose database holds it, does.
        unseeded = argparse.Namespace(**{**vars(args), "seed": None})
        same_here = f"{rerun_command(unseeded)} (in this directory)"
        replay = Replay(args.seed, same_here)
        summary = attrs.evolve(summary, replay=replay)
        console.print(rerun_words(args.seed, "", same_here), soft_wrap=True)
    elif again := rerun_words(args.seed, replay.command):
        console.print(again, soft_wrap=True)
    if outcome.divergence is None:
        console.print(
            "warning: the shrunk case did not diverge on replay (a nondeterministic SUT?)"
        )
    files = {k: v.name for k, v in paths.items()}
    markdown = diff_reports.render_markdown(dcase, outcome, files)
    divergence = outcome.divergence
    summary = attrs.evolve(
        summary,
        failure="divergence"
        if divergence is None
        else f"divergence at iteration {divergence.iteration}",
        trace=reports.trace_hash(case),
        report=str(paths["json"]) if paths else None,
    )
    story = diff_reports.terminal_text(dcase, outcome, width=100)
    outputs.write(outputs.for_diff(summary, story, markdown), targets(args))
    if interrupted:
        raise KeyboardInterrupt  # what was found is written: now the one line and exit 130
    return EXIT_FOUND


def _one_scenario(words: list[str]) -> str:
    """The one scenario (or 'all') a diff searches: its search takes no other group."""
    why = "a diff searches one scenario, or all: every shipped one taking turns"
    single(words, "--scenario", "diff", why)
    if words[0] in scenarios.GROUPS and words[0] != ALL_SCENARIOS:
        raise BadInput(f"diff takes no group but all as --scenario, not {words[0]!r}: {why}")
    return words[0]


def _died(
    args: argparse.Namespace,
    console: Console,
    result: SearchResult,
    replay: Replay,
    every: bool,
    sides: tuple[sut.Resolved, sut.Resolved],
) -> int:
    """A scheduler took the search's process down: that is its own finding, not a divergence.

    The trace is replayed on each side alone (under the outside watchdog) to
    learn whose it was, and told as ``check`` tells a finding.
    """
    assert result.failure is not None
    found = reports.Case.from_failure(
        result.failure, seed=args.seed, profile=args.profile, examples=result.examples_to_find
    )
    for side in sides:
        spec = side.spec
        case = attrs.evolve(found, sut=spec)
        outcome = reports.replay(case, side)
        if outcome.held:
            continue
        outcome, paths = teller(args, console).case(case, outcome)
        console.print(
            f"{spec} took the search's process down after "
            f"{count(result.examples_to_find, 'example')}{written(paths)}"
        )
        finding, story, details = for_ci(case, outcome, paths, outcome.violations[0].invariant)
        summary = DiffSummary(
            args.a,
            args.b,
            result.scenario,
            "every shipped scenario" if every else f"scenario {args.scenario}",
            args.profile,
            result.examples,
            result.seconds,
            replay,
            failure=finding.invariant,
        )
        outputs.write(outputs.for_diff(summary, story, details), targets(args))
        return EXIT_FOUND
    raise RuntimeError(f"the search's process died, yet neither {args.a} nor {args.b} did so again")


def rerun_command(args: argparse.Namespace) -> str:
    """The command that runs this search again, seed included (none when derandomized).

    >>> rerun_command(argparse.Namespace(a="reference", b="m:S", scenario="default",
    ...     profile="peftlife-dev", max_examples=None, ignore=["order"], seed=7))
    'peftlife diff reference m:S --scenario default --profile peftlife-dev --ignore order --seed 7'
    """
    words = [f"peftlife diff {args.a} {args.b} --scenario {args.scenario}"]
    words.append(f"--profile {args.profile}")
    words += [f"--ignore {what}" for what in dict.fromkeys(args.ignore)]
    if args.max_examples is not None:
        words.append(f"--max-examples {args.max_examples}")
    if args.seed is not None:
        words.append(f"--seed {args.seed}")
    return " ".join(words)
