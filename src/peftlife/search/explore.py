"""Bounded exhaustive exploration: every action sequence up to a depth, breadth first.

Where the machine samples lifecycles, the explorer enumerates them in one
small world (``peftlife.search.breadth``): every action of the scenario, one
level of depth at a time, states merged on their fingerprint, each iteration
checked and each new state drained, so the first failing trace it meets is a
shortest one. It is the oracle the shrinker is measured against, and a check
in its own right: "no violation up to depth N" is a proof for that world.

    >>> result = explore("mutant:no_release_on_suspend", "kv-pressure", depth=3)
    >>> [a.describe() for a in result.failure.run.actions]  # the drain does the rest
    ['submit(adapter=1, weights=True, prompt_len=10, max_new_tokens=3, lora_path=True)', \
'submit(adapter=1, weights=True, prompt_len=4, max_new_tokens=1, lora_path=True)']
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from peftlife import sut
from peftlife.search import breadth, outside, scenarios
from peftlife.search.breadth import Alphabet
from peftlife.search.failure import LifecycleFailure, Run
from peftlife.search.scenarios import Scenario
from peftlife.search.trace import Action, checked_replay
from peftlife.world.config import EngineConfig

# States one exploration may visit before it stops short (and says so).
MAX_STATES = 200_000


@attrs.frozen
class Exploration:
    """How an exploration ended: the shortest failure, or how far it proved none."""

    sut: str
    scenario: str
    config: EngineConfig
    depth: int
    states: int
    failure: LifecycleFailure | None
    # False when MAX_STATES stopped the search before ``depth`` was covered.
    complete: bool
    # When the search was for one invariant: the first failure on another that it
    # passed over (a shortest one of any kind, shorter than ``failure``), else None.
    passed_over: LifecycleFailure | None = None

    @property
    def held(self) -> bool:
        return self.failure is None


def explore(
    sut_spec: str | sut.Resolved,
    scenario: Scenario | str,
    *,
    depth: int,
    config: EngineConfig | None = None,
    alphabet: Alphabet | None = None,
    max_states: int = MAX_STATES,
    progress: Callable[[int], None] | None = None,
    invariant: str | None = None,
) -> Exploration:
    """Every trace up to ``depth`` actions in one world, breadth first; the first failure.

    ``breadth.search`` says how ``invariant`` and ``max_states`` bound it and when
    states merge. ``config`` defaults to the scenario's smallest world,
    ``alphabet`` to the scenario's actions in that world. ``progress(states)`` is
    told the count of states explored as it grows (as often as the supervising
    parent reads it), and the final count at the end. It runs under the outside
    watchdog (``peftlife.search.outside``): a scheduler that takes the process
    down is a finding on the trace it was taking. ``scenario`` is as the front door read
    it, or a name or path read here.
    """
    subject = sut.loaded(sut_spec)  # here, once: the supervised child inherits it
    sut_spec = subject.spec
    given = scenarios.resolve(scenario)
    s = scenarios.for_sut(given, sut_spec)
    world = config if config is not None else scenarios.smallest_world(s)

    def dead(failure: LifecycleFailure, examples: int, seconds: float) -> Exploration:
        reached = len(failure.run.actions)
        return Exploration(sut_spec, s.name, world, reached, examples, failure, True)

    # The child counts its states as examples; the parent tells ``progress`` of them.
    told = None if progress is None else (lambda states, _iterations: progress(states))
    result = outside.supervised_search(
        lambda tick: _explore(
            subject, given, s, world, depth, alphabet, max_states, invariant, tick
        ),
        told,
        dead,
        [given],
    )
    if progress is not None:  # the parent reads the child's count at intervals: the last one
        progress(result.states)
    return result


def _explore(
    subject: sut.Resolved,
    given: Scenario,
    s: Scenario,
    world: EngineConfig,
    depth: int,
    alphabet: Alphabet | None,
    max_states: int,
    invariant: str | None,
    progress: Callable[[int, int], None] | None,
) -> Exploration:
    sut_spec, factory = subject.spec, subject.factory
    outside.trying(sut_spec, given, world, ())
    searched = breadth.search(
        factory,
        world,
        alphabet if alphabet is not None else Alphabet.of(s, world),
        depth,
        max_states=max_states,
        invariant=invariant,
        trying=lambda actions: outside.trying(sut_spec, given, world, actions),
        progress=None if progress is None else (lambda states: progress(states, 0)),
    )

    def failure_of(actions: tuple[Action, ...] | None) -> LifecycleFailure | None:
        if actions is None:
            return None
        outcome = checked_replay(world, actions, factory)
        # A shortest trace: nothing left to shrink.
        return LifecycleFailure(
            outcome.violations, Run(sut_spec, given, world, actions), shrunk=True
        )

    return Exploration(
        sut_spec,
        s.name,
        world,
        searched.depth,
        searched.states,
        failure_of(searched.failure),
        searched.complete,
        failure_of(searched.passed_over),
    )


def shortest_like(
    failure: LifecycleFailure, *, max_states: int = MAX_STATES, any_invariant: bool = False
) -> Exploration:
    """Search the world of a finding for a failure shorter than its own trace.

    The oracle for the shrinker: the finding's scenario's actions in the
    finding's (shrunk) world, with its own request sizes besides the ranges'
    ends, up to one action less than its trace. It looks for a failure on the
    finding's own invariant, as a shrink keeps it (a shorter failure on another
    invariant met on the way is in ``passed_over``); ``any_invariant`` takes the
    first failure of any kind instead. A failure found is a shortest one; a
    complete exploration that finds none proves the finding shortest.
    """
    run = failure.run
    letters = Alphabet.around(run.scenario, run.config, run.actions)
    return explore(
        run.sut,
        run.scenario,
        depth=len(run.actions) - 1,
        config=run.config,
        alphabet=letters,
        max_states=max_states,
        invariant=None if any_invariant else failure.invariant,
    )
