"""The peftlife command: check a scheduler, run the mutant gate, replay a report.

Exit codes: 0 every example held (or, for mutants, the reference held and
every mutant was caught); 1 a counterexample was found; 2 bad input, with a
one-line message that says how to fix it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import attrs
import hypothesis
from rich import box
from rich.console import Console
from rich.table import Table

import peftlife
from peftlife import reports, sut
from peftlife.checker import catalogue, invariants
from peftlife.doors import baseline, ci_outputs, fuzz
from peftlife.doors.progress import progress
from peftlife.search import database, explore, gate, profiles, scenarios, shrink
from peftlife.search.machine import SearchResult, hunt, minimized, search
from peftlife.sut.mutants import CATALOGUE

EXIT_HELD, EXIT_FOUND, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(Exception):
    """Bad input at the front door: exit 2 with this one-line message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, with the fix, instead of argparse's usage block.
        raise BadInput(f"{message} (see '{self.prog} --help')")


# ---- shared pieces ----


def _settings(
    profile: str,
    max_examples: int | None = None,
    url: str | None = None,
    report_dir: Path | None = None,
) -> hypothesis.settings:
    # The story is ours to tell: Hypothesis's own falsifying-example print is noise here.
    saved = None
    if url is not None:
        # A Redis database is mirrored in the report directory, so its saves survive losing it.
        local = None if report_dir is None else report_dir / "database"
        try:
            saved = database.open_database(url, local=local)
        except database.DatabaseError as err:
            raise BadInput(str(err)) from err
    return profiles.for_search(profiles.get(profile), max_examples=max_examples, database=saved)


def _profile(name: str) -> str:
    """An argparse type: a profile peftlife or Hypothesis knows."""
    try:
        profiles.get(name)
    except profiles.ProfileError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    return name


def _seconds(text: str) -> float | None:
    """An argparse type: a shrink's time cap, seconds where 0 means no cap (None)."""
    try:
        return shrink.timeout_from_text(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def _shrink_timeout_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shrink-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=shrink.DEFAULT_TIMEOUT,
        help="cap on shrinking one finding; at the cap the smallest case so far is reported, "
        f"and says so (default: {shrink.DEFAULT_TIMEOUT:g}; 0 for no cap)",
    )


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _invariant_name(name: str) -> str:
    """An argparse type: an invariant a finding can carry."""
    if name not in catalogue.names():
        known = ", ".join(catalogue.names())
        raise argparse.ArgumentTypeError(f"unknown invariant {name!r}; known: {known}")
    return name


def _validate(sut_spec: str, scenario: str | None = None) -> None:
    """The SUT imports and is wired (its factory builds a scheduler); the scenario reads."""
    try:
        sut.wired(sut_spec)
        if scenario is not None:
            scenarios.load(scenario)
    except (sut.SUTError, scenarios.ScenarioError) as err:
        raise BadInput(str(err)) from err


def _writable(directory: str, option: str) -> None:
    if problem := reports.unwritable(Path(directory), option):
        raise BadInput(problem)


# ---- peftlife check ----


def cmd_check(args: argparse.Namespace, console: Console) -> int:
    every = args.scenario == ALL_SCENARIOS
    _validate(args.sut, "default" if every else args.scenario)
    report_dir = Path(args.report_dir)
    _writable(args.report_dir, "--report-dir")
    try:
        known = baseline.load(Path(args.baseline)) if args.baseline else frozenset()
    except baseline.BaselineError as err:
        raise BadInput(str(err)) from err
    settings = _settings(args.profile, args.max_examples, args.database, report_dir)
    with invariants.excluding(args.exclude_invariant):
        label = f"checking {args.sut} in {args.scenario}"
        budget = _budget(settings, every)
        with progress(console, label, budget, show=not args.quiet) as tick:
            if every:
                result = hunt(args.sut, settings, seed=args.seed, progress=tick)
            else:
                result = search(
                    args.sut, args.scenario, settings, seed=args.seed, progress=tick, shrink=False
                )
            if result.failure is not None:
                smaller = minimized(
                    result.failure, timeout=args.shrink_timeout, progress=tick.shrinking
                )
                result = attrs.evolve(result, failure=smaller)
        found = _report_finding(args, console, result, known) if result.failure else None
    finding, story, details = found or (None, "", "")
    if finding is None and not args.quiet:
        where = "every shipped scenario" if every else f"scenario {args.scenario}"
        console.print(
            f"held: {result.examples} examples of {args.sut} in {where} "
            f"({args.profile} profile, {result.seconds:.1f} s)"
        )
        _warn_unreached(result, console)
    runs = (ci_outputs.ScenarioRun.of(result, budget, finding),)
    summary = ci_outputs.RunSummary("check", args.profile, runs)
    ci_outputs.write(ci_outputs.for_check(summary, story, details), args)
    return EXIT_HELD if summary.ok else EXIT_FOUND


