"""``peftlife diff A B``: search for a trace on which two schedulers behave differently.

The first divergence found is shrunk and reported side by side. Exit codes: 0
no divergence within the budget; 1 a divergence (with its reports); 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from peftlife import reports, sut
from peftlife.doors import ci_outputs
from peftlife.doors.cli.common import (
    ALL_SCENARIOS,
    DATABASE_DEFAULT,
    EXIT_FOUND,
    EXIT_HELD,
    NewCommand,
    budget,
    common_options,
    max_examples_option,
    outputs_writable,
    settings,
    shrink_timeout_option,
    validate,
)
from peftlife.doors.cli.tell import for_ci, tell_case, warn_unreached, written
from peftlife.doors.progress import progress
from peftlife.reports import divergence as diff_reports
from peftlife.search import diff
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
        default="default",
        help="a shipped scenario, a .toml path, or 'all': every shipped one, taking turns",
    )
    max_examples_option(p)
    shrink_timeout_option(p)
    ci_outputs.add_options(p)
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
    every = args.scenario == ALL_SCENARIOS
    validate(args.a, "default" if every else args.scenario)
    validate(args.b)
    outputs_writable(args)
    report_dir = Path(args.report_dir)
    searching = settings(args.profile, args.max_examples, args.database, report_dir)
    ignore = tuple(dict.fromkeys(args.ignore))
    label = f"diff {args.a} against {args.b} in {args.scenario}"
    with progress(console, label, budget(searching, every), show=not args.quiet) as tick:
        found = diff.find(
            args.a, args.b, args.scenario, searching, ignore=ignore, seed=args.seed, progress=tick
        )
        result = found.result
        shrunk = None
        if result.failure is not None:  # no divergence: a side took the process down
            return _died(args, console, result)
        if found.divergence is not None:
            shrunk = diff.minimized(
                found.divergence,
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
            warn_unreached(result, console)
            for line in found.broken_lines(args.a, args.b):
                console.print(f"note: {line}")
        markdown = (
            f"### peftlife diff: `{args.a}` and `{args.b}` behave the same\n\n"
            f"{result.examples} examples in {where} ({args.profile} profile)\n"
        )
        passed = ci_outputs.JunitCase(result.scenario, f"{args.a} vs {args.b}", result.seconds)
        ci_outputs.write(ci_outputs.CiOutputs("diff", markdown, (passed,)), args)
        return EXIT_HELD
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
    console.print(
        f"divergence found after {count(result.examples_to_find, 'example')}, shrunk to "
        f"{count(len(case.actions), 'action')}{written(paths)}"
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


def _died(args: argparse.Namespace, console: Console, result: SearchResult) -> int:
    """A scheduler took the search's process down: that is its own finding, not a divergence.

    The trace is replayed on each side alone (under the outside watchdog) to
    learn whose it was, and told as ``check`` tells a finding.
    """
    assert result.failure is not None
    run = result.failure.run
    for spec in (args.a, args.b):
        case = reports.Case(
            spec, run.scenario, run.config, run.actions, args.seed, args.profile,
            result.examples_to_find, shrunk=False,
        )  # fmt: skip
        outcome = reports.replay(case)
        if outcome.held:
            continue
        outcome, paths = tell_case(case, args, console, outcome)
        console.print(
            f"{spec} took the search's process down after "
            f"{count(result.examples_to_find, 'example')}{written(paths)}"
        )
        finding, story, details = for_ci(case, outcome, paths, outcome.violations[0].invariant)
        jcase = ci_outputs.JunitCase(
            result.scenario, f"{args.a} vs {args.b}", result.seconds, finding.invariant, story
        )
        ci_outputs.write(ci_outputs.CiOutputs("diff", details, (jcase,)), args)
        return EXIT_FOUND
    raise RuntimeError(f"the search's process died, yet neither {args.a} nor {args.b} did so again")


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
