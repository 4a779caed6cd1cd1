"""The explorer: breadth first, so its failure is a shortest one; the shrinker must reach it."""

from __future__ import annotations

import pytest

from peftlife.search import gate, profiles, scenarios
from peftlife.search.breadth import Alphabet
from peftlife.search.explore import explore, shortest_like
from peftlife.search.failure import LifecycleFailure, Run, minimized
from peftlife.search.hunt import hunt
from peftlife.search.trace import Action, checked_replay
from peftlife.sut import load
from peftlife.sut.mutants import BY_NAME
from peftlife.world.config import EngineConfig

CI = profiles.get("ci")


# Three mutants, each with a seed whose shrunk world is small enough to explore in a second.
@pytest.mark.parametrize(
    ("mutant", "seed"),
    [("phantom_pause_unstarted", 1), ("draft_not_suspended", 2), ("recompute_pause_terminates", 1)],
)
def test_the_shrinker_reaches_the_explorers_shortest(mutant: str, seed: int) -> None:
    # Where the gate hunts it: recompute_pause_terminates in the world it carries, where
    # the executor leaves the recompute teardown to the scheduler.
    names = gate.hunted_scenarios(BY_NAME[mutant])
    found = hunt(f"mutant:{mutant}", CI, scenario_names=names, seed=seed)
    assert found.failure is not None
    shrunk = minimized(found.failure)
    oracle = shortest_like(shrunk, max_states=5_000)
    assert oracle.complete, "the oracle ran out of states before the shrunk length"
    shorter = None if oracle.failure is None else oracle.failure.run.actions
    assert shorter is None, (
        [a.describe() for a in shrunk.run.actions],
        [a.describe() for a in shorter or ()],
    )


def test_the_reference_holds_in_the_smallest_world_up_to_depth_three() -> None:
    result = explore("reference", "kv-pressure", depth=3)
    assert result.held and result.complete
    assert result.states > 50  # it did branch: steps, submits, cancels and faults


def test_an_exploration_failure_replays_to_the_same_violation() -> None:
    s = scenarios.load("kv-pressure")
    letters = Alphabet.of(s, scenarios.smallest_world(s), prompt_lens=(4,), max_new_tokens=(1,))
    result = explore("mutant:pause_flag_dropped", "kv-pressure", depth=4, alphabet=letters)
    assert result.failure is not None
    run = result.failure.run
    outcome = checked_replay(run.config, run.actions, load(run.sut))
    assert outcome.violations[0].invariant == result.failure.invariant


def test_merging_states_does_not_lengthen_the_shortest_trace() -> None:
    """A stateful scheduler is explored as a plain tree; both must agree on the length."""
    s = scenarios.load("kv-pressure")
    letters = Alphabet.of(s, scenarios.smallest_world(s), prompt_lens=(4,), max_new_tokens=(1,))
    merged = explore("mutant:no_release_on_suspend", "kv-pressure", depth=4, alphabet=letters)
    tree = explore(
        "tests.bad_schedulers:StatefulNoReleaseOnSuspend", "kv-pressure", depth=4, alphabet=letters
    )
    assert merged.failure is not None and tree.failure is not None
    assert len(merged.failure.run.actions) == len(tree.failure.run.actions)
    assert tree.states > merged.states


def test_the_state_limit_stops_short_and_says_so() -> None:
    result = explore("reference", "default", depth=6, max_states=40)
    assert not result.complete
    assert result.depth < 6


def test_the_oracle_looks_for_the_findings_own_invariant() -> None:
    # Three requests fail on scheduled_owned_and_resident; two fail sooner on
    # another invariant. A shrink keeps its finding, so the oracle does too: it
    # proves the three shortest for their invariant and tells of the other.
    config = EngineConfig(
        device_pages=4,
        host_pages=0,
        tokens_per_block=1,
        lora_device_pages=1,
        lora_host_pages=1,
        adapter_pages=((1, 1),),
        max_num_tokens=2,
        max_batch_size=2,
        enable_chunked_context=True,
        chunk_unit_size=1,
        executor="overlap",
    )
    actions = tuple(
        Action(
            "submit",
            lora_task_id=1,
            lora_weights=True,
            prompt_len=1,
            max_new_tokens=outputs,
            lora_path=True,
        )
        for outputs in (2, 2, 1)
    )
    spec = "mutant:no_reregister_on_resume"
    outcome = checked_replay(config, actions, load(spec))
    run = Run(spec, "overlap-kv-pressure", config, actions)
    finding = LifecycleFailure(outcome.violations, run, shrunk=True)
    assert finding.invariant == "scheduled_owned_and_resident"
    oracle = shortest_like(finding, max_states=5_000)
    assert oracle.complete and oracle.failure is None
    assert oracle.passed_over is not None and len(oracle.passed_over.run.actions) == 2
    assert oracle.passed_over.invariant != finding.invariant
    first = shortest_like(finding, max_states=5_000, any_invariant=True).failure
    assert first is not None and first.run.actions == oracle.passed_over.run.actions