def _budget(settings: hypothesis.settings, every: bool) -> int:
    """The examples a search may run: the profile's for each scenario it searches."""
    return settings.max_examples * (len(scenarios.shipped_names()) if every else 1)


def _report_finding(
    args: argparse.Namespace,
    console: Console,
    result: SearchResult,
    known: frozenset[baseline.Known],
) -> tuple[ci_outputs.Finding, str, str]:
    """Tell and write a finding; return it with its story and its Markdown."""
    assert result.failure is not None
    case = reports.Case.from_failure(
        result.failure, seed=args.seed, profile=args.profile, examples=result.examples_to_find
    )
    outcome, paths = _tell(case, args, console)
    invariant = result.failure.invariant
    trace = reports.trace_hash(case)
    is_known = baseline.Known(invariant, trace) in known
    what = "known finding (in the baseline)" if is_known else "counterexample"
    written = "; reports: " + ", ".join(str(p) for p in paths.values()) if paths else ""
    console.print(
        f"{what} found after {result.examples_to_find} examples, shrunk to "
        f"{len(case.actions)} actions{written}"
    )
    if outcome.held:
        console.print("warning: the saved case did not fail on replay (a nondeterministic SUT?)")
    report = str(paths["json"]) if paths else ""
    finding = ci_outputs.Finding(invariant, trace, report, is_known)
    story = reports.terminal_text(case, outcome, width=100)
    return finding, story, reports.render_markdown(case, outcome)


def _tell(
    case: reports.Case, args: argparse.Namespace, console: Console
) -> tuple[reports.Outcome, dict[str, Path]]:
    """Replay a case, tell its story (unless quiet), write its reports; return their paths.

    Reports that cannot be written lose nothing: the story is then told whatever
    ``-q`` says, a line says where writing failed, and no paths come back.
    """
    outcome = reports.replay(case)
    if not args.quiet:
        reports.render_terminal(case, outcome, console)
        console.print()
    try:
        return outcome, reports.write(case, outcome, Path(args.report_dir))
    except OSError as err:
        if args.quiet:
            reports.render_terminal(case, outcome, console)
        print(
            f"peftlife: could not write reports to {args.report_dir!r} ({err.strerror}); "
            "the counterexample above is the whole finding",
            file=sys.stderr,
        )
        return outcome, {}


ALL_SCENARIOS = "all"


def _warn_unreached(result: SearchResult, console: Console) -> None:
    """Say which witnesses a run never reached: a pass that never got there proved little."""
    if result.unreached:
        console.print(
            f"warning: never reached {', '.join(result.unreached)}; "
            "a longer profile or another scenario (--scenario all) may reach them"
        )


# ---- peftlife mutants ----


def cmd_mutants(args: argparse.Namespace, console: Console) -> int:
    if args.list:
        return _list_mutants(console)
    if args.json:
        _writable(str(Path(args.json).parent), "--json's directory")
    runs = gate.plan(args.profile, shrink=not args.no_shrink, shrink_timeout=args.shrink_timeout)
    show = not args.quiet
    with progress(console, "mutant gate", len(runs), show=show, unit="runs") as tick:
        table = gate.run_gate(
            runs, jobs=max(1, args.jobs), done=lambda finished: tick(finished, 0), news=tick.phase
        )
    cells = [row.cells() for row in table.rows]
    console.print(_gate_table(cells))
    console.print(table.verdict)
    if args.json:
        path = Path(args.json)
        try:
            gate.write(table, path)
            reports.write_index(path.parent)  # the report directory's index shows the gate
        except OSError as err:
            # The table above is the gate's verdict; its exit code stands.
            print(
                f"peftlife: could not write --json {args.json!r} ({err.strerror}); "
                "the table above is the whole result",
                file=sys.stderr,
            )
    ci_outputs.write(ci_outputs.for_gate(table, args.profile), args)
    return EXIT_HELD if table.ok else EXIT_FOUND


