"""How often a default-door search finds each catalogue mutant, and how soon.

    python -m bench.detection [--runs 100] [--only NAME] [--hunt-seeds 20] [--out FILE]

Three tables, in CPU seconds of this process and of the supervised child each
search forks (``cpu``):

1. detection: for every catalogue mutant, in the scenario where the ``ci`` gate
   catches it, ``--runs`` fresh searches under the ``dev`` profile (as
   ``peftlife check --sut mutant:NAME --scenario S`` runs in a fresh directory:
   random seed, no example database, no shrink): the share that catch it, the
   median and worst examples to the first failure (a miss counts as the whole
   budget and makes the worst ``miss``), and the median CPU seconds of a run;
2. all scenarios: every mutant hunted as ``peftlife check --scenario all`` hunts
   it (every shipped scenario taking turns, ``dev`` profile) over
   ``--hunt-seeds`` fixed seeds: CPU seconds to the first failure, median and worst;
3. the pytest door: ``PYTEST_MUTANTS`` as a test file's
   ``lifecycle_machine("mutant:NAME", SCENARIO).TestCase`` runs under the ``dev``
   profile in a fresh directory (random seed, no example database), ``--pytest-runs``
   times each: the share that fail, and the examples to the first failure.

The goals are the issue's: caught by at least 99 in 100, a median of at most 8
examples and a worst of at most 40; under ``--scenario all`` at most 0.2 s median
and 1 s worst. ``make bench`` runs it; it is never part of ``make test``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
import unittest
from collections.abc import Sequence
from pathlib import Path

import attrs
import hypothesis

from bench import cpu, write_section
from peftlife.search import gate, profiles, scenarios, session
from peftlife.search.hunt import SearchResult, by_pressure, hunt, lifecycle_machine, search
from peftlife.sut.mutants import BY_NAME, CATALOGUE, Mutant

GOAL_SHARE, GOAL_MEDIAN, GOAL_WORST = 0.99, 8, 40
GOAL_ALL_MEDIAN_S, GOAL_ALL_WORST_S = 0.2, 1.0
HEADING = "## Detection at the default door"
# The pytest door's mutants and scenarios: the README's, one whose world the door
# changes (its defect lives where the scheduler owns the recompute teardown), and
# one of the overlap executor.
PYTEST_MUTANTS = (
    ("no_release_on_suspend", "default"),
    ("recompute_pause_keeps_ownership", "kv-pressure"),
    ("phantom_pause_unstarted", "overlap"),
)


@attrs.frozen
class Detection:
    mutant: str
    scenario: str
    runs: int
    caught: int
    # Examples to the first failure of the runs that caught it.
    examples: tuple[int, ...]
    seconds: tuple[float, ...]

    @property
    def share(self) -> float:
        return self.caught / self.runs

    @property
    def met(self) -> bool:
        return (
            self.share >= GOAL_SHARE
            and statistics.median(self._all_examples) <= GOAL_MEDIAN
            and max(self.examples, default=GOAL_WORST + 1) <= GOAL_WORST
        )

    @property
    def _all_examples(self) -> list[int]:
        # A miss spent the whole budget (and more would have been needed).
        budget = profiles.get("dev").max_examples
        return [*self.examples, *[budget + 1] * (self.runs - self.caught)]

    def cells(self) -> tuple[str, ...]:
        worst = str(max(self.examples, default="-"))
        return (
            self.mutant,
            self.scenario,
            f"{self.caught}/{self.runs}",
            f"{statistics.median(self._all_examples):.0f}",
            worst,
            f"{statistics.median(self.seconds):.3f}",
            "met" if self.met else "SHORT",
        )


def gate_scenario(mutant: Mutant) -> str:
    """The scenario where the ``ci`` gate catches ``mutant`` (as ``peftlife mutants`` shows)."""
    settings = hypothesis.settings(profiles.get("ci"), verbosity=hypothesis.Verbosity.quiet)
    found = hunt(f"mutant:{mutant.name}", settings, scenario_names=gate.hunted_scenarios(mutant))
    assert found.failure is not None, f"the ci gate does not catch {mutant.name}"
    return found.scenario


def detect(mutant: Mutant, scenario: str, runs: int) -> Detection:
    """``runs`` fresh dev searches of ``mutant`` in ``scenario``."""
    settings = profiles.for_search(profiles.get("dev"))
    settings = hypothesis.settings(settings, database=None)
    examples: list[int] = []
    seconds: list[float] = []
    for _ in range(runs):
        start = cpu()
        result = search(
            f"mutant:{mutant.name}", scenario, settings, shrink=False, seed=secrets.randbits(32)
        )
        seconds.append(cpu() - start)
        if result.failure is not None:
            examples.append(result.examples_to_find)
    return Detection(mutant.name, scenario, runs, len(examples), tuple(examples), tuple(seconds))


def all_scenarios(mutant: Mutant, seeds: int) -> tuple[str, ...]:
    """CPU seconds to the first failure under ``--scenario all``, over ``seeds`` seeds."""
    settings = profiles.for_search(profiles.get("dev"))
    settings = hypothesis.settings(settings, database=None)
    seconds: list[float] = []
    examples: list[int] = []
    missed = 0
    for seed in range(seeds):
        start = cpu()
        result = hunt(f"mutant:{mutant.name}", settings, seed=seed)
        seconds.append(cpu() - start)
        examples.append(result.examples_to_find)
        missed += result.failure is None
    median, worst = statistics.median(seconds), max(seconds)
    met = not missed and median < GOAL_ALL_MEDIAN_S and worst < GOAL_ALL_WORST_S
    return (
        mutant.name,
        f"{seeds - missed}/{seeds}",
        f"{statistics.median(examples):.0f}",
        str(max(examples)),
        f"{median:.3f}",
        f"{worst:.3f}",
        "met" if met else "SHORT",
    )


def pytest_door(name: str, scenario: str, runs: int) -> Detection:
    """``runs`` runs of a test file's ``lifecycle_machine`` case, each in a fresh directory."""
    # The dev profile without its database: Hypothesis opens its default one once per
    # process, in the first directory, so later runs would replay that run's finding.
    fresh = hypothesis.settings(profiles.get("dev"), database=None)
    case = type("Fresh", (lifecycle_machine(f"mutant:{name}", scenario).TestCase,), {})
    case.settings = fresh  # type: ignore[attr-defined]
    examples: list[int] = []
    seconds: list[float] = []
    heard: list[SearchResult] = []
    here = os.getcwd()
    options = session.Options(on_search=heard.append)
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as folder, session.using(options):
            os.chdir(folder)
            try:
                start = cpu()
                outcome = unittest.TestResult()
                case("runTest").run(outcome)
                seconds.append(cpu() - start)
            finally:
                os.chdir(here)
        assert not outcome.errors, outcome.errors
        if outcome.failures:
            examples.append(heard[-1].examples_to_find)
    return Detection(name, scenario, runs, len(examples), tuple(examples), tuple(seconds))


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.detection", description=__doc__)
    parser.add_argument("--runs", type=int, default=100, help="fresh dev runs per mutant")
    parser.add_argument("--hunt-seeds", type=int, default=20, help="seeds of the all table")
    parser.add_argument("--only", action="append", choices=sorted(BY_NAME), help="one mutant")
    parser.add_argument("--scenario", help="search every mutant in this scenario instead")
    parser.add_argument(
        "--pytest-runs", type=int, default=30, help="runs of each pytest-door mutant (0: none)"
    )
    parser.add_argument("--out", help="a Markdown file to put the tables in (a section)")
    args = parser.parse_args(argv)
    mutants = [BY_NAME[n] for n in args.only] if args.only else list(CATALOGUE)
    start = time.perf_counter()
    header = ("mutant", "scenario", "caught", "examples med", "worst", "CPU s med", "goal")
    rows = []
    print("  ".join(header), flush=True)
    for mutant in mutants:
        row = detect(mutant, args.scenario or gate_scenario(mutant), args.runs).cells()
        rows.append(row)
        print("  ".join(row), flush=True)
    all_header = ("mutant", "caught", "examples med", "worst", "CPU s med", "worst s", "goal")
    all_rows = []
    if args.hunt_seeds:
        order = by_pressure(scenarios.shipped_names())
        print(f"\n--scenario all, in turns: {', '.join(order)}", flush=True)
        print("  ".join(all_header), flush=True)
        for mutant in mutants:
            all_rows.append(all_scenarios(mutant, args.hunt_seeds))
            print("  ".join(all_rows[-1]), flush=True)
    pytest_rows = []
    if args.pytest_runs:
        print("\npytest door (lifecycle_machine(...).TestCase, dev, fresh directory)", flush=True)
        for name, scenario in PYTEST_MUTANTS:
            if args.only and name not in args.only:
                continue
            pytest_rows.append(pytest_door(name, scenario, args.pytest_runs).cells())
            print("  ".join(pytest_rows[-1]), flush=True)
    if args.out:
        lines = [
            HEADING,
            "",
            f"`python -m bench.detection --runs {args.runs} --hunt-seeds {args.hunt_seeds} "
            f"--pytest-runs {args.pytest_runs}`, "
            f"{time.strftime('%Y-%m-%d')}, {time.perf_counter() - start:.0f} s. "
            f"Each mutant in the scenario where the ci gate catches it, {args.runs} fresh `dev` "
            "searches (random seed, no database, no shrink). Goal: caught by at least "
            f"{GOAL_SHARE:.0%}, median examples to the first failure <= {GOAL_MEDIAN}, "
            f"worst <= {GOAL_WORST}.",
            "",
            *_table(header, rows),
            "",
        ]
        if all_rows:
            lines += [
                f"Hunted through every shipped scenario as `peftlife check --scenario all` "
                f"does (`dev`), seeds 0-{args.hunt_seeds - 1}, CPU s to the first failure. "
                f"Goal: median < {GOAL_ALL_MEDIAN_S} s, worst < {GOAL_ALL_WORST_S} s.",
                "",
                *_table(all_header, all_rows),
                "",
            ]
        if pytest_rows:
            lines += [
                f'The pytest door: a test file\'s `lifecycle_machine("mutant:NAME", SCENARIO)'
                f".TestCase` under `dev` in a fresh directory, {args.pytest_runs} runs each "
                "(its CPU s include the shrink of what it found).",
                "",
                *_table(header, pytest_rows),
                "",
            ]
        write_section(Path(args.out), HEADING, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
