"""The lifecycle state machine: the reference holds in every scenario and reaches every path.

These run under the ``ci`` settings profile whatever profile the suite loaded,
because their verdicts are only meaningful at the budget CI uses. The mutation
gate is in ``test_gate.py``.
"""

from __future__ import annotations

from collections import Counter

import pytest

from peftlife import lifecycle_machine, sut
from peftlife.search import profiles
from peftlife.search.hunt import SearchResult, search
from peftlife.search.machine import COVERAGE_LABELS
from peftlife.search.scenarios import shipped_names

CI = profiles.get("ci")
SCENARIOS = shipped_names()

# The user-facing form: one line turns a SUT and a scenario into a test case.
TestReferenceDefault = lifecycle_machine("reference", "default").TestCase


# Every shipped scenario at a hundred examples (the least a verdict below accepts),
# not the ci profile's three hundred: ``make check``'s gate runs those.
HELD_EXAMPLES = 100


@pytest.fixture(scope="module")
def reference_runs() -> dict[str, SearchResult]:
    settings = profiles.for_search(CI, max_examples=HELD_EXAMPLES)
    return {scenario: search("reference", scenario, settings) for scenario in SCENARIOS}


def test_the_shipped_scenarios_are_the_advertised_ones() -> None:
    expected = {"default", "tight-lora-cache", "kv-pressure", "draft-pool", "chunked-prefill"}
    assert expected | {"no-lower-tier"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_reference_holds(reference_runs: dict[str, SearchResult], scenario: str) -> None:
    result = reference_runs[scenario]
    assert result.held, str(result.failure)
    assert result.examples >= HELD_EXAMPLES


def test_every_rule_and_path_is_reached(reference_runs: dict[str, SearchResult]) -> None:
    """A change that starves a rule or a scheduler path fails CI here."""
    seen: Counter[str] = Counter()
    for result in reference_runs.values():
        seen.update(result.coverage)
    rules = {f"rule: {r}" for r in ("submit", "step", "cancel", "refuse_resume", "fail_grow")}
    missing = sorted((set(COVERAGE_LABELS) | rules) - set(seen))
    assert not missing, f"never reached: {missing}; reached: {dict(seen)}"


@pytest.mark.parametrize(
    ("factory", "invariant"),
    [
        ("tests.bad_schedulers:Raising", "scheduler_protocol"),
        ("tests.bad_schedulers:Twice", "output_lists_well_formed"),
        ("tests.bad_schedulers:UnknownId", "scheduler_protocol"),
    ],
)
def test_a_broken_scheduler_is_a_finding_not_a_crash(factory: str, invariant: str) -> None:
    result = search(factory, "default", CI, shrink=False)
    assert result.failure is not None
    assert result.failure.invariant == invariant, str(result.failure)


def test_a_factory_that_builds_no_scheduler_is_refused_before_the_search() -> None:
    with pytest.raises(sut.WiringError, match="returned an object, which has no schedule_request"):
        search("tests.bad_schedulers:not_a_scheduler", "default", CI)
