"""What every command of ``peftlife`` shares: its errors, its parser and the common options.

``BadInput`` is bad input at the front door: ``main`` prints its one line and
exits 2. ``COMMON_OPTIONS`` says which command takes which common option
(``-q``, ``--profile``, ``--report-dir``...), and ``common_options`` adds them,
each defined once here. The argparse types refuse bad values with a message
that says how to fix them; ``validate``, ``searched`` and ``writable`` do the
same for a SUT, the scenarios and a directory before any search starts, and
``usable`` for the values of the configuration table.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import hypothesis
from rich.console import Console, RenderableType
from rich.text import Text

from peftlife import reports, sut
from peftlife.checker import registry
from peftlife.doors import config, outputs
from peftlife.doors.outputs.story import Teller
from peftlife.search import database, profiles, scenarios, shrink

EXIT_HELD, EXIT_FOUND, EXIT_BAD_INPUT = 0, 1, 2
# Ctrl-C, as a shell reports a process ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130
ALL_SCENARIOS = scenarios.ALL
SUT_HELP = f"the scheduler: {sut.FORMS}"
SCENARIO_HELP = (
    f"a shipped scenario, a group ({', '.join(scenarios.GROUPS)}: 'peftlife scenarios' "
    "lists them) or a .toml path"
)
# Without --database a search keeps the profile's: Hypothesis's own under dev and nightly.
DATABASE_DEFAULT = (
    "default: the profile's, Hypothesis's .hypothesis/ in the working directory under dev "
    "and nightly, none under ci"
)

# Adds a command to ``peftlife``, by its name and its one line of help.
NewCommand = Callable[[str, str], argparse.ArgumentParser]


class BadInput(Exception):
    """Bad input at the front door: exit 2 with this one-line message."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, with the fix, instead of argparse's usage block.
        raise BadInput(f"{message} (see '{self.prog} --help')")


