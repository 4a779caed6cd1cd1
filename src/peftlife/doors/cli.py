"""The ``peftlife`` command: check a scheduler, run the mutant gate, replay a report.

Exit codes: 0 every example held (or, for ``mutants``, the reference held and
every mutant was caught); 1 a counterexample was found; 2 bad input, with a
one-line message that says how to fix it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import attrs
import hypothesis
from rich import box
from rich.console import Console
from rich.table import Table

from peftlife import reports, sut
from peftlife.search import explore, profiles, scenarios
from peftlife.search.machine import SearchResult, hunt, minimized, search
from peftlife.sut.mutants import CATALOGUE, Mutant

EXIT_HELD, EXIT_FOUND, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(Exception):
    """Bad input at the front door: exit 2 with this one-line message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, with the fix, instead of argparse's usage block.
        raise BadInput(f"{message} (see '{self.prog} --help')")


# ---- shared pieces ----


def _settings(profile: str) -> hypothesis.settings:
    # The story is ours to tell: Hypothesis's own falsifying-example print is noise here.
    return hypothesis.settings(profiles.get(profile), verbosity=hypothesis.Verbosity.quiet)


def _validate(sut_spec: str, scenario: str) -> None:
    try:
        sut.load(sut_spec)
        scenarios.load(scenario)
    except (sut.SUTError, scenarios.ScenarioError) as err:
        raise BadInput(str(err)) from err


@contextmanager
def _progress(console: Console, label: str, show: bool) -> Iterator[Callable[[int, int], None]]:
    """A status line (examples, iterations, elapsed) on a terminal; silent elsewhere."""
    if not (show and console.is_terminal):
        yield lambda examples, iterations: None
        return
    start = time.perf_counter()
    with console.status(label) as status:

        def update(examples: int, iterations: int) -> None:
            elapsed = time.perf_counter() - start
            status.update(f"{label}: {examples} examples, {iterations} iterations, {elapsed:.0f} s")

        yield update


# ---- peftlife check ----


def cmd_check(args: argparse.Namespace, console: Console) -> int:
    every = args.scenario == ALL_SCENARIOS
    _validate(args.sut, "default" if every else args.scenario)
    if Path(args.report_dir).exists() and not Path(args.report_dir).is_dir():
        raise BadInput(f"--report-dir {args.report_dir!r} is a file; name a directory")
    settings = _settings(args.profile)
    with _progress(console, f"checking {args.sut} in {args.scenario}", not args.quiet) as tick:
        if every:
            result = hunt(args.sut, settings, seed=args.seed, shrink=True, progress=tick)
        else:
            result = search(args.sut, args.scenario, settings, seed=args.seed, progress=tick)
    if result.failure is None:
        if not args.quiet:
            where = "every shipped scenario" if every else f"scenario {args.scenario}"
            console.print(
                f"held: {result.examples} examples of {args.sut} in {where} "
                f"({args.profile} profile, {result.seconds:.1f} s)"
            )
            _warn_unreached(result, console)
        return EXIT_HELD
    case = reports.Case.from_failure(result.failure, seed=args.seed, profile=args.profile)
    outcome, written = _tell(case, args, console)
    console.print(
        f"counterexample found after {result.examples_to_find} examples, shrunk to "
        f"{len(case.actions)} actions; reports: {written}"
    )
    if outcome.held:
        console.print("warning: the saved case did not fail on replay (a nondeterministic SUT?)")
    return EXIT_FOUND


def _tell(
    case: reports.Case, args: argparse.Namespace, console: Console
) -> tuple[reports.Outcome, str]:
    """Replay a case, tell its story (unless quiet), write its reports; name the files."""
    outcome = reports.replay(case)
    if not args.quiet:
        reports.render_terminal(case, outcome, console)
        console.print()
    try:
        paths = reports.write(case, outcome, Path(args.report_dir))
    except OSError as err:
        raise BadInput(f"cannot write reports to {args.report_dir!r}: {err.strerror}") from err
    return outcome, ", ".join(str(p) for p in paths.values())


ALL_SCENARIOS = "all"


def _warn_unreached(result: SearchResult, console: Console) -> None:
    """Say which witnesses a run never reached: a pass that never got there proved little."""
    if result.unreached:
        console.print(
            f"warning: never reached {', '.join(result.unreached)}; "
            "a longer profile or another scenario (--scenario all) may reach them"
        )


# ---- peftlife mutants ----


@attrs.frozen
class GateRow:
    mutant: str
    caught: bool
    scenario: str
    invariant: str
    acceptable: bool
    examples: int
    shrunk_steps: int | None
    seconds: float


