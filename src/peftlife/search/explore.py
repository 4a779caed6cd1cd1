"""Bounded exhaustive exploration: every action sequence up to a depth, breadth first.

Where the machine samples lifecycles, the explorer enumerates them in one
small world: from the empty world it applies every action of an ``Alphabet``
(the machine's own letters, ``peftlife.search.actions``, with a finite choice
of requests to submit), one
level of depth at a time, and merges states whose world has the same
fingerprint. Each iteration is checked as the machine checks it, and every new
state is drained (invariant 12) on a copy, so the first failing trace it meets
is a shortest one. It is the oracle the shrinker is measured against, and a
check in its own right: "no violation up to depth N" is a proof for that world.

    >>> result = explore("mutant:no_release_on_suspend", "kv-pressure", depth=3)
    >>> [a.describe() for a in result.failure.run.actions]  # the drain does the rest
    ['submit(adapter=1, weights=True, prompt_len=10, max_new_tokens=3, lora_path=True)', \
'submit(adapter=1, weights=True, prompt_len=4, max_new_tokens=1, lora_path=True)']
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterator

import attrs

from peftlife import sut
from peftlife.checker import drain, registry
from peftlife.search import outside, scenarios
from peftlife.search.actions import Letter, enabled, ranges, submits
from peftlife.search.failure import LifecycleFailure, Run
from peftlife.search.scenarios import Scenario
from peftlife.search.trace import Action, apply, checked_replay, replay
from peftlife.world import untrusted
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
from peftlife.world.protocol import SchedulerFactory

# States one exploration may visit before it stops short (and says so).
MAX_STATES = 200_000


@attrs.frozen
class Alphabet:
    """The actions the explorer may take: the scenario's letters (``peftlife.search.actions``)
    with a finite choice of requests to submit."""

    letters: tuple[Letter, ...]
    submits: tuple[Action, ...]
    max_requests: int

    @classmethod
    def of(
        cls,
        scenario: Scenario,
        config: EngineConfig,
        prompt_lens: tuple[int, ...] | None = None,
        max_new_tokens: tuple[int, ...] | None = None,
    ) -> Alphabet:
        """The scenario's actions in ``config``; lengths default to each range's two ends.

        >>> s = scenarios.load("kv-pressure")
        >>> len(Alphabet.of(s, scenarios.smallest_world(s)).submits)  # 1 adapter x 2 x 2
        4
        """
        sizes = {"prompt_len": prompt_lens or (), "max_new_tokens": max_new_tokens or ()}
        return cls(enabled(scenario), submits(scenario, config, sizes), scenario.max_requests)

    def actions(self, engine: Engine, trace: tuple[Action, ...]) -> Iterator[Action]:
        """The actions open after ``trace``, in a fixed order (so a search is deterministic)."""
        for letter in self.letters:
            yield from letter.choices(engine, trace, self)


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


def fingerprint(engine: Engine) -> Hashable:
    """Everything that decides the world's future: two states with equal prints behave alike.

    The world of the snapshot (requests, ownership, pools, LoRA caches with their
    eviction order), plus what a snapshot leaves out: pending faults and
    cancellations, each request's weights and folded tokens, the next request id,
    and what the overlap loop has yet to read back.
    """
    extra = tuple(
        (r.request_id, r.lora_weights, r.lora_path, r.num_folded, r.context_chunk_size)
        for r in engine.live_requests
    )
    faults = tuple(pool.pending_faults for pool in engine.pools)
    return (
        engine.snapshot().world(),
        extra,
        faults,
        tuple(engine.pending_cancels),
        engine.next_request_id,
        engine.pending_read_back,
    )


def explore(
    sut_spec: str | sut.Resolved,
    scenario: str,
    *,
    depth: int,
    config: EngineConfig | None = None,
    alphabet: Alphabet | None = None,
    max_states: int = MAX_STATES,
    progress: Callable[[int], None] | None = None,
    invariant: str | None = None,
) -> Exploration:
    """Every trace up to ``depth`` actions in one world, breadth first; the first failure.

    ``invariant`` names the one failure to look for: a trace whose first violation
    is on another invariant is passed over (kept in ``passed_over`` when it is the
    first) and, if a step check broke, not extended, since every longer trace
    through it fails there first. A failure that only the drain saw is extended:
    more actions may change what the drain meets.

    ``progress(states)`` is told the count of states explored as it grows (as often as
    the supervising parent reads it), and the final count at the end.

    ``config`` defaults to the scenario's smallest world, ``alphabet`` to the
    scenario's actions in that world. States are merged on their fingerprint
    only for a scheduler that declares ``keeps_no_state_between_passes = True``
    (read by ``Engine.state_declaration``); for any other the search is a
    plain tree, exact but larger. It runs under the outside watchdog
    (``peftlife.search.outside``): a scheduler that takes the process down is a
    finding on the trace it was taking.
    """
    subject = sut.loaded(sut_spec)  # here, once: the supervised child inherits it
    sut_spec = subject.spec
    s = scenarios.for_sut(scenarios.load(scenario), sut_spec)
    world = config if config is not None else scenarios.smallest_world(s)

    def dead(failure: LifecycleFailure, examples: int, seconds: float) -> Exploration:
        reached = len(failure.run.actions)
        return Exploration(sut_spec, s.name, world, reached, examples, failure, True)

    # The child counts its states as examples; the parent tells ``progress`` of them.
    told = None if progress is None else (lambda states, _iterations: progress(states))
    result = outside.supervised_search(
        lambda tick: _explore(subject, s, world, depth, alphabet, max_states, invariant, tick),
        told,
        dead,
    )
    if progress is not None:  # the parent reads the child's count at intervals: the last one
        progress(result.states)
    return result


def _explore(
    subject: sut.Resolved,
    s: Scenario,
    world: EngineConfig,
    depth: int,
    alphabet: Alphabet | None,
    max_states: int,
    invariant: str | None,
    progress: Callable[[int, int], None] | None,
) -> Exploration:
    sut_spec, factory = subject.spec, subject.factory
    letters = alphabet if alphabet is not None else Alphabet.of(s, world)
    outside.trying(sut_spec, s.name, world, ())
    root = Engine(world, factory)
    # A declaration that raised is a finding, which the drain of the first state reports.
    merge = root.state_declaration().stateless
    copied = _Copies(world, factory)
    seen: set[Hashable] = {fingerprint(root)}
    frontier: list[tuple[Engine, tuple[Action, ...]]] = [(root, ())]
    states = 1
    passed_over: list[LifecycleFailure] = []

    def failure_of(actions: tuple[Action, ...]) -> LifecycleFailure:
        outcome = checked_replay(world, actions, factory)
        run = Run(sut_spec, s.name, world, actions)
        # A shortest trace: nothing left to shrink.
        return LifecycleFailure(outcome.violations, run, shrunk=True)

    def found(actions: tuple[Action, ...], reached: int, first: str) -> Exploration | None:
        """The exploration's end if ``actions`` is the failure looked for, else None."""
        if invariant is not None and first != invariant:
            if not passed_over:
                passed_over.append(failure_of(actions))
            return None
        failure = failure_of(actions)
        return Exploration(
            sut_spec, s.name, world, reached, states, failure, True, _first(passed_over)
        )

    def short(reached: int) -> Exploration:
        return Exploration(
            sut_spec, s.name, world, reached, states, None, False, _first(passed_over)
        )

    for level in range(1, depth + 1):
        following: list[tuple[Engine, tuple[Action, ...]]] = []
        for engine, trace in frontier:
            for action in letters.actions(engine, trace):
                child = copied(engine, trace)
                actions = (*trace, action)
                outside.trying(sut_spec, s.name, world, actions)
                snapshot = apply(child, action)
                broken = registry.check(snapshot, world) if snapshot is not None else []
                if broken:
                    end = found(actions, level, broken[0].invariant)
                    if end is not None:
                        return end
                    continue  # every trace through here fails first on another invariant
                key = fingerprint(child) if merge else actions
                if key in seen:
                    continue
                seen.add(key)
                states += 1
                if progress is not None:
                    progress(states, 0)
                drained = drain.drain(copied(child, actions)).violations
                if drained:
                    end = found(actions, level, drained[0].invariant)
                    if end is not None:
                        return end
                if states >= max_states:
                    return short(level - 1)
                following.append((child, actions))
        frontier = following
        if not frontier:
            break
    return Exploration(sut_spec, s.name, world, depth, states, None, True, _first(passed_over))


