"""The alphabet is declared once: the machine, the explorer and the bench's mirror agree.

Each reads ``peftlife.search.actions``; these tests hold them to it, so a rule
added to one and not the others (the drift the declaration ended) fails here.
"""

from __future__ import annotations

import pickle
from typing import Any

import attrs
import pytest
from bench import search as bench
from hypothesis.stateful import RuleBasedStateMachine

from peftlife.checker.invariants import Subject, Violation
from peftlife.search import actions, scenarios
from peftlife.search.breadth import Alphabet
from peftlife.search.failure import LifecycleFailure, Run
from peftlife.search.machine import machine_class
from peftlife.search.trace import Action
from peftlife.world.config import EngineConfig

SCENARIOS = scenarios.shipped_names() + scenarios.opt_in_names()


def _rules(machine: type[RuleBasedStateMachine]) -> dict[str, dict[str, str]]:
    """Each rule (the opening too) by name: its arguments' strategies, as Hypothesis shows them."""
    state = machine.setup_state()
    return {
        rule.function.__name__: {name: repr(s) for name, s in rule.arguments.items()}
        for rule in (*state.initializers, *state.rules)
    }


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_machine_has_a_rule_per_enabled_letter_with_its_arguments(scenario: str) -> None:
    s = scenarios.load(scenario)
    rules = _rules(machine_class("reference", scenario))
    letters = actions.enabled(s)
    assert set(rules) == {actions.OPENING_RULE} | {letter.name for letter in letters}
    for letter in letters:
        assert list(rules[letter.name]) == [a.name for a in letter.arguments]
    assert list(rules[actions.OPENING_RULE]) == ["config", "burst", "moves"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_bench_mirror_draws_what_the_machine_draws(scenario: str) -> None:
    machine = _rules(machine_class("reference", scenario))
    assert _rules(bench._mirror(scenario, with_arguments=True)) == machine
    argless = _rules(bench._mirror(scenario, with_arguments=False))
    assert set(argless) == set(machine)
    assert all(not drawn for name, drawn in argless.items() if name != actions.OPENING_RULE)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_explorer_chooses_from_the_machine_s_letters(scenario: str) -> None:
    s = scenarios.load(scenario)
    alphabet = Alphabet.of(s, scenarios.smallest_world(s))
    assert alphabet.letters == actions.enabled(s)


def test_a_scenario_without_a_reason_to_hold_has_no_hold_rule() -> None:
    names = {letter.name for letter in actions.enabled(scenarios.load("upstream-defaults"))}
    assert "eos" in names and "hold_batch" not in names
    assert "hold_batch" in {letter.name for letter in actions.enabled(scenarios.load("overlap"))}


def test_the_explorer_submits_what_the_machine_would() -> None:
    """Each of its submits is one the machine's rule makes from some draw."""
    s = scenarios.load("default")
    config = scenarios.smallest_world(s)
    ids = [task for task, _ in config.adapter_pages]
    for submit in actions.submits(s, config):
        index = 0 if submit.lora_task_id is None else ids.index(submit.lora_task_id) + 1
        drawn = (index, submit.lora_weights, submit.prompt_len, submit.max_new_tokens)
        assert actions.submit_action(s, ids, *drawn) == submit


def test_the_ranges_are_what_the_machine_draws_lifted_to_one() -> None:
    s = scenarios.load("kv-pressure")
    ranges = actions.ranges(s)
    assert ranges["prompt_len"] == scenarios.Range(max(s.prompt_len.lo, 1), s.prompt_len.hi)
    assert set(ranges) == {"prompt_len", "max_new_tokens"}


def _failure(**fields: Any) -> LifecycleFailure:
    violation = Violation("ownership_follows_residency", Subject(lead="request 1"), "x", "y", 1)
    run = Run("reference", "default", EngineConfig(), (Action("step"),))
    return LifecycleFailure([violation], run, **fields)


def test_a_finding_is_a_frozen_value_evolved_when_more_is_known() -> None:
    failure = _failure(hung=True)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        failure.seed = 3  # type: ignore[misc]
    seeded = attrs.evolve(failure, seed=3)
    assert (seeded.seed, seeded.hung, failure.seed) == (3, True, None)
    assert (
        str(seeded) == str(failure) == "[ownership_follows_residency] " + str(failure.violations[0])
    )
    again = pickle.loads(pickle.dumps(seeded))  # as a supervised child sends it
    assert (again.run, again.seed, again.hung, again.violations) == (
        seeded.run,
        3,
        True,
        seeded.violations,
    )
