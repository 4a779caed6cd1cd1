"""``peftlife explore``: every action sequence up to a depth in one small world, breadth first.

Exit codes: 0 no violation up to the depth reached; 1 a shortest
counterexample (with its reports); 2 bad input. Like ``check`` it leaves its
CI outputs (``outputs``): summary.json, the step summary and ``--junit-xml``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import attrs
from rich.console import Console

from peftlife import reports
from peftlife.checker import registry
from peftlife.doors import outputs
from peftlife.doors.cli.common import (
    EXIT_FOUND,
    EXIT_HELD,
    SUT_HELP,
    BadInput,
    NewCommand,
    Repeated,
    common_options,
    note_sut_world,
    outputs_writable,
    positive,
    read,
    single,
    targets,
    teller,
    validate,
)
from peftlife.doors.outputs.progress import progress
from peftlife.doors.outputs.records import ExplorationSummary
from peftlife.doors.outputs.story import for_ci, written
from peftlife.doors.outputs.unchecked import not_checked_note
from peftlife.search import events, scenarios
from peftlife.search.breadth import Alphabet
from peftlife.search.explore import MAX_STATES, explore
from peftlife.world.words import count


def add_parser(command: NewCommand) -> None:
    ex = command("explore", "every action sequence up to a depth in one small world, breadth first")
    ex.add_argument(
        "--sut", action=Repeated, default=("reference",), help=f"{SUT_HELP} (default: reference)"
    )
    ex.add_argument(
        "--scenario",
        action=Repeated,
        default=None,
        help="whose actions, and whose smallest world unless --world: a shipped scenario or "
        "a .toml path (default: default)",
    )
    ex.add_argument("--world", default=None, help="explore the world of this report's .json")
    ex.add_argument("--depth", type=positive, default=5, help="longest action sequence to try")
    ex.add_argument("--prompt-lens", default=None, help="prompt lengths to submit, e.g. 1,4")
    ex.add_argument("--max-new-tokens", default=None, help="output lengths to submit, e.g. 1,2")
    ex.add_argument(
        "--max-states", type=positive, default=MAX_STATES, help="stop after this many states"
    )
    ex.add_argument(
        "--invariant",
        default=None,
        metavar="NAME",
        help="look for a failure of this invariant only, passing over the others' "
        "(names: peftlife invariants)",
    )
    outputs.add_options(ex, junit_cases="one test case, failed by a counterexample")
    common_options(ex, "explore", report_dir={"help": "where the reports and summary.json go"})
    ex.set_defaults(run=run)


def run(args: argparse.Namespace, console: Console) -> int:
    config = None
    single(args.sut, "--sut", "explore", "explore one scheduler at a time")
    single(args.scenario, "--scenario", "explore", "it explores one scenario's world exhaustively")
    spec, scenario = args.sut[0], args.scenario[0] if args.scenario else None
    if scenario in scenarios.GROUPS:
        raise BadInput(
            f"explore explores one scenario's world exhaustively, not the group {scenario!r}: "
            "name one scenario ('peftlife scenarios' lists them)"
        )
    if args.world is not None:
        try:
            case = reports.load_json(Path(args.world))
        except reports.ReportError as err:
            raise BadInput(str(err)) from err
        config = case.config
        if scenario is None:  # the case's own, read again where it says
            scenario = case.scenario_path or case.scenario
    given = read(scenario or "default")
    if args.invariant is not None and args.invariant not in registry.BY_NAME:
        raise BadInput(
            f"unknown invariant {args.invariant!r}; `peftlife invariants` lists the names"
        )
    subject = validate(spec)
    outputs_writable(args)
    s = scenarios.for_sut(given, spec)
    scenario = given.name
    world = config or scenarios.smallest_world(s)
    if config is None and not args.quiet:
        note_sut_world(spec, [given], console)
    prompts = _lengths("--prompt-lens", args.prompt_lens)
    output_lens = _lengths("--max-new-tokens", args.max_new_tokens)
    letters = Alphabet.of(s, world, prompts, output_lens)
    label = f"exploring {spec} in {scenario}"
    start = time.perf_counter()
    with progress(console, label, args.max_states, show=not args.quiet, unit="states") as emit:
        result = explore(
            subject,
            given,
            depth=args.depth,
            config=world,
            alphabet=letters,
            max_states=args.max_states,
            progress=lambda states: emit(events.ExamplesRan(states)),
            invariant=args.invariant,
        )
    seconds = round(time.perf_counter() - start, 2)
    notes = tuple(not_checked_note(i, [scenario]) for i in registry.not_checked(world))
    if result.passed_over is not None:  # what --invariant looked past, for whoever wonders
        other = result.passed_over
        notes += (
            f"passed over a failure on {other.invariant} at "
            f"{count(len(other.run.actions), 'action')} "
            f"(--invariant {args.invariant})",
        )
    summary = ExplorationSummary(
        spec,
        scenario,
        result.states,
        result.depth,
        args.depth,
        args.max_states,
        result.complete,
        seconds,
        notes=notes,
    )
    if result.failure is None:
        violation = "violation" if args.invariant is None else f"violation of {args.invariant}"
        if result.complete:
            verdict = f"no {violation} up to depth {args.depth}"
        else:
            verdict = (
                f"no {violation} up to depth {result.depth}; the state limit "
                f"({args.max_states}) stopped depth {result.depth + 1} (raise --max-states)"
            )
        console.print(
            f"explored {count(result.states, 'state')} of {spec} in {scenario}: {verdict}"
        )
        for note in notes:
            console.print(f"note: {note}")
        outputs.write(outputs.for_exploration(summary, "", ""), targets(args))
        return EXIT_HELD
    case = reports.Case.from_failure(result.failure, profile=reports.EXPLORED)
    outcome, paths = teller(args, console).case(case, reports.replay(case, subject))
    console.print(
        f"explored {count(result.states, 'state')}: a shortest counterexample has "
        f"{count(len(case.actions), 'action')}{written(paths)}"
    )
    finding, story, details = for_ci(case, outcome, paths, result.failure.invariant)
    summary = attrs.evolve(summary, finding=finding)
    outputs.write(outputs.for_exploration(summary, story, details), targets(args))
    return EXIT_FOUND


def _lengths(option: str, text: str | None) -> tuple[int, ...] | None:
    """Whole numbers of at least 1 separated by commas, or None when the option is not given."""
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise BadInput(f"{option} takes whole numbers of at least 1 separated by commas, e.g. 1,4")
    return values