def _first(failures: list[LifecycleFailure]) -> LifecycleFailure | None:
    return failures[0] if failures else None


class _Copies:
    """Copies of explored states, each an engine to go on from.

    A copy copies the scheduler, which runs its code (``__deepcopy__``, its
    ``__reduce_ex__``), and some schedulers cannot be copied (one holding a
    lock). For those the state is rebuilt instead: a fresh engine replays the
    trace, which for a deterministic scheduler, as every replay assumes, is
    the same state. The first copy that fails turns the exploration to
    rebuilding for good.
    """

    def __init__(self, world: EngineConfig, factory: SchedulerFactory) -> None:
        self.world = world
        self.factory = factory
        self.rebuilding = False

    def __call__(self, engine: Engine, trace: tuple[Action, ...]) -> Engine:
        if not self.rebuilding:
            try:
                return untrusted.call(
                    lambda: copy.deepcopy(engine),
                    "copying the scheduler",
                    deadline=engine.schedule_deadline,
                )
            except untrusted.Failed:
                self.rebuilding = True
        return replay(self.world, trace, self.factory)[0]


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
    s = scenarios.load(run.scenario)
    submitted = [a for a in run.actions if a.kind == "submit"]
    # Its own sizes, and each range's two ends.
    prompt, output = ranges(s)["prompt_len"], ranges(s)["max_new_tokens"]
    prompts = sorted({a.prompt_len for a in submitted} | {prompt.lo, prompt.hi})
    outputs = sorted({a.max_new_tokens for a in submitted} | {output.lo, output.hi})
    letters = Alphabet.of(s, run.config, tuple(prompts), tuple(outputs))
    return explore(
        run.sut,
        run.scenario,
        depth=len(run.actions) - 1,
        config=run.config,
        alphabet=letters,
        max_states=max_states,
        invariant=None if any_invariant else failure.invariant,
    )
