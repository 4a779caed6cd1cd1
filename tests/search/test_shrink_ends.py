"""The shrinker always ends: one well-founded order, a step budget, a time cap.

The property test draws failing cases as users meet them (a catalogue mutant,
a scenario the gate hunts it in, any profile, a random seed) and holds every
shrink to its bounds; the seeded searches below used to shrink for ever.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import hypothesis
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from peftlife.checker.invariants import Subject, Violation
from peftlife.reports import Case, render_markdown, terminal_text, to_json
from peftlife.search import gate, profiles, shrink
from peftlife.search.failure import LifecycleFailure, Run, minimized
from peftlife.search.hunt import search
from peftlife.search.trace import KINDS, Action, Outcome, checked_replay
from peftlife.sut import load
from peftlife.sut.mutants import CATALOGUE
from peftlife.world.config import EngineConfig

X = Action("submit", lora_task_id=1, prompt_len=2, max_new_tokens=1)
Y = Action("submit", lora_task_id=1, prompt_len=1, max_new_tokens=3)
STEP = Action("step")


def test_every_field_of_a_case_has_a_place_in_the_order() -> None:
    config = EngineConfig(
        draft_device_pages=2,
        adapter_pages=((1, 2), (3, 1)),
        enable_chunked_context=True,
        context_chunking_policy="EQUAL_PROGRESS",
        recompute_teardown="upstream",
        executor="overlap",
        inflight_ids="empty",
    )
    actions = tuple(
        Action(kind, request_id=1) if kind in ("cancel", "eos") else Action(kind, pool="draft")
        for kind in KINDS
        if kind != "submit"
    )
    assert shrink.size(config, (X, *actions)) > shrink.size(config, (X,))


def test_the_order_ranks_simpler_cases_first() -> None:
    world = EngineConfig(adapter_pages=((1, 1),))
    assert shrink.size(world, (Y, STEP)) < shrink.size(world, (X, STEP, STEP))  # shorter first
    assert shrink.size(world, (Y, STEP)) < shrink.size(world, (X, STEP))  # then simpler requests
    fault = Action("fail_grow", pool="draft")
    on_target = attrs.evolve(fault, pool="target")
    assert shrink.size(world, (on_target,)) < shrink.size(world, (fault,))
    smaller_world = EngineConfig(adapter_pages=())
    assert shrink.size(smaller_world, (STEP,)) < shrink.size(world, (STEP,))


def _always_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every replay fails on one invariant: every candidate a pass proposes is kept if allowed."""
    outcome = Outcome(
        (), (Violation("ownership_follows_residency", Subject((1,)), "a", "b"),), "step"
    )
    monkeypatch.setattr(shrink, "checked_replay", lambda *args, **kwargs: outcome)


def _shrinker(actions: tuple[Action, ...]) -> shrink._Shrinker:
    factory = load("reference")
    return shrink._Shrinker(
        shrink.same_finding(factory, "ownership_follows_residency"),
        EngineConfig(adapter_pages=((1, 1),)),
        actions,
    )


def test_unifying_requests_cannot_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    # With X, X, Y all failing, copying Y onto the first X and X back onto it took
    # turns for ever; only copies from the simpler request are smaller now.
    _always_fails(monkeypatch)
    shrinker = _shrinker((X, X, Y, STEP))
    shrinker.unify_requests()
    assert shrinker.actions == (Y, Y, Y, STEP)
    assert shrinker.steps < 20


def test_cached_verdicts_count_against_the_step_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    _always_fails(monkeypatch)
    monkeypatch.setattr(shrink, "STEP_BUDGET", 5)
    shrinker = _shrinker((X, STEP))
    for _ in range(5):
        assert shrinker.fails(shrinker.config, shrinker.actions)  # one replay, then the cache
    assert shrinker.replays == 1
    with pytest.raises(shrink._Stopped) as stopped:
        shrinker.fails(shrinker.config, shrinker.actions)
    assert stopped.value.why == "step budget"


MUTANT = "mutant:recompute_pause_keeps_ownership"
# A defect only where the executor leaves the recompute teardown to the scheduler.
OPT_IN = "opt-in/scheduler-teardown"


