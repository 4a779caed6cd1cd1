"""The configuration table: ``[tool.peftlife]`` in the nearest ``pyproject.toml``.

The table is found as pytest and ruff find theirs: the nearest ``pyproject.toml``
that has one, from the working directory upward, up to the root of the
repository (a folder holding ``.git`` or ``.hg``) or of the filesystem. Its keys
(``KEYS``) are the defaults of the command-line options of the same names, in
every command that takes the option, so the one ``peftlife check`` a CI step
runs tests the scheduler the project names. Paths in it (the report directory,
a database directory, a scenario's ``.toml``) are read from the table's folder,
and a ``package.module:attr`` SUT is imported from there, as pytest reads its
ini paths.

Precedence, highest first: the command line, then the environment
(``PEFTLIFE_SCHEDULE_DEADLINE``, ``PEFTLIFE_MEMORY_LIMIT_MB``), then the table,
then peftlife's defaults. The environment sits above the file so that a CI job
can tighten a limit for one run without editing the project.

An unknown key, or a value of the wrong type, is one line that names it and
the valid keys (``ConfigError``): the doors exit 2 with it. Values are read
here into a ``Config``, typed; whether a SUT imports or a scenario loads is the
commands' own check, as for the same words on the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import attrs

TABLE = "tool.peftlife"
# The environment variables the world reads: the deadline when ``peftlife.world.engine``
# is imported (``watchdog.deadline_from_env``), the memory cap in each supervised child.
DEADLINE_ENV = "PEFTLIFE_SCHEDULE_DEADLINE"
MEMORY_ENV = "PEFTLIFE_MEMORY_LIMIT_MB"
# A folder holding one of these is a repository's root: the search for a table stops there.
VCS_MARKERS = (".git", ".hg")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message, one line, says how to fix it."""


@attrs.frozen
class Key:
    """One key of the table, as the docs list it."""

    name: str
    # What a value must be, as an error says it.
    kind: str
    option: str
    meaning: str
    default: str
    env: str | None = None


KEYS: tuple[Key, ...] = (
    Key(
        "sut",
        "a string or an array of strings",
        "--sut",
        "the scheduler under test (check checks each one given)",
        '"reference"',
    ),
    Key(
        "scenario",
        "a string or an array of strings",
        "--scenario",
        "the scenarios searched: names, groups or .toml paths",
        '"default" (fuzz: "all")',
    ),
    Key(
        "profile",
        "a string",
        "--profile",
        "the settings profile",
        "peftlife-ci under CI, else peftlife-dev",
    ),
    Key("report_dir", "a string", "--report-dir", "where reports go", '"peftlife-reports"'),
    Key(
        "database",
        "a string",
        "--database",
        "Hypothesis's example database: a directory or redis://host:port/db",
        "the profile's",
    ),
    Key(
        "shrink_timeout",
        "a number of seconds, 0 or more",
        "--shrink-timeout",
        "the cap on shrinking one finding (0: no cap)",
        "30",
    ),
    Key(
        "schedule_deadline",
        "a number of seconds above 0",
        "--schedule-deadline",
        "how long one call of the scheduler may take before it is called hung",
        "10",
        DEADLINE_ENV,
    ),
    Key(
        "memory_limit_mb",
        "a whole number of MiB, at least 1",
        "--memory-limit-mb",
        "the supervised child's memory: what the parent uses plus this",
        "4096",
        MEMORY_ENV,
    ),
)
BY_NAME = {key.name: key for key in KEYS}


@attrs.frozen
class Config:
    """The table's values, typed; None (or empty) where it leaves a key out.

    >>> Config.of({"sut": "mutant:evicts_inflight", "schedule_deadline": 2}).sut
    ('mutant:evicts_inflight',)
    """

    source: Path | None = None
    sut: tuple[str, ...] = ()
    scenario: tuple[str, ...] = ()
    profile: str | None = None
    report_dir: str | None = None
    database: str | None = None
    shrink_timeout: float | None = None
    schedule_deadline: float | None = None
    memory_limit_mb: int | None = None

    @classmethod
    def of(cls, table: Mapping[str, Any], source: Path | None = None) -> Config:
        """Read a ``[tool.peftlife]`` table; its relative paths are from ``source``'s folder."""
        where = f"{source or 'pyproject.toml'}: [{TABLE}]"
        valid = ", ".join(BY_NAME)
        values: dict[str, Any] = {}
        for name, value in table.items():
            if name not in BY_NAME:
                raise ConfigError(f"{where} has no key {name!r}; valid keys: {valid}")
            read = _READERS[name](value)
            if read is None:
                raise ConfigError(
                    f"{where} {name} must be {BY_NAME[name].kind}, not {value!r}; "
                    f"valid keys: {valid}"
                )
            values[name] = read
        if source is not None:
            _from_folder(values, source.parent)
        return cls(source=source, **values)

    def defaults(self) -> dict[str, Any]:
        """The table's values as argparse defaults, by option dest: only keys it sets."""
        given = {
            name: getattr(self, name) for name in BY_NAME if getattr(self, name) not in (None, ())
        }
        if "shrink_timeout" in given:
            given["shrink_timeout"] = given["shrink_timeout"] or None  # 0: no cap
        return given


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _texts(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, str):
        value = [value]
    ok = isinstance(value, list) and value and all(_text(v) for v in value)
    return tuple(value) if ok else None


def _number(value: Any, at_least: float, above: bool = False) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    ok = value > at_least if above else value >= at_least
    return float(value) if ok and value < float("inf") else None


