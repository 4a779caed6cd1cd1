"""The pytest plugin, registered through the ``pytest11`` entry point.

A ``lifecycle_machine(...).TestCase`` collected under pytest runs as
``peftlife check`` does: no Hypothesis shrink phase, peftlife's own shrinker,
one failure (the first invariant), and the failure message is the story, the
same text as the terminal report. Its reports are written by default.

Options (each also an ini option in ``[tool.pytest.ini_options]``, without
the leading dashes and with underscores):

* ``--peftlife-sut SPEC``: run every lifecycle machine, the kept regression
  tests and the ``peftlife_search`` fixture against this scheduler;
* ``--peftlife-scenario NAME|PATH``: search every lifecycle machine and the
  fixture in this scenario;
* ``--peftlife-profile NAME``: the settings profile of peftlife's machines
  (default: the profile loaded into Hypothesis, by ``settings.load_profile`` in
  a ``conftest.py`` or by ``--hypothesis-profile``, else ``peftlife-ci`` when
  ``CI`` is set, else ``peftlife-dev``; ``profiles.chosen``); other tests keep
  whatever Hypothesis profile they had;
* ``--peftlife-report-dir DIR``: where a failing machine test writes its JSON,
  Markdown and regression-test reports (default ``peftlife-reports``);
* ``--peftlife-shrink-timeout SECONDS``: the cap on shrinking one finding
  (default 30; 0 for no cap). While a finding shrinks for longer than a few
  seconds, a line on the terminal says how far it got;
* ``--peftlife-memory-limit-mb MB``: the supervised child's memory, what the
  parent uses plus this (over ``PEFTLIFE_MEMORY_LIMIT_MB``, over the ini option).

The scheduler deadline is read as peftlife is imported, before any option is:
under pytest it is ``PEFTLIFE_SCHEDULE_DEADLINE`` alone (docs/configuration.md).

A failing machine test also gets the violated invariant, the report path, the
seed and the command that reruns it as properties in the JUnit XML
(``--junitxml``), and its story ends with that command (``--hypothesis-seed=N``;
for a finding met replaying the example database, its kept regression test). Hypothesis's own
``--hypothesis-seed``, ``--hypothesis-profile``, ``--hypothesis-verbosity``
and ``--hypothesis-show-statistics`` apply to machines as to any Hypothesis test.
Ctrl-C while a finding shrinks reports it shrunk so far (reports written), then
stops the run as Ctrl-C does.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import sys
import tempfile
import time
import traceback
import types
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import Phase

from peftlife import reports, sut
from peftlife.doors import config as settings
from peftlife.search import compat, database, events, profiles, scenarios, session, shrink
from peftlife.search.failure import LifecycleFailure, ShrinkInterrupted, minimized
from peftlife.search.hunt import SearchResult, describe, session_search

DEFAULT_REPORT_DIR = "peftlife-reports"
_OPTIONS = {
    "peftlife_sut": f"scheduler under test for every lifecycle machine: {sut.FORMS}",
    "peftlife_scenario": "scenario for every lifecycle machine: a shipped name or a .toml path",
    "peftlife_profile": "settings profile of peftlife's machines: peftlife-dev, peftlife-ci or "
    "peftlife-nightly (default: the profile loaded into Hypothesis, else peftlife-ci when CI "
    "is set, else peftlife-dev)",
    "peftlife_report_dir": f"where counterexample reports go (default {DEFAULT_REPORT_DIR})",
    "peftlife_database": "example database of peftlife's machines, a directory or "
    "redis://host:port/db: failures saved by any run pointing at it are tried first",
    "peftlife_shrink_timeout": "seconds to shrink one finding before reporting the smallest "
    f"case so far (default {shrink.DEFAULT_TIMEOUT:g}; 0 for no cap)",
    "peftlife_memory_limit_mb": "MiB the supervised child may use beyond what the parent "
    f"uses (default: ${settings.MEMORY_ENV}, else 4096)",
}
# Seconds of shrinking between two lines on the terminal saying how far it got.
SHRINK_HEARTBEAT = 5.0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("peftlife", "peftlife lifecycle harness")
    for name, text in _OPTIONS.items():
        group.addoption("--" + name.replace("_", "-"), dest=name, default=None, help=text)
        parser.addini(name, text, default=None)


def _value(config: pytest.Config, name: str) -> str | None:
    """The command-line value, else the ini value, else None."""
    value: str | None = config.getoption(name) or config.getini(name) or None
    return value


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before Hypothesis's own plugin reads --hypothesis-profile, so the peftlife
    # names work there too; adding them replaces no profile.
    profiles.register()
    # Bad input at the front door: a usage error, the command line's one line.
    resolved, read = None, None
    try:
        if spec := _value(config, "peftlife_sut"):
            resolved = sut.resolve(spec)  # once for the session, handed to every machine
        if scenario := _value(config, "peftlife_scenario"):
            read = scenarios.load(scenario)  # so is the scenario
        if profile := _value(config, "peftlife_profile"):
            profiles.get(profile)
        shrink_timeout = _shrink_timeout(config)
        memory = _memory_limit(config)
    except (sut.SUTError, scenarios.ScenarioError, profiles.ProfileError, ValueError) as err:
        raise _usage_error(config, err) from err
    if memory is not None:  # read by each supervised child as it starts; restored at the end
        held = contextlib.ExitStack()
        held.enter_context(settings.applied(settings.Limits(memory_limit_mb=memory)))
        config.add_cleanup(held.close)
    if _value(config, "peftlife_report_dir"):
        where = "--peftlife-report-dir"
        if problem := reports.unwritable(_report_dir(config), where):
            raise pytest.UsageError(f"peftlife: error: {problem}")
    saved = None
    if url := _value(config, "peftlife_database"):
        try:
            local = reports.report_folder(_report_dir(config)) / "database"
            saved = database.open_database(url, local=local, option="--peftlife-database")
        except database.DatabaseError as err:
            raise pytest.UsageError(f"peftlife: error: {err}") from err
    session.begin(
        session.Options(
            sut=resolved,
            scenario=read,
            profile=_value(config, "peftlife_profile"),
            database=saved,
            shrink_timeout=shrink_timeout,
            shrink_progress=_shrink_heartbeat(config),
        )
    )
    config.stash[_began] = True


_began = pytest.StashKey[bool]()

# What a test file or a kept regression test names badly: a SUT or a scenario. Met while
# collecting or running, it is bad input all the same, not a finding.
_BAD_INPUT = (sut.SUTError, scenarios.ScenarioError)


def _usage_error(config: pytest.Config, err: Exception, where: str = "") -> pytest.UsageError:
    """Bad input as pytest's usage error (exit 4): the command line's one line."""
    # Under -v, what the SUT raised comes first, as the command line's -v shows it.
    shown = err.__cause__ is not None and config.get_verbosity() > 0
    trace = "".join(traceback.format_exception(err.__cause__)) if shown else ""
    return pytest.UsageError(f"{trace}peftlife: error: {where}{err}")


def _bad_input(error: BaseException | None) -> Exception | None:
    """The SUT or scenario error behind ``error``, if bad input is what it was."""
    while error is not None:
        if isinstance(error, _BAD_INPUT):
            return error
        error = error.__cause__ or error.__context__
    return None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """``lifecycle_machine("nosuch.mod:X")`` in a test file: a usage error, not a traceback."""
    rep = yield
    call = getattr(rep, "call", None)  # pytest's CallInfo of the collection, when it failed
    err = _bad_input(call.excinfo.value) if rep.failed and call and call.excinfo else None
    if err is None and rep.passed and isinstance(collector, pytest.Module):
        err = _unloadable_kept_case(collector)
    if err is None:
        return rep
    error = _usage_error(collector.config, err, f"{collector.nodeid}: ")
    if hasattr(collector.config, "workerinput"):
        # An xdist worker cannot stop the run: its collection error is the one line
        # instead, marked so that the controller ends the run with pytest's exit 4.
        rep.outcome, rep.longrepr = "failed", str(error)
        setattr(rep, _USAGE_MARK, True)  # a report's attributes travel to the controller
        return rep
    raise error


# The mark of a collection error that is a usage error, in a report an xdist worker sends.
_USAGE_MARK = "peftlife_usage_error"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under pytest-xdist, a usage error met by a worker as it collected ends the
    run with exit 4, as it does without xdist. The workers collect, so the error
    reaches the controller as a collection error (the one line) only after the
    other tests may have run; the exit code is what can still be made the same."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    errors = getattr(reporter, "stats", {}).get("error", [])
    if any(getattr(rep, _USAGE_MARK, False) for rep in errors):
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


def _unloadable_kept_case(module: pytest.Module) -> Exception | None:
    """The SUT error of a kept regression test whose scheduler cannot be loaded, if any.

    Checked as it is collected, as ``peftlife replay`` checks before replaying: a kept
    test that cannot load its SUT is bad input, not the defect still being there.
    """
    case = getattr(module.obj, "CASE", None)
    if not reports.is_kept_test(module.obj.__doc__) or not isinstance(case, dict):
        return None
    spec = _value(module.config, "peftlife_sut") or case.get("sut")
    try:
        sut.load(str(spec))
    except sut.SUTError as err:
        return err
    return None


def _shrink_timeout(config: pytest.Config) -> float | None:
    text = _value(config, "peftlife_shrink_timeout")
    if text is None:
        return shrink.DEFAULT_TIMEOUT
    try:
        return shrink.timeout_from_text(text)
    except ValueError as err:
        raise ValueError(f"--peftlife-shrink-timeout {err}") from err


def _memory_limit(config: pytest.Config) -> int | None:
    """``--peftlife-memory-limit-mb``, else ``PEFTLIFE_MEMORY_LIMIT_MB``, else the ini's."""
    given = (
        ("--peftlife-memory-limit-mb", config.getoption("peftlife_memory_limit_mb")),
        (settings.MEMORY_ENV, os.environ.get(settings.MEMORY_ENV)),
        ("peftlife_memory_limit_mb", config.getini("peftlife_memory_limit_mb")),
    )
    for where, text in given:
        if text:
            try:
                return settings.megabytes(str(text))
            except argparse.ArgumentTypeError as err:
                raise ValueError(f"{where} {err}") from err
    return None


