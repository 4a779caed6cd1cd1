"""The hunt: scenarios take turns in slices, each keeps its whole budget, one seed one result."""

from __future__ import annotations

import unittest

import hypothesis

from peftlife.search import profiles, scenarios
from peftlife.search.hunt import (
    FIRST_SLICE,
    SLICE,
    by_pressure,
    hunt,
    lifecycle_machine,
    pressures,
    search,
)
from peftlife.search.machine import machine_class

SMALL = hypothesis.settings(profiles.get("ci"), max_examples=SLICE + 3)


def test_when_nothing_fails_every_scenario_spends_its_whole_budget() -> None:
    result = hunt("reference", SMALL)
    assert result.held
    assert result.examples >= SMALL.max_examples * len(scenarios.shipped_names())
    assert result.coverage["rule: step"] > 0


def test_a_defect_one_scenario_reaches_is_found_in_the_first_turns() -> None:
    """A defect of the overlap executor, hunted through the simple scenarios and one
    overlap scenario: only that one can catch it (tests/search/test_gate.py shows the
    simple loop schedules it as the reference), and the scenarios before it in the
    turns do not spend their budgets first: it is met in the first two turns."""
    simple = [n for n in scenarios.shipped_names() if not scenarios.load(n).overlap]
    names = [*simple, "overlap"]
    order = by_pressure(names)
    ahead = order.index("overlap")
    assert ahead >= 1  # some scenario's turn comes first
    ci = profiles.get("ci")
    result = hunt("mutant:evicts_inflight", ci, scenario_names=names, seed=3)
    assert result.failure is not None and result.scenario == "overlap"
    # Searched one after another, the scenarios before it would have spent ahead * 300.
    assert result.examples_to_find <= len(names) * (FIRST_SLICE + SLICE) < ahead * ci.max_examples


def test_the_same_seed_gives_the_same_finding() -> None:
    once = hunt("mutant:pause_flag_dropped", profiles.get("ci"), seed=7)
    again = hunt("mutant:pause_flag_dropped", profiles.get("ci"), seed=7)
    assert once.failure is not None and again.failure is not None
    assert (once.scenario, once.examples_to_find) == (again.scenario, again.examples_to_find)
    assert once.failure.run == again.failure.run


# ---- the order of the turns ----


def test_the_turns_meet_every_kind_of_pressure_before_any_scenario_that_adds_none() -> None:
    order = by_pressure(scenarios.shipped_names())
    assert sorted(order) == scenarios.shipped_names()
    covered: set[str] = set()
    added: list[bool] = []
    for name in order:
        kinds = pressures(scenarios.load(name))
        added.append(bool(kinds - covered))
        covered |= kinds
    # Once a scenario adds no kind, none after it does.
    assert added == sorted(added, reverse=True)
    assert {"a draft pool", "batch N told", "batch N untold"} <= covered


# ---- the world a catalogue mutant is searched in ----

TEARDOWN = "mutant:recompute_pause_keeps_ownership"


def test_a_scheduler_teardown_mutant_is_searched_where_the_scheduler_tears_down() -> None:
    assert scenarios.load("kv-pressure").recompute_teardown == "executor_frees"
    machine = machine_class(TEARDOWN, "kv-pressure")
    assert machine.scenario.recompute_teardown == "scheduler_only"
    assert machine_class("reference", "kv-pressure").scenario.recompute_teardown == (
        "executor_frees"
    )
    note = scenarios.sut_note(TEARDOWN, ["kv-pressure"])
    assert note is not None and "\n" not in note
    assert note.endswith("running kv-pressure with recompute_teardown = scheduler_only")
    assert scenarios.sut_note(TEARDOWN, ["opt-in/scheduler-teardown"]) is None


def test_it_is_caught_in_a_scenario_of_upstream_s_teardown() -> None:
    result = search(TEARDOWN, "kv-pressure", profiles.get("ci"), shrink=False)
    assert result.failure is not None
    assert result.failure.run.config.recompute_teardown == "scheduler_only"


def test_an_overlap_mutant_under_the_simple_loop_is_told_not_searched() -> None:
    """Under pytest its case is skipped with the line that says why."""
    assert not scenarios.catchable("mutant:evicts_inflight", ["kv-pressure"])
    assert scenarios.catchable("mutant:evicts_inflight", ["kv-pressure", "overlap"])
    assert scenarios.sut_note("mutant:evicts_inflight", ["kv-pressure", "overlap"]) is None
    case = lifecycle_machine("mutant:evicts_inflight", "kv-pressure").TestCase("runTest")
    outcome = unittest.TestResult()
    case.run(outcome)
    ((_, why),) = outcome.skipped
    assert "cannot be caught in kv-pressure (executor = simple)" in why
