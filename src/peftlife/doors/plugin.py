"""The pytest plugin, registered through the ``pytest11`` entry point.

Options:

* ``--peftlife-sut SPEC``: the scheduler the ``peftlife_sut`` fixture names, and
  the one kept regression tests replay against;
* ``--peftlife-scenario NAME|PATH``: the scenario the ``peftlife_scenario``
  fixture names;
* ``--peftlife-report-dir DIR``: where a failing machine test writes its JSON,
  Markdown and regression-test reports.

A failing machine test (one that raised ``LifecycleFailure``) also gets the
violated invariant and the report path as properties in the JUnit XML
(``--junitxml``).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from peftlife import reports, sut
from peftlife.search import profiles, scenarios
from peftlife.search.machine import LifecycleFailure, SearchResult, minimized, search

# Registered at import, before Hypothesis's own plugin reads --hypothesis-profile,
# so `--hypothesis-profile ci` works in any project that installs peftlife.
profiles.register()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("peftlife", "peftlife lifecycle harness")
    group.addoption("--peftlife-sut", default=None, help=f"scheduler under test: {sut.FORMS}")
    group.addoption(
        "--peftlife-scenario", default=None, help="scenario profile: a shipped name or a .toml"
    )
    group.addoption("--peftlife-report-dir", default=None, help="write counterexample reports here")


def pytest_configure(config: pytest.Config) -> None:
    # Bad input at the front door: a usage error, the command line's one line.
    try:
        if spec := config.getoption("peftlife_sut"):
            sut.wired(spec)
        if scenario := config.getoption("peftlife_scenario"):
            scenarios.load(scenario)
    except (sut.SUTError, scenarios.ScenarioError) as err:
        # Under -v, what the SUT raised comes first, as the command line's -v shows it.
        shown = err.__cause__ is not None and config.get_verbosity() > 0
        trace = "".join(traceback.format_exception(err.__cause__)) if shown else ""
        raise pytest.UsageError(f"{trace}peftlife: error: {err}") from err
    directory = config.getoption("peftlife_report_dir")
    if directory and (problem := reports.unwritable(Path(directory), "--peftlife-report-dir")):
        raise pytest.UsageError(f"peftlife: error: {problem}")


@pytest.fixture
def peftlife_sut(request: pytest.FixtureRequest) -> str | None:
    """The ``--peftlife-sut`` value, or None."""
    value: str | None = request.config.getoption("peftlife_sut")
    return value


@pytest.fixture
def peftlife_scenario(request: pytest.FixtureRequest) -> str | None:
    """The ``--peftlife-scenario`` value, or None."""
    value: str | None = request.config.getoption("peftlife_scenario")
    return value


@pytest.fixture
def peftlife_search(
    peftlife_sut: str | None, peftlife_scenario: str | None
) -> Callable[..., SearchResult]:
    """Run the machine under the loaded Hypothesis profile; raise on a finding.

    ``peftlife_search()`` checks ``--peftlife-sut`` (default ``reference``) in
    ``--peftlife-scenario`` (default ``default``); arguments override both, and
    ``seed`` fixes the search's seed as ``peftlife check --seed`` does.
    """
    from hypothesis import settings

    def run(
        sut_spec: str | None = None, scenario: str | None = None, seed: int | None = None
    ) -> SearchResult:
        result = search(
            sut_spec or peftlife_sut or "reference",
            scenario or peftlife_scenario or "default",
            settings(),
            seed=seed,
        )
        if result.failure is not None:
            raise result.failure
        return result

    return run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[Any]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    failure = _lifecycle_failure(call)
    if failure is None:
        return rep
    properties = [("peftlife_invariant", failure.invariant)]
    directory = item.config.getoption("peftlife_report_dir")
    if directory:
        case = reports.Case.from_failure(minimized(failure))
        try:
            paths = reports.write(case, reports.replay(case), Path(directory))
        except OSError as err:
            # The failure stands as reported; only the files are missing, and this says why.
            problem = f"could not write reports to {directory!r} ({err.strerror})"
            properties.append(("peftlife_report_error", problem))
            rep.sections.append(("peftlife", problem))
        else:
            properties.append(("peftlife_report", str(paths["json"])))
    for prop in properties:
        item.user_properties.append(prop)
        rep.user_properties.append(prop)
    return rep


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