def gate_one(mutant: Mutant, profile: str, shrink: bool) -> GateRow:
    """Hunt the mutant through the shipped scenarios; shrink what was found."""
    start = time.perf_counter()
    found = hunt(f"mutant:{mutant.name}", _settings(profile))
    if found.failure is None:
        return GateRow(
            mutant.name, False, "-", "-", False, found.examples_to_find, None, _since(start)
        )
    failure = minimized(found.failure) if shrink else found.failure
    invariant = found.failure.invariant
    return GateRow(
        mutant.name,
        True,
        found.scenario,
        invariant,
        invariant in mutant.acceptable,
        found.examples_to_find,
        len(failure.run.actions) if shrink else None,
        _since(start),
    )


def _since(start: float) -> float:
    return round(time.perf_counter() - start, 1)


def _reference_row(scenario: str, profile: str) -> GateRow:
    result = search("reference", scenario, _settings(profile), shrink=False)
    invariant = "-" if result.failure is None else result.failure.invariant
    return GateRow(
        f"reference @ {scenario}",
        result.failure is not None,
        scenario,
        invariant,
        result.failure is None,
        result.examples,
        None,
        round(result.seconds, 1),
    )


def cmd_mutants(args: argparse.Namespace, console: Console) -> int:
    jobs = max(1, args.jobs)
    tasks: list[tuple[Callable[..., GateRow], tuple[Any, ...]]] = [
        (_reference_row, (scenario, args.profile)) for scenario in scenarios.shipped_names()
    ]
    tasks += [(gate_one, (m, args.profile, not args.no_shrink)) for m in CATALOGUE]
    with _progress(console, "running the mutant gate", not args.quiet) as tick:
        if jobs == 1:
            rows = []
            for fn, fn_args in tasks:
                rows.append(fn(*fn_args))
                tick(len(rows), 0)
        else:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                rows = list(pool.map(_call, tasks))
    reference = [r for r in rows if r.mutant.startswith("reference")]
    mutants = [r for r in rows if not r.mutant.startswith("reference")]
    ok = all(r.acceptable for r in reference) and all(r.caught and r.acceptable for r in mutants)
    table = Table(title="peftlife mutant gate", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("mutant", "caught", "scenario", "invariant"):
        table.add_column(column, no_wrap=True)
    for column in ("examples to find", "shrunk steps", "seconds"):
        table.add_column(column, justify="right")
    for r in reference:
        held = "held" if r.acceptable else "FAILED"
        table.add_row(
            "reference", held, r.scenario, r.invariant, str(r.examples), "-", f"{r.seconds:.1f}"
        )
    for r in mutants:
        caught = ("yes" if r.acceptable else "yes, unexpected invariant") if r.caught else "NO"
        steps = "-" if r.shrunk_steps is None else str(r.shrunk_steps)
        table.add_row(
            r.mutant, caught, r.scenario, r.invariant, str(r.examples), steps, f"{r.seconds:.1f}"
        )
    console.print(table)
    verdict = "the reference held and every mutant was caught" if ok else "the gate FAILED"
    console.print(verdict)
    if args.json:
        path = Path(args.json)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            table_json = {"ok": ok, "rows": [attrs.asdict(r) for r in rows]}
            path.write_text(json.dumps(table_json, indent=1) + "\n", "utf-8")
        except OSError as err:
            raise BadInput(f"cannot write --json {args.json!r}: {err.strerror}") from err
    return EXIT_HELD if ok else EXIT_FOUND


def _call(task: tuple[Callable[..., GateRow], tuple[Any, ...]]) -> GateRow:
    fn, fn_args = task
    return fn(*fn_args)


# ---- peftlife replay ----


def cmd_replay(args: argparse.Namespace, console: Console) -> int:
    try:
        case = reports.load_json(Path(args.report))
    except reports.ReportError as err:
        raise BadInput(str(err)) from err
    spec = args.sut or case.sut
    try:
        sut.load(spec)
    except sut.SUTError as err:
        raise BadInput(str(err)) from err
    outcome = reports.replay(case, sut=spec)
    if spec != case.sut:
        case = attrs.evolve(case, sut=spec)
    if not args.quiet:
        reports.render_terminal(case, outcome, console)
    return EXIT_HELD if outcome.held else EXIT_FOUND


# ---- peftlife explore ----


def _lengths(option: str, text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise BadInput(f"{option} takes whole numbers of at least 1 separated by commas, e.g. 1,4")
    return values


def cmd_explore(args: argparse.Namespace, console: Console) -> int:
    if args.depth < 1:
        raise BadInput("--depth must be at least 1")
    config = None
    scenario = args.scenario
    if args.world is not None:
        try:
            case = reports.load_json(Path(args.world))
        except reports.ReportError as err:
            raise BadInput(str(err)) from err
        config, scenario = case.config, args.scenario or case.scenario
    scenario = scenario or "default"
    _validate(args.sut, scenario)
    s = scenarios.load(scenario)
    world = config or scenarios.smallest_world(s)
    prompts = _lengths("--prompt-lens", args.prompt_lens)
    outputs = _lengths("--max-new-tokens", args.max_new_tokens)
    letters = explore.Alphabet.of(s, world, prompts, outputs)
    with _progress(console, f"exploring {args.sut} in {scenario}", not args.quiet):
        result = explore.explore(
            args.sut,
            scenario,
            depth=args.depth,
            config=world,
            alphabet=letters,
            max_states=args.max_states,
        )
    if result.failure is None:
        if result.complete:
            verdict = f"no violation up to depth {args.depth}"
        else:
            verdict = (
                f"no violation up to depth {result.depth}; the state limit "
                f"({args.max_states}) stopped depth {result.depth + 1} (raise --max-states)"
            )
        console.print(f"explored {result.states} states of {args.sut} in {scenario}: {verdict}")
        return EXIT_HELD
    case = reports.Case.from_failure(result.failure, profile="explore")
    _, written = _tell(case, args, console)
    console.print(
        f"explored {result.states} states: a shortest counterexample has "
        f"{len(case.actions)} actions; reports: {written}"
    )
    return EXIT_FOUND


# ---- peftlife scenarios ----


def cmd_scenarios(args: argparse.Namespace, console: Console) -> int:
    table = Table(title="shipped scenario profiles (--scenario NAME, or a path to a .toml)")
    table.add_column("name")
    table.add_column("what it stresses")
    for name in scenarios.shipped_names():
        table.add_row(name, scenarios.load(name).description)
    console.print(table)
    return EXIT_HELD


# ---- the parser ----


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="peftlife", description=__doc__)
    commands = parser.add_subparsers(
        dest="command", parser_class=_Parser, required=True, metavar="COMMAND"
    )

    check = commands.add_parser("check", help="search for a counterexample in one scheduler")
    check.add_argument("--sut", default="reference", help=f"the scheduler: {sut.FORMS}")
    check.add_argument(
        "--scenario",
        default="default",
        help="a shipped scenario, a .toml path, or 'all' (every shipped one, taking turns)",
    )
    check.add_argument("--profile", default="ci", choices=profiles.NAMES)
    check.add_argument(
        "--seed", type=int, default=None, help="a fixed seed (default: derandomized)"
    )
    check.add_argument("--report-dir", default="peftlife-reports", help="where reports go")
    check.add_argument("-q", "--quiet", action="store_true", help="no progress, no story")
    check.set_defaults(run=cmd_check)

    gate = commands.add_parser("mutants", help="the reference and every mutant of the catalogue")
    gate.add_argument("--profile", default="ci", choices=profiles.NAMES)
    gate.add_argument("--json", default=None, help="also write the table as JSON to this file")
    gate.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    gate.add_argument("--no-shrink", action="store_true", help="skip shrinking (no step counts)")
    gate.add_argument("-q", "--quiet", action="store_true")
    gate.set_defaults(run=cmd_mutants)

    replay = commands.add_parser("replay", help="replay a saved report deterministically")
    replay.add_argument("report", help="a report's .json file")
    replay.add_argument("--sut", default=None, help="replay against this scheduler instead")
    replay.add_argument("-q", "--quiet", action="store_true")
    replay.set_defaults(run=cmd_replay)

    ex = commands.add_parser(
        "explore", help="every action sequence up to a depth in one small world, breadth first"
    )
    ex.add_argument("--sut", default="reference", help=f"the scheduler: {sut.FORMS}")
    ex.add_argument(
        "--scenario",
        default=None,
        help="whose actions, and whose smallest world unless --world (default: default)",
    )
    ex.add_argument("--world", default=None, help="explore the world of this report's .json")
    ex.add_argument("--depth", type=int, default=5, help="longest action sequence to try")
    ex.add_argument("--prompt-lens", default=None, help="prompt lengths to submit, e.g. 1,4")
    ex.add_argument("--max-new-tokens", default=None, help="output lengths to submit, e.g. 1,2")
    ex.add_argument(
        "--max-states", type=int, default=explore.MAX_STATES, help="stop after this many states"
    )
    ex.add_argument("--report-dir", default="peftlife-reports", help="where reports go")
    ex.add_argument("-q", "--quiet", action="store_true", help="no progress, no story")
    ex.set_defaults(run=cmd_explore)

    listing = commands.add_parser("scenarios", help="list the shipped scenario profiles")
    listing.set_defaults(run=cmd_scenarios)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Let a SUT string name a module of the project the command runs in, as pytest does.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    # Off a terminal (CI logs, pipes) lines are kept long rather than wrapped at 80.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
    try:
        parser = _parser()
        if not (argv if argv is not None else sys.argv[1:]):
            raise BadInput(
                "choose a command: check, mutants, explore, replay or scenarios (see --help)"
            )
        args = parser.parse_args(argv)
        code: int = args.run(args, console)
    except BadInput as err:
        print(f"peftlife: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return code


if __name__ == "__main__":
    sys.exit(main())