def _gate_table(cells: list[list[str]]) -> Table:
    """The gate as a table that reads at 80 columns: long names fold, no column is dropped."""
    table = Table(title="peftlife mutant gate", title_justify="left", box=box.SIMPLE_HEAD)
    for column in gate.HEADER[:4]:
        table.add_column(column, overflow="fold")
    for column in gate.HEADER[4:]:
        table.add_column(column, justify="right", no_wrap=True)
    for row in cells:
        table.add_row(*row)
    return table


def _list_mutants(console: Console) -> int:
    table = Table(title="the mutant catalogue (sut: mutant:NAME)", box=box.SIMPLE_HEAD)
    table.add_column("mutant", overflow="fold")
    table.add_column("defect", overflow="fold")
    table.add_column("caught by", overflow="fold")
    for m in CATALOGUE:
        table.add_row(m.name, m.description, ", ".join(m.acceptable))
    console.print(table)
    return EXIT_HELD


# ---- peftlife replay ----


def cmd_replay(args: argparse.Namespace, console: Console) -> int:
    try:
        case = reports.load_json(Path(args.report))
    except reports.ReportError as err:
        raise BadInput(str(err)) from err
    spec = args.sut or case.sut
    _validate(spec)
    outcome = reports.replay(case, sut=spec)
    if spec != case.sut:
        case = attrs.evolve(case, sut=spec)
    if not args.quiet:
        reports.render_terminal(case, outcome, console)
    return EXIT_HELD if outcome.held else EXIT_FOUND


# ---- peftlife fuzz ----