def _shrink_heartbeat(
    config: pytest.Config, clock: Callable[[], float] = time.monotonic
) -> Callable[[shrink.ShrinkProgress], None]:
    """A line on pytest's terminal every ``SHRINK_HEARTBEAT`` seconds while a finding shrinks.

    Written past pytest's capture, as its live logs are; silent where there is no
    terminal reporter (an xdist worker, say). The reporter is looked up as a line
    is due: it is registered after this plugin is configured.

    A shrink is timed from the first step this heartbeat hears of it. Steps reach
    it as the search's supervisor polls its child, so the first one heard may count
    many replays already; a new shrink is the first step heard, or one whose replay
    count went down (each shrink counts its own from one).
    """
    began: float | None = None
    last_replays = 0
    beat = events.Throttle(SHRINK_HEARTBEAT, clock)

    def line(step: events.Event) -> None:
        nonlocal began, last_replays, beat
        assert isinstance(step, events.ShrinkStep)
        if began is None or step.replays < last_replays:
            # A new shrink: its first line one period from now.
            began = clock()
            beat = events.Throttle(SHRINK_HEARTBEAT, clock)
            beat.restart()
        last_replays = step.replays
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or not beat.due():
            return
        capture = config.pluginmanager.get_plugin("capturemanager")
        paused = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
        with paused:
            reporter.write_line(f"peftlife: {step.describe()}, {clock() - began:.0f} s")

    return events.shrinking(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_began, False):
        session.end()