def _found(sut: str, scenario: str, profile: str, seed: int, examples: int = 50) -> Any:
    """The unshrunk finding of a search as ``check`` runs it, from an empty database."""
    settings = hypothesis.settings(
        profiles.for_search(profiles.get(profile), max_examples=examples), database=None
    )
    return search(sut, scenario, settings, seed=seed, shrink=False).failure


def _shrink(failure: LifecycleFailure, timeout: float | None = None) -> shrink.Shrunk:
    run = failure.run
    factory = load(run.sut)
    return shrink.minimize(
        shrink.Trace(run.config, run.actions),
        shrink.same_finding(factory, failure.invariant),
        admits=run.scenario.admits_case,
        timeout=timeout,
    )


def _holds_to_the_order(failure: LifecycleFailure, shrunk: shrink.Shrunk) -> None:
    """No larger than what it was given, and still failing on the same invariant."""
    run = failure.run
    assert shrink.size(shrunk.config, shrunk.actions) <= shrink.size(run.config, run.actions)
    again = shrink.first_invariant(shrunk.config, shrunk.actions, load(run.sut))
    assert again == failure.invariant


def test_a_shrink_stopped_at_its_time_cap_reports_the_smallest_case_so_far() -> None:
    failure = _found(MUTANT, OPT_IN, "ci", 1019)
    capped = _shrink(failure, timeout=1e-9)
    assert capped.stopped == "time cap"
    assert capped.note is not None and "time cap" in capped.note
    _holds_to_the_order(failure, capped)


def test_a_report_says_when_its_shrink_stopped_at_the_cap() -> None:
    capped = minimized(_found(MUTANT, OPT_IN, "ci", 1019), timeout=1e-9)
    case = Case.from_failure(capped)
    assert case.shrink_note is not None and "time cap" in case.shrink_note
    outcome = checked_replay(case.config, case.actions, load(MUTANT))
    assert case.shrink_note in render_markdown(case, outcome)
    assert case.shrink_note in " ".join(terminal_text(case, outcome).split())
    assert Case.from_json(to_json(case, outcome)).shrink_note == case.shrink_note


# The traces that shrank for ever, as the searches met them, unshrunk: seeds of
# ``peftlife check`` (from an empty directory) found them before every rule became
# valid in every state, which changed what those seeds draw.
SHRANK_FOR_EVER = json.loads(
    (Path(__file__).parents[1] / "cases" / "shrank_for_ever.json").read_text()
)


@pytest.mark.parametrize(
    "entry", SHRANK_FOR_EVER, ids=lambda e: f"{e['sut']}-{e['scenario']}-{e['seed']}"
)
def test_the_traces_that_used_to_shrink_for_ever_end(entry: dict[str, Any]) -> None:
    case = Case.from_json(entry)
    failure = LifecycleFailure(
        list(checked_replay(case.config, case.actions, load(case.sut)).violations),
        Run(case.sut, case.scenario, case.config, case.actions),
    )
    assert failure.invariant == entry["violation"]["invariant"]
    shrunk = _shrink(failure)
    assert shrunk.stopped is None, shrunk.note  # it ran out of smaller candidates
    assert len(shrunk.actions) <= 8
    _holds_to_the_order(failure, shrunk)


# A mutant and a scenario the gate hunts it in (``peftlife mutants``): elsewhere a
# mutant may schedule as the reference does (an overlap mutant under the simple
# loop), and a search that finds nothing leaves nothing to shrink.
HUNTED = st.sampled_from(CATALOGUE).flatmap(
    lambda m: st.tuples(st.just(f"mutant:{m.name}"), st.sampled_from(gate.hunted_scenarios(m)))
)

# Well below the real budget: a shrink of a generated case that needed more
# would be one that wanders, which this test should catch.
PROPERTY_STEPS = 6000


@hypothesis.settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.nested_given, HealthCheck.too_slow],
)
@given(
    hunted=HUNTED,
    profile=st.sampled_from(["dev", "ci", "nightly"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_shrink_ends_within_its_budget_no_larger_and_on_the_same_invariant(
    hunted: tuple[str, str], profile: str, seed: int
) -> None:
    sut, scenario = hunted
    failure = _found(sut, scenario, profile, seed, examples=30)
    hypothesis.assume(failure is not None)
    shrunk = _shrink(failure)
    assert shrunk.stopped is None, shrunk.note
    assert shrunk.steps <= PROPERTY_STEPS
    _holds_to_the_order(failure, shrunk)