def cmd_fuzz(args: argparse.Namespace, console: Console) -> int:
    names = scenarios.shipped_names() if args.scenario == "all" else [args.scenario]
    for name in names:
        _validate(args.sut, name)
    if args.workers < 1:
        raise BadInput(f"--workers must be at least 1, not {args.workers}")
    if args.duration is not None and args.duration <= 0:
        raise BadInput(f"--duration must be a positive number of seconds, not {args.duration}")
    if args.max_restarts < 0:
        raise BadInput(f"--max-restarts must be 0 or more, not {args.max_restarts}")
    if args.max_examples is not None and args.max_examples < 1:
        raise BadInput(f"--max-examples must be at least 1, not {args.max_examples}")
    report_dir = Path(args.report_dir)
    _writable(args.report_dir, "--report-dir")
    if args.database is not None:
        try:  # reachable now, or exit 2: a campaign must not start on a database it cannot use
            database.open_database(args.database, local=report_dir / "database")
        except database.DatabaseError as err:
            raise BadInput(str(err)) from err
    plan = fuzz.Plan(
        sut=args.sut,
        scenarios=tuple(names),
        workers=args.workers,
        profile=args.profile,
        seed=args.seed if args.seed is not None else int(time.time()) % 1_000_000,
        report_dir=report_dir,
        database=args.database,
        duration=args.duration if args.duration or args.max_examples else 60.0,
        max_examples=args.max_examples,
        max_restarts=args.max_restarts,
        shrink_timeout=args.shrink_timeout,
    )
    campaign = fuzz.Campaign(plan, console, quiet=args.quiet)
    campaign.run()
    campaign.summary()
    return EXIT_FOUND if campaign.found else EXIT_HELD


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
    label = f"exploring {args.sut} in {scenario}"
    with progress(console, label, args.max_states, show=not args.quiet, unit="states"):
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
    _, paths = _tell(case, args, console)
    written = "; reports: " + ", ".join(str(p) for p in paths.values()) if paths else ""
    console.print(
        f"explored {result.states} states: a shortest counterexample has "
        f"{len(case.actions)} actions{written}"
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


# ---- peftlife invariants ----


def cmd_invariants(args: argparse.Namespace, console: Console) -> int:
    table = Table(title="the invariants (--exclude-invariant NAME)", box=box.SIMPLE_HEAD)
    table.add_column("invariant", overflow="fold")
    table.add_column("what it says", overflow="fold")
    for name, meaning in catalogue.meanings().items():
        table.add_row(name, meaning)
    console.print(table)
    return EXIT_HELD


# ---- the parser ----

_PROFILE_HELP = (
    "settings profile: dev, ci or nightly (peftlife-dev, peftlife-ci, peftlife-nightly) or "
    "one registered with Hypothesis (default: peftlife-ci when CI is set, else peftlife-dev)"
)
_SUT_HELP = f"the scheduler: {sut.FORMS}"

# The common options each command takes: the others would mean nothing to it (explore
# and replay run no random search, replay writes no report, mutants names no SUT of
# yours and searches derandomized). The top-level --help prints this table.
COMMON_OPTIONS: dict[str, tuple[str, ...]] = {
    "check": ("quiet", "verbose", "profile", "seed", "report_dir", "database"),
    "fuzz": ("quiet", "verbose", "profile", "seed", "report_dir", "database"),
    "explore": ("quiet", "verbose", "report_dir"),
    "replay": ("quiet", "verbose"),
    "mutants": ("quiet", "profile"),
    "diff": ("quiet", "verbose", "profile", "seed", "report_dir", "database"),
    "bisect": ("quiet", "verbose", "profile", "seed", "report_dir"),
}


def _common_specs() -> dict[str, tuple[tuple[str, ...], dict[str, Any]]]:
    """Each common option's flags and argparse keywords, defined here once.

    Built when the parser is, so the profile's default reads ``CI`` as it is then.
    """
    return {
        "quiet": (("-q", "--quiet"), {"action": "store_true", "help": "no progress, no story"}),
        "verbose": (
            ("-v", "--verbose"),
            {
                "action": "store_true",
                "help": "on bad input, also the traceback of what the SUT raised",
            },
        ),
        "profile": (
            ("--profile",),
            {
                "metavar": "NAME",
                "type": _profile,
                "default": profiles.default_name(),
                "help": _PROFILE_HELP,
            },
        ),
        "seed": (
            ("--seed",),
            {
                "metavar": "N",
                "type": int,
                "default": None,
                "help": "a fixed seed (default: the profile's randomness)",
            },
        ),
        "report_dir": (
            ("--report-dir",),
            {"metavar": "DIR", "default": "peftlife-reports", "help": "where reports go"},
        ),
        "database": (
            ("--database",),
            {
                "metavar": "URL",
                "default": None,
                "help": "Hypothesis's example database: a directory or redis://host:port/db "
                "(default: none)",
            },
        ),
    }


def _common_options(
    parser: argparse.ArgumentParser, command: str, **changes: dict[str, Any]
) -> None:
    """Add the common options ``command`` takes (``COMMON_OPTIONS``) as one group of its help.

    ``changes`` words an option for this command: ``seed={"help": ...}`` replaces its
    help, ``profile={"default": "nightly"}`` its default.
    """
    specs = _common_specs()
    group = parser.add_argument_group("common options")
    for name in COMMON_OPTIONS[command]:
        flags, keywords = specs[name]
        group.add_argument(*flags, **(keywords | changes.pop(name, {})))
    assert not changes, f"{command} does not take {sorted(changes)}"


def _common_table() -> str:
    """The top-level help's table of which command takes which common option."""
    specs = _common_specs()
    rows = [
        f"  {command:<9} " + " ".join(specs[name][0][0] for name in names)
        for command, names in COMMON_OPTIONS.items()
    ]
    return "common options, taken by the commands they apply to:\n" + "\n".join(rows)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="peftlife", description=__doc__, epilog=_common_table(), formatter_class=_Help
    )
    parser.add_argument("--version", action="version", version=f"peftlife {peftlife.__version__}")
    commands = parser.add_subparsers(
        dest="command", parser_class=_Parser, required=True, metavar="COMMAND"
    )

    def command(name: str, text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(
            name, help=text, description=text, formatter_class=_Help
        )
        return sub

    check = command("check", "search for a counterexample in one scheduler")
    check.add_argument("--sut", default="reference", help=_SUT_HELP)
    check.add_argument(
        "--scenario",
        default="default",
        help="a shipped scenario, a .toml path, or 'all': every shipped one, taking turns",
    )
    check.add_argument(
        "--max-examples",
        metavar="N",
        type=_positive,
        default=None,
        help="examples to search (default: the profile's budget)",
    )
    check.add_argument(
        "--exclude-invariant",
        metavar="NAME",
        type=_invariant_name,
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
    _shrink_timeout_option(check)
    ci_outputs.add_options(check)
    _common_options(
        check,
        "check",
        database={
            "help": "Hypothesis's example database, a directory or redis://host:port/db, so a "
            "failure found once (by any run pointing at it) is tried first; turns "
            "derandomization off, --seed still fixes the search (default: no database)"
        },
    )
    check.set_defaults(run=cmd_check)

    gate = command("mutants", "the reference and every mutant of the catalogue")
    gate.add_argument("--list", action="store_true", help="list the catalogue and stop")
    gate.add_argument("--json", default=None, help="also write the table as JSON to this file")
    gate.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    gate.add_argument("--no-shrink", action="store_true", help="skip shrinking (no step counts)")
    _shrink_timeout_option(gate)
    ci_outputs.add_options(gate)
    _common_options(gate, "mutants", quiet={"help": "no progress"})
    gate.set_defaults(run=cmd_mutants)

    replay = command("replay", "replay a saved report deterministically")
    replay.add_argument("report", help="a report's .json file")
    replay.add_argument("--sut", default=None, help="replay against this scheduler instead")
    _common_options(replay, "replay", quiet={"help": "only the exit code"})
    replay.set_defaults(run=cmd_replay)

    campaign = command("fuzz", "a long campaign over many workers sharing one example database")
    campaign.add_argument("--sut", default="reference", help=_SUT_HELP)
    campaign.add_argument(
        "--scenario", default="all", help="'all' (default), a shipped scenario or a .toml path"
    )
    campaign.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="worker processes on this machine"
    )
    campaign.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds to run (default 60 without --max-examples)",
    )
    campaign.add_argument("--max-examples", type=int, default=None, help="examples in all")
    campaign.add_argument(
        "--max-restarts",
        type=int,
        default=fuzz.MAX_RESTARTS,
        help="times a worker whose process died is started again",
    )
    _shrink_timeout_option(campaign)
    _common_options(
        campaign,
        "fuzz",
        quiet={"help": "no live table, heartbeat or finding lines: warnings and the summary"},
        profile={"default": "nightly", "help": "settings profile: how deep each example goes"},
        seed={"help": "the base seed, printed in the summary (default: from the clock)"},
        database={"help": "a directory, or redis://host:port/db shared by machines"},
    )
    campaign.set_defaults(run=cmd_fuzz)

    ex = command("explore", "every action sequence up to a depth in one small world, breadth first")
    ex.add_argument("--sut", default="reference", help=_SUT_HELP)
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
    _common_options(ex, "explore")
    ex.set_defaults(run=cmd_explore)

    listing = command("scenarios", "list the shipped scenario profiles")
    listing.set_defaults(run=cmd_scenarios)
    meanings = command("invariants", "list the invariants, each with its meaning")
    meanings.set_defaults(run=cmd_invariants)
    from peftlife.doors import compare  # diff and bisect; it imports this module's helpers

    compare.add_commands(command)
    return parser


class _Help(argparse.RawDescriptionHelpFormatter):
    """Keep the description's paragraphs as written; show each meaningful default once."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, False, [], argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


def main(argv: Sequence[str] | None = None) -> int:
    # Let a SUT string name a module of the project the command runs in, as pytest does.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    # Off a terminal (CI logs, pipes) lines are kept long rather than wrapped at 80.
    # COLUMNS, when set, wins (rich reads it), so a table can be asked for at 80 columns.
    wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    console = Console(highlight=False, width=140 if wide else None)
    args: argparse.Namespace | None = None
    try:
        parser = _parser()
        if not (argv if argv is not None else sys.argv[1:]):
            raise BadInput(
                "choose a command: check, diff, bisect, mutants, explore, replay, fuzz, "
                "scenarios or invariants (see --help)"
            )
        args = parser.parse_args(argv)
        code: int = args.run(args, console)
    except (BadInput, ci_outputs.CiOutputError) as err:
        if err.__cause__ is not None and getattr(args, "verbose", False):
            traceback.print_exception(err.__cause__, file=sys.stderr)
        print(f"peftlife: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return code


if __name__ == "__main__":
    sys.exit(main())