def _report_dir(config: pytest.Config) -> Path:
    if option := config.getoption("peftlife_report_dir"):
        return Path(option)
    if ini := config.getini("peftlife_report_dir"):
        # An ini path is relative to the ini file, as pytest's own paths are.
        base = config.inipath.parent if config.inipath else config.rootpath
        return base / str(ini)
    return Path(DEFAULT_REPORT_DIR)


_resolved_report_dir = pytest.StashKey[Path]()


_session = pytest.StashKey[pytest.Session]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_session] = session


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave reports out: the report directory, and a regression test still beside the
    JSON report it was written with (a ``--report-dir`` of ``peftlife check``, say)
    unless its folder is named on the command line. A regression test is kept by
    moving it out; a path named on the command line is collected whatever it is."""
    # Asked for every path collected: resolve the directory once.
    if _resolved_report_dir not in config.stash:
        config.stash[_resolved_report_dir] = _report_dir(config).resolve()
    if collection_path.resolve() == config.stash[_resolved_report_dir]:
        return True
    if _beside_its_report(collection_path):
        session = config.stash.get(_session, None)
        return session is None or not session.isinitpath(collection_path.parent)
    return None


def _beside_its_report(path: Path) -> bool:
    """Whether ``path`` is a regression test in the folder its report was written to.

    >>> _beside_its_report(Path("reports/test_peftlife_x_0a1b2c3d.py"))
    False
    """
    name = path.name
    if not (name.startswith(reports.KEPT_TEST_PREFIX) and name.endswith(".py")):
        return False
    stem = name.removeprefix(reports.KEPT_TEST_PREFIX).removesuffix(".py")
    return path.with_name(f"{stem}.json").is_file()


def pytest_pycollect_makemodule(
    module_path: Path, parent: pytest.Collector
) -> pytest.Module | None:
    """A kept regression test is imported under its whole path, not its bare file name.

    Its name ends in the hash of its trace, so the same finding reported into two
    folders (``peftlife-reports/`` and ``reports/``, or a copy kept in ``tests/``)
    gives two files of one name, which pytest's default import would refuse as an
    "import file mismatch".
    """
    if module_path.name.startswith(reports.KEPT_TEST_PREFIX) and module_path.suffix == ".py":
        module: pytest.Module = _KeptTest.from_parent(parent, path=module_path)
        return module
    return None


class _KeptTest(pytest.Module):
    def _getobj(self) -> types.ModuleType:
        name = f"{self.path.stem}@{self.path.parent}"  # unique per file, whatever its name
        spec = importlib.util.spec_from_file_location(name, self.path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module


@pytest.fixture
def peftlife_sut(request: pytest.FixtureRequest) -> str | None:
    """The ``--peftlife-sut`` value, or None."""
    return _value(request.config, "peftlife_sut")


@pytest.fixture
def peftlife_scenario(request: pytest.FixtureRequest) -> str | None:
    """The ``--peftlife-scenario`` value, or None."""
    return _value(request.config, "peftlife_scenario")


@pytest.fixture
def peftlife_search(peftlife_sut: str | None) -> Callable[..., SearchResult]:
    """Search as a lifecycle machine does, under peftlife's profile; raise on a finding.

    ``peftlife_search()`` checks ``--peftlife-sut`` (default ``reference``) in
    ``--peftlife-scenario`` (default ``default``); arguments override both, and
    ``seed`` fixes the search's seed as ``peftlife check --seed`` does.
    """

    def run(
        sut_spec: str | None = None, scenario: str | None = None, seed: int | None = None
    ) -> SearchResult:
        result = session_search(
            sut_spec or peftlife_sut or "reference",
            # The session's scenario as read at the start, unless the test names one.
            scenario or session.current().scenario or "default",
            seed=seed,
        )
        if result.failure is not None:
            raise result.failure
        return result

    return run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Hypothesis's statistics (``--hypothesis-show-statistics``) for a lifecycle
    machine's case, with peftlife's own: Hypothesis collects them only for its
    ``@given`` tests, and a machine's case is a unittest case."""
    # Each test's shrinks are timed by a heartbeat of its own: one test's last shrink
    # never makes the next test's first look older than it is.
    options = attrs.evolve(session.current(), shrink_progress=_shrink_heartbeat(item.config))
    if getattr(getattr(item, "cls", None), "lifecycle_machine", None) is None:
        with session.using(options):
            return (yield)
    collector, describe_statistics = compat.statistics()

    lines: list[str] = []
    # Hypothesis tells its statistics where the search runs: in the outside
    # watchdog's child (``peftlife.world.supervisor``), whose memory dies with it.
    # A file both processes share (``relay``, opened below) carries them back, one
    # Hypothesis run (a slice of the search) at a time, told as one block per search.

    def hypothesis_stats(stats: Any) -> None:
        if not _ran_examples(stats):
            return  # a replay of an empty example database: nothing to tell
        relay.write(json.dumps(stats, default=str) + "\0")
        relay.flush()

    def peftlife_stats(result: SearchResult) -> None:
        relay.seek(0)
        runs = [json.loads(text) for text in relay.read().split("\0") if text]
        relay.seek(0)
        relay.truncate()
        if runs:
            lines.append(describe_statistics({**one_search(runs), "nodeid": item.nodeid}))
        lines.append(describe(result))

    try:
        with (
            tempfile.TemporaryFile("w+", encoding="utf-8") as relay,
            collector.with_value(hypothesis_stats),
            session.using(attrs.evolve(options, on_search=peftlife_stats)),
        ):
            return (yield)
    except ShrinkInterrupted as stop:  # the test fails with the case so far, then the run stops
        _STOPPED.add(item.nodeid)
        raise stop.failure from None
    finally:
        if lines:
            item.hypothesis_statistics = "\n".join(lines)  # type: ignore[attr-defined]