def _megabytes(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return value if ok else None


_READERS: dict[str, Callable[[Any], Any]] = {
    "sut": _texts,
    "scenario": _texts,
    "profile": _text,
    "report_dir": _text,
    "database": _text,
    "shrink_timeout": lambda v: _number(v, 0),
    "schedule_deadline": lambda v: _number(v, 0, above=True),
    "memory_limit_mb": _megabytes,
}


def _from_folder(values: dict[str, Any], folder: Path) -> None:
    """Make the table's relative paths relative to its own folder."""

    def path(text: str) -> str:
        return str(folder / text) if not Path(text).is_absolute() else text

    if "report_dir" in values:
        values["report_dir"] = path(values["report_dir"])
    if "database" in values and "://" not in values["database"]:
        values["database"] = path(values["database"])
    if "scenario" in values:
        values["scenario"] = tuple(
            path(s) if s.endswith(".toml") else s for s in values["scenario"]
        )


def find(start: Path) -> tuple[Path, dict[str, Any]] | None:
    """The nearest ``pyproject.toml`` with a ``[tool.peftlife]`` table, and the table.

    From ``start`` upward, up to a repository's root or the filesystem's. A
    ``pyproject.toml`` on the way that is not TOML is a ``ConfigError``: whether it
    holds the table cannot be told.
    """
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
                raise ConfigError(f"cannot read {candidate} ({err}); fix its TOML") from err
            table = data.get("tool", {}).get("peftlife")
            if table is not None:
                if not isinstance(table, dict):
                    raise ConfigError(f"{candidate}: {TABLE} must be a table, [{TABLE}]")
                return candidate, table
        if any((folder / marker).exists() for marker in VCS_MARKERS):
            return None
    return None


def load(start: Path, env: Mapping[str, str]) -> Config:
    """The table nearest ``start`` (an empty one if none), the environment over it.

    >>> load(Path("/"), {DEADLINE_ENV: "2"}).schedule_deadline
    2.0
    """
    found = find(start)
    config = Config() if found is None else Config.of(found[1], found[0])
    return attrs.evolve(config, **from_env(env))


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """The limits the environment sets, read as strictly as the table's.

    >>> from_env({MEMORY_ENV: "512"})
    {'memory_limit_mb': 512}
    """
    found: dict[str, Any] = {}
    for key in KEYS:
        if key.env is None or not (text := env.get(key.env, "")):
            continue
        try:
            found[key.name] = _LIMIT_TYPES[key.name](text)
        except argparse.ArgumentTypeError as err:
            raise ConfigError(f"{key.env}={text!r}: {err}") from err
    return found


# ---- the limits: options read before the world is imported ----


def seconds_above_zero(text: str) -> float:
    """An argparse type: a scheduler call's deadline, seconds above 0."""
    value = _number(_parsed(text, float), 0, above=True)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def megabytes(text: str) -> int:
    """An argparse type: a memory cap, whole MiB of at least 1."""
    value = _megabytes(_parsed(text, int))
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of MiB of at least 1")
    return value


def _parsed(text: str, kind: Callable[[str], Any]) -> Any:
    with contextlib.suppress(ValueError):
        return kind(text)
    return None


_LIMIT_TYPES: dict[str, Callable[[str], Any]] = {
    "schedule_deadline": seconds_above_zero,
    "memory_limit_mb": megabytes,
}


def limit_specs() -> dict[str, tuple[tuple[str, ...], dict[str, Any]]]:
    """``--schedule-deadline`` and ``--memory-limit-mb``: each one's flags and argparse
    keywords, for the commands' parsers and the early one (``Limits.asked``)."""
    return {
        name: (
            (BY_NAME[name].option,),
            {
                "metavar": "SECONDS" if name == "schedule_deadline" else "MB",
                "type": kind,
                "default": None,
                "help": f"{BY_NAME[name].meaning} (default: ${BY_NAME[name].env}, else "
                f"[{TABLE}] {name}, else {BY_NAME[name].default})",
            },
        )
        for name, kind in _LIMIT_TYPES.items()
    }


class _Early(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


@attrs.frozen
class Limits:
    """The deadline and the memory cap a run is held to; None keeps the world's default."""

    schedule_deadline: float | None = None
    memory_limit_mb: int | None = None

    @classmethod
    def asked(cls, argv: Sequence[str], config: Config) -> Limits:
        """The limits ``argv`` gives, else ``config``'s: read before any command is built,
        since the world reads its deadline once, as it is imported.

        >>> Limits.asked(["check", "--schedule-deadline", "2"], Config(memory_limit_mb=64))
        Limits(schedule_deadline=2.0, memory_limit_mb=64)
        """
        early = _Early(add_help=False)
        for flags, keywords in limit_specs().values():
            early.add_argument(*flags, **keywords)
        early.set_defaults(
            schedule_deadline=config.schedule_deadline, memory_limit_mb=config.memory_limit_mb
        )
        args, _ = early.parse_known_args(argv)
        return cls(args.schedule_deadline, args.memory_limit_mb)

    def environment(self) -> dict[str, str]:
        """The limits as the world reads them, from the environment."""
        values = {DEADLINE_ENV: self.schedule_deadline, MEMORY_ENV: self.memory_limit_mb}
        # repr: a float the world reads back exactly, and a whole number as digits.
        return {name: repr(value) for name, value in values.items() if value is not None}


@contextlib.contextmanager
def applied(limits: Limits) -> Iterator[None]:
    """The limits in this process's environment, for the world and every worker it starts;
    the environment as it was after the block."""
    saved = {name: os.environ.get(name) for name in (DEADLINE_ENV, MEMORY_ENV)}
    os.environ.update(limits.environment())
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