class Help(argparse.RawDescriptionHelpFormatter):
    """Keep the description's paragraphs as written; show each meaningful default once."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, False, [], argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


class Repeated(argparse.Action):
    """A repeatable option: the first value given replaces its default, each later one
    is added (argparse's ``append`` would add them to the default)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, [*given, values] if isinstance(given, list) else [values])


def single(values: Sequence[str] | None, option: str, command: str, instead: str) -> None:
    """Refuse a second value of a repeatable option a command takes once: never drop it.

    >>> single(["a", "b"], "--sut", "fuzz", "start one campaign per scheduler")
    Traceback (most recent call last):
    peftlife.doors.cli.common.BadInput: fuzz takes one --sut, not 2 (a, b): start one \
campaign per scheduler
    """
    if values and len(values) > 1:
        raise BadInput(
            f"{command} takes one {option}, not {len(values)} ({', '.join(values)}): {instead}"
        )


# ---- what a command checks before it searches ----


def usable(table: config.Config) -> None:
    """The configuration table's profile and scenarios exist: told here, where the line
    can name the file, and not later as though the command line had named them."""
    where = f"{table.source}: [{config.TABLE}]"
    try:
        if table.profile is not None:
            profiles.get(table.profile)
    except profiles.ProfileError as err:
        raise BadInput(f"{where} profile: {err}") from err
    try:
        searched(table.scenario)
    except BadInput as err:
        raise BadInput(f"{where} scenario: {err}") from err


def searched(words: Sequence[str]) -> list[scenarios.Scenario]:
    """The scenarios ``--scenario`` words name (groups spelt out), each read once, here:
    the command hands the values down to its search, shrink and outputs.

    >>> [s.name for s in searched(["kv-pressure", "overlap-loop"])][:2]
    ['kv-pressure', 'overlap']
    """
    return [read(name) for name in scenarios.expand(words)]


def read(name_or_path: str) -> scenarios.Scenario:
    """One scenario a command searches, read; bad input when it does not read."""
    try:
        return scenarios.load(name_or_path)
    except scenarios.ScenarioError as err:
        raise BadInput(str(err)) from err


def scenario_words(words: Sequence[str]) -> str:
    """``--scenario`` words as a command line gives them again.

    >>> scenario_words(["kv-pressure", "default"])
    'kv-pressure --scenario default'
    """
    return " --scenario ".join(words)


def where_searched(words: Sequence[str]) -> str:
    """Where a run searched, as its verdict line says it.

    >>> where_searched(["all"]), where_searched(["kv-pressure", "default"])
    ('every shipped scenario', 'scenarios kv-pressure, default')
    """
    if len(words) > 1:
        return f"scenarios {', '.join(words)}"
    group = scenarios.GROUPS.get(words[0])
    return f"scenario {words[0]}" if group is None else group[0]


def settings(
    profile: str,
    max_examples: int | None = None,
    url: str | None = None,
    report_dir: Path | None = None,
) -> hypothesis.settings:
    # The story is ours to tell: Hypothesis's own falsifying-example print is noise here.
    saved = None
    if url is not None:
        # A Redis database is mirrored in the report directory, so its saves survive losing it.
        local = None if report_dir is None else reports.report_folder(report_dir) / "database"
        try:
            saved = database.open_database(url, local=local)
        except database.DatabaseError as err:
            raise BadInput(str(err)) from err
    return profiles.for_search(profiles.get(profile), max_examples=max_examples, database=saved)


def seeded(
    searching: hypothesis.settings, seed: int | None, url: str | None
) -> hypothesis.settings:
    """The settings of a search run with ``--seed``: one search, wherever it runs.

    The profile's example database (Hypothesis's ``.hypothesis/`` in the working
    directory) is then written but not replayed, as pytest's ``--hypothesis-seed``
    leaves it out: what an earlier run saved there would be met first, and the
    printed command would tell a different finding in each directory. A database
    named with ``--database`` is the user's to replay: its examples come first.
    """
    if seed is None or url is not None:
        return searching
    generating = [p for p in searching.phases if p != hypothesis.Phase.reuse]
    return hypothesis.settings(searching, phases=generating)


def print_table(console: Console, table: RenderableType) -> None:
    """Print a table as rich lays it out, without the spaces that pad each line to the
    table's width: a line copied from the terminal or a log ends where its text does.

    >>> from rich import box
    >>> from rich.table import Table
    >>> table = Table("name", "what", box=box.SIMPLE_HEAD)
    >>> table.add_row("a", "a longer cell"); table.add_row("b", "short")
    >>> print_table(Console(width=40), table)
    <BLANKLINE>
      name   what
     ──────────────────────
      a      a longer cell
      b      short
    <BLANKLINE>
    """
    for line in console.render_lines(table, pad=False):
        text = Text()
        for segment in line:
            text.append(segment.text, segment.style)
        text.rstrip()
        console.print(text, soft_wrap=True)


def rerun_words(seed: int | None, command: str, replayed: str | None = None) -> str:
    """The line that says how to run a finding's search again, or "" when derandomized.

    ``replayed``: the command that meets again a finding met replaying the example
    database, which came from no seed (its report's replay, or the same search in
    the same directory).

    >>> rerun_words(7, "peftlife check --seed 7")
    'seed 7: rerun with peftlife check --seed 7'
    >>> rerun_words(7, "peftlife check --seed 7", "peftlife replay r/x.json").split(": ")[1]
    'peftlife replay r/x.json meets it again'
    """
    if replayed is not None:
        return (
            f"met replaying the example database, not generated from seed {seed}: "
            f"{replayed} meets it again"
        )
    return f"seed {seed}: rerun with {command}" if seed is not None else ""


def budget(settings: hypothesis.settings, searching: int) -> int:
    """The examples a search may run: the profile's for each of the scenarios it searches."""
    return settings.max_examples * searching


def validate(sut_spec: str) -> sut.Resolved:
    """The SUT imports and is wired (its factory builds a scheduler).

    The SUT comes back resolved: the command hands it down to its search, shrink,
    replays and reports, so that it is loaded once (``sut.Resolved``).
    """
    try:
        return sut.resolve(sut_spec)
    except sut.SUTError as err:
        raise BadInput(str(err)) from err


def note_sut_world(
    sut_spec: str, searched: list[scenarios.Scenario], console: Console, *, both: bool = False
) -> None:
    """Say, before searching, where the SUT's world is not its scenarios' (a catalogue
    mutant carries the world its defect lives in) or where it cannot be caught.

    ``both``: ``diff``'s two schedulers run in that world alike, and the note says so.
    """
    if note := scenarios.sut_note(sut_spec, searched):
        console.print(f"note: {note}{' (for A and B alike)' if both else ''}", soft_wrap=True)


def writable(directory: str, option: str) -> None:
    if problem := reports.unwritable(Path(directory), option):
        raise BadInput(problem)


def outputs_writable(args: argparse.Namespace) -> None:
    """Every file the run will write can be: its report directory and its CI outputs.

    Checked before any search, so a finding is never lost, nor its exit 1 turned into
    a 2, by a path that could not be written.
    """
    if hasattr(args, "report_dir"):
        writable(args.report_dir, "--report-dir")
    if hasattr(args, "junit_xml"):
        outputs.refuse_unwritable(targets(args))


def targets(args: argparse.Namespace) -> outputs.Targets:
    """Where the command's CI outputs go, as its options say: read here once."""
    return outputs.Targets(
        getattr(args, "junit_xml", None),
        getattr(args, "summary", None),
        Path(getattr(args, "report_dir", "peftlife-reports")),
    )


def teller(args: argparse.Namespace, console: Console) -> Teller:
    """How the command tells a finding: on ``console`` unless ``-q``, reports in its folder."""
    return Teller(console, args.quiet, Path(args.report_dir))


# ---- argparse types ----


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


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def invariant_name(name: str) -> str:
    """An argparse type: an invariant a finding can carry."""
    if name not in registry.names():
        known = ", ".join(registry.names())
        raise argparse.ArgumentTypeError(f"unknown invariant {name!r}; known: {known}")
    return name


# ---- options several commands take ----


def shrink_timeout_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shrink-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=shrink.DEFAULT_TIMEOUT,
        help="cap on shrinking one finding; at the cap the smallest case so far is reported, "
        f"and says so (default: {shrink.DEFAULT_TIMEOUT:g}; 0 for no cap)",
    )