# How Hypothesis says a run stopped at its budget.
_AT_BUDGET = re.compile(r"settings\.max_examples=(\d+)")


def one_search(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Hypothesis's statistics of one search's runs (its slices of ``hunt.SLICE``
    examples, and the replay of the example database), as of one run: each phase's
    seconds, test cases and failures added up; stopped as the last run stopped,
    at the budget of them all when that is why.

    >>> ran = {"duration-seconds": 0.5, "test-cases": [{"status": "valid"}]}
    >>> slices = [{"generate-phase": ran, "stopped-because": f"settings.max_examples={n}"}
    ...     for n in (9, 4)]
    >>> merged = one_search(slices)
    >>> len(merged["generate-phase"]["test-cases"]), merged["stopped-because"]
    (2, 'settings.max_examples=13')
    """
    merged: dict[str, Any] = {}
    failures = [0] * len(runs)  # each run's failures so far: Hypothesis counts them on
    for phase in (f"{p.name}-phase" for p in Phase):
        if not any(phase in run for run in runs):
            continue
        together: dict[str, Any] = {"duration-seconds": 0.0, "test-cases": []}
        for i, run in enumerate(runs):
            part = run.get(phase, {})
            together["duration-seconds"] += part.get("duration-seconds", 0.0)
            together["test-cases"] += part.get("test-cases", [])
            failures[i] = part.get("distinct-failures", failures[i])
            if "shrinks-successful" in part:
                shrunk = together.get("shrinks-successful", 0)
                together["shrinks-successful"] = shrunk + part["shrinks-successful"]
        together["distinct-failures"] = sum(failures)
        merged[phase] = together
    targets: dict[str, float] = {}
    for run in runs:
        for label, score in run.get("targets", {}).items():
            targets[label] = max(score, targets.get(label, score))
    if targets:
        merged["targets"] = targets
    stopped = str(runs[-1].get("stopped-because", ""))
    if _AT_BUDGET.fullmatch(stopped):
        budgets = (_AT_BUDGET.fullmatch(str(run.get("stopped-because", ""))) for run in runs)
        stopped = f"settings.max_examples={sum(int(b[1]) for b in budgets if b)}"
    merged["stopped-because"] = stopped
    return merged


def _ran_examples(stats: Any) -> bool:
    """Whether a Hypothesis run's statistics count any example, in any phase."""
    phases = [v for k, v in stats.items() if k.endswith("-phase") and isinstance(v, dict)]
    return any(phase.get("test-cases") for phase in phases)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[Any]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    if call.excinfo is not None and (err := _bad_input(call.excinfo.value)) is not None:
        # The search fixture given a SUT or scenario that cannot be loaded: the command
        # line's one line, not a traceback that reads like a finding.
        rep.longrepr = str(_usage_error(item.config, err))
        return rep
    if call.excinfo is not None and isinstance(call.excinfo.value, reports.CaseFailed):
        rep.longrepr = str(call.excinfo.value).strip("\n")  # a kept case: its story
        return rep
    failure = _lifecycle_failure(call)
    if failure is None:
        return rep
    try:
        smaller = minimized(failure, timeout=session.current().shrink_timeout)
    except ShrinkInterrupted as stop:  # reported as shrunk so far; the run stops after it
        smaller = stop.failure
        _STOPPED.add(item.nodeid)
    # A finding met replaying the example database came from no seed, and says so.
    seed = None if failure.replayed else failure.seed
    profile = reports.REPLAYED if failure.replayed else _profile_shown(item.config)
    case = reports.Case.from_failure(smaller, seed=seed, profile=profile)
    outcome = reports.replay(case, _resolved(item, case.sut))
    properties = [("peftlife_invariant", failure.invariant)]
    story = reports.terminal_text(case, outcome, width=100)
    if note := scenarios.sut_note(failure.run.sut, [failure.run.scenario]):
        story += f"\nnote: {note}"
    if failure.replayed:
        properties.append(("peftlife_replayed", "met replaying the example database, no seed"))
    elif failure.seed is not None:
        properties.append(("peftlife_seed", str(failure.seed)))
    directory = _report_dir(item.config)
    paths: dict[str, Path] = {}
    try:
        paths = reports.write(case, outcome, directory)
    except OSError as err:
        # The failure stands as reported; only the files are missing, and this says why.
        problem = f"could not write reports to {str(directory)!r} ({err.strerror})"
        properties.append(("peftlife_report_error", problem))
        story += f"\npeftlife: {problem}"
    else:
        properties.append(("peftlife_report", str(paths["json"])))
        story += "\nreports: " + ", ".join(str(p) for p in paths.values())
    if rerun := _rerun(item, failure, paths):
        properties.append(("peftlife_rerun", rerun))
        story += f"\nrerun with: {rerun}"
    # The story is the failure message; the traceback through Hypothesis says nothing more.
    rep.longrepr = story
    for prop in properties:
        item.user_properties.append(prop)
        rep.user_properties.append(prop)
    return rep


def _rerun(item: pytest.Item, failure: LifecycleFailure, paths: dict[str, Path]) -> str:
    """The command that finds ``failure`` again, or "" for a derandomized search.

    A finding met replaying the example database came from no seed: the kept
    regression test written beside its report replays it (Hypothesis leaves the
    database out under ``--hypothesis-seed``, so the seed's command would search afresh).
    """
    if failure.replayed:
        if "test" in paths:
            return f"pytest {paths['test']}  (met replaying the example database, not by a seed)"
        return (
            f"pytest {item.nodeid}  (met replaying the example database: run it in this directory)"
        )
    return "" if failure.seed is None else f"pytest {item.nodeid} --hypothesis-seed={failure.seed}"


# Tests whose shrink Ctrl-C stopped: once each is reported, the run stops as Ctrl-C does.
_STOPPED: set[str] = set()


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    if nodeid in _STOPPED:
        _STOPPED.discard(nodeid)
        raise KeyboardInterrupt


def _resolved(item: pytest.Item, spec: str) -> sut.Resolved | None:
    """The SUT ``spec`` as the session or the item's machine resolved it, if either did."""
    machine = getattr(getattr(item, "cls", None), "lifecycle_machine", None)
    known = [session.current().sut]
    if machine is not None:
        known.append(sut.Resolved(machine.sut_spec, machine.factory))
    return next((k for k in known if isinstance(k, sut.Resolved) and k.spec == spec), None)


def _profile_shown(config: pytest.Config) -> str:
    """The name of the profile a machine searched under, as ``session_search`` chose it."""
    return profiles.chosen(_value(config, "peftlife_profile"))[0]


def _lifecycle_failure(call: pytest.CallInfo[Any]) -> LifecycleFailure | None:
    if call.excinfo is None:
        return None
    error = call.excinfo.value
    # Hypothesis may wrap several distinct failures in a group.
    candidates = [error, *getattr(error, "exceptions", ())]
    for candidate in candidates:
        if isinstance(candidate, LifecycleFailure):
            return candidate
    return None
