"""The hunt: scenarios take turns in slices, each keeps its whole budget, one seed one result."""

from __future__ import annotations

import hypothesis

from peftlife.search import profiles, scenarios
from peftlife.search.hunt import SLICE, hunt

SMALL = hypothesis.settings(profiles.get("ci"), max_examples=SLICE + 3)


def test_when_nothing_fails_every_scenario_spends_its_whole_budget() -> None:
    result = hunt("reference", SMALL)
    assert result.held
    assert result.examples >= SMALL.max_examples * len(scenarios.shipped_names())
    assert result.coverage["rule: step"] > 0


def test_a_defect_one_scenario_reaches_is_found_in_the_first_turns() -> None:
    """budget_ignores_unscheduled_owners is never caught in the first scenarios by name."""
    result = hunt("mutant:budget_ignores_unscheduled_owners", profiles.get("ci"), seed=3)
    assert result.failure is not None
    assert result.examples_to_find < profiles.get("ci").max_examples


def test_the_same_seed_gives_the_same_finding() -> None:
    once = hunt("mutant:pause_flag_dropped", profiles.get("ci"), seed=7)
    again = hunt("mutant:pause_flag_dropped", profiles.get("ci"), seed=7)
    assert once.failure is not None and again.failure is not None
    assert (once.scenario, once.examples_to_find) == (again.scenario, again.examples_to_find)
    assert once.failure.run == again.failure.run