def max_examples_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-examples",
        metavar="N",
        type=positive,
        default=None,
        help="examples to search (default: the profile's budget)",
    )


_PROFILE_HELP = (
    "settings profile: dev, ci or nightly (peftlife-dev, peftlife-ci, peftlife-nightly) or "
    "one registered with Hypothesis (default: peftlife-ci when CI is set, else peftlife-dev)"
)

# The common options each command takes: the others would mean nothing to it (explore
# and replay run no random search, replay writes no report, mutants names no SUT of
# yours). The top-level --help prints this table.
# Every command that runs a scheduler holds it to the limits (--schedule-deadline,
# --memory-limit-mb), which main reads before the others (``config.Limits``).
_LIMITS = ("schedule_deadline", "memory_limit_mb")
COMMON_OPTIONS: dict[str, tuple[str, ...]] = {
    "check": ("quiet", "verbose", "profile", "seed", "report_dir", "database", *_LIMITS),
    "fuzz": ("quiet", "verbose", "profile", "seed", "report_dir", "database", *_LIMITS),
    "explore": ("quiet", "verbose", "report_dir", *_LIMITS),
    "replay": ("quiet", "verbose", *_LIMITS),
    "mutants": ("quiet", "profile", "seed", *_LIMITS),
    "diff": ("quiet", "verbose", "profile", "seed", "report_dir", "database", *_LIMITS),
    "bisect": ("quiet", "verbose", "profile", "seed", "report_dir", *_LIMITS),
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
                "help": "a fixed seed, the same search in any directory: the profile's "
                "example database is written, not replayed (default: the profile's "
                "randomness)",
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
                f"({DATABASE_DEFAULT})",
            },
        ),
        **config.limit_specs(),
    }


def common_options(
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


def common_table() -> str:
    """The top-level help's table of which command takes which common option."""
    specs = _common_specs()
    rows = [
        f"  {command:<9} " + " ".join(specs[name][0][0] for name in names)
        for command, names in COMMON_OPTIONS.items()
    ]
    return "common options, taken by the commands they apply to:\n" + "\n".join(rows)
