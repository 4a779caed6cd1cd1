"""Breadth-first search over one world's states: the shortest failing trace, or none.

From the empty world it applies every action of an ``Alphabet`` (the
machine's own letters, ``peftlife.search.actions``, with a finite choice of
requests to submit), one level of depth at a time, and merges states whose
world has the same fingerprint. Each iteration is checked as the machine
checks it, and every new state is drained (invariant 12), on a copy if it is
to be extended, so the first failing trace it meets is a shortest one. A world
drained before is not drained again (``Verdicts``), and the state an input
leads to is copied only when the search needs it (``Engine.inputs_withdrawn``).

Two callers: the explorer (``peftlife.search.explore``), which runs it under
the outside watchdog and makes a finding of what it meets, and the shrinker's
last pass (``peftlife.search.failure.minimized``), which asks it for a failure
shorter than the case it is stuck on.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Hashable, Iterator
from typing import NamedTuple

import attrs

from peftlife.checker import drain, registry
from peftlife.search.actions import Letter, enabled, ranges, submits
from peftlife.search.scenarios import Scenario
from peftlife.search.trace import Action, apply, replay
from peftlife.world import untrusted
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
from peftlife.world.protocol import SchedulerFactory


@attrs.frozen
class Alphabet:
    """The actions the search may take: the scenario's letters (``peftlife.search.actions``)
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

        >>> from peftlife.search import scenarios
        >>> s = scenarios.load("kv-pressure")
        >>> len(Alphabet.of(s, scenarios.smallest_world(s)).submits)  # 1 adapter x 2 x 2
        4
        """
        sizes = {"prompt_len": prompt_lens or (), "max_new_tokens": max_new_tokens or ()}
        return cls(enabled(scenario), submits(scenario, config, sizes), scenario.max_requests)

    @classmethod
    def around(
        cls, scenario: Scenario, config: EngineConfig, actions: tuple[Action, ...]
    ) -> Alphabet:
        """The scenario's actions in ``config``, with the sizes ``actions`` submit besides
        each range's two ends: where a case's shorter neighbours are looked for."""
        submitted = [a for a in actions if a.kind == "submit"]
        prompt, output = ranges(scenario)["prompt_len"], ranges(scenario)["max_new_tokens"]
        prompts = sorted({a.prompt_len for a in submitted} | {prompt.lo, prompt.hi})
        outputs = sorted({a.max_new_tokens for a in submitted} | {output.lo, output.hi})
        return cls.of(scenario, config, tuple(prompts), tuple(outputs))

    def own(self, actions: tuple[Action, ...]) -> Alphabet:
        """This alphabet (``around`` a case) cut down to what the case itself does: the
        letters of the kinds it takes, requests with the adapters, weights and paths its
        own take, and at most as many requests as it submits. Far fewer choices, so a
        search of a given bound goes deeper: to the same requests in another order, or
        shorter or longer ones that need fewer steps or fewer requests to reach the same
        point."""
        kinds = {a.kind for a in actions}
        submitted = [a for a in actions if a.kind == "submit"]
        owners = {_owner(a) for a in submitted}
        return Alphabet(
            tuple(letter for letter in self.letters if letter.name in kinds),
            tuple(a for a in self.submits if _owner(a) in owners),
            min(len(submitted), self.max_requests),
        )

    def exact(self, actions: tuple[Action, ...]) -> Alphabet:
        """This alphabet with only the very requests the case ``actions`` submits: on a
        case's ``own``, the fewest choices, so the deepest search, to the same requests
        in another order, or fewer of them, or one of them twice."""
        submitted = {a for a in actions if a.kind == "submit"}
        return attrs.evolve(self, submits=tuple(a for a in self.submits if a in submitted))

    def by_owner(self) -> tuple[Alphabet, ...]:
        """This alphabet cut to the requests of one owner (adapter, weights, path) at a
        time, none when it holds one owner only. Half the choices or fewer, so a search
        of a given bound goes deeper, to a case whose requests all share an adapter."""
        owners = dict.fromkeys(_owner(a) for a in self.submits)
        if len(owners) < 2:
            return ()
        return tuple(
            attrs.evolve(self, submits=tuple(a for a in self.submits if _owner(a) == owner))
            for owner in owners
        )

    def actions(self, engine: Engine, trace: tuple[Action, ...]) -> Iterator[Action]:
        """The actions open after ``trace``, in a fixed order (so a search is deterministic)."""
        for letter in self.letters:
            yield from letter.choices(engine, trace, self)


def _owner(submit: Action) -> tuple[int | None, bool, bool]:
    """Who a request's adapter belongs to, as an alphabet tells requests apart: its
    adapter, whether it sends the weights, whether it names a path."""
    return (submit.lora_task_id, submit.lora_weights, submit.lora_path)


@attrs.frozen
class Searched:
    """How a search ended: the first failing trace it met, or how far it proved none."""

    # The failure looked for, a shortest one; None if none was met.
    failure: tuple[Action, ...] | None
    # The depth covered (or at which the failure was met) and the states visited.
    depth: int
    states: int
    # False when the state limit stopped the search before its depth was covered.
    complete: bool
    # When the search was for one invariant: the first failure on another that it
    # passed over (a shortest one of any kind, shorter than ``failure``), else None.
    passed_over: tuple[Action, ...] | None = None


class Print(NamedTuple):
    """A state's fingerprint: its world, and the faults armed in its pools."""

    world: Hashable
    faults: tuple[tuple[int, int], ...]


def fingerprint(engine: Engine) -> Print:
    """Everything that decides the world's future: two states with equal prints behave alike.

    The world of the snapshot (requests, ownership, pools, LoRA caches with their
    eviction order), plus what a snapshot leaves out: pending cancellations, each
    request's weights and folded tokens, the next request id, and what the
    overlap loop has yet to read back; and apart, the pending faults.
    """
    extra = tuple(
        (r.request_id, r.lora_weights, r.lora_path, r.num_folded, r.context_chunk_size)
        for r in engine.live_requests
    )
    world = (
        engine.snapshot().world(),
        extra,
        tuple(engine.pending_cancels),
        engine.next_request_id,
        engine.pending_read_back,
    )
    return Print(world, tuple(pool.pending_faults for pool in engine.pools))


def search(
    factory: SchedulerFactory,
    world: EngineConfig,
    letters: Alphabet,
    depth: int,
    *,
    max_states: int,
    invariant: str | None = None,
    trying: Callable[[tuple[Action, ...]], None] | None = None,
    progress: Callable[[int], None] | None = None,
    until: float | None = None,
    drain_memo: bool = True,
) -> Searched:
    """Every trace up to ``depth`` actions in ``world``, breadth first; the first failure.

    ``invariant`` names the one failure to look for: a trace whose first violation
    is on another invariant is passed over (kept in ``passed_over`` when it is the
    first) and, if a step check broke, not extended, since every longer trace
    through it fails there first. A failure that only the drain saw is extended:
    more actions may change what the drain meets.

    It stops after ``max_states`` states, the bound of its loop (every level adds
    at least one state or ends the search), or at ``until`` (``time.monotonic()``),
    if given, whichever comes first; then it is not ``complete``. ``until`` is a
    user's time cap (the shrink's), which makes what is found depend on the
    machine's load: the searches tests meet are bounded by ``max_states`` alone.
    States are merged on their fingerprint only for a scheduler that declares
    ``keeps_no_state_between_passes = True`` (read by ``Engine.state_declaration``);
    for any other the search is a plain tree, exact but larger. For the same
    schedulers a world drained before takes the verdict it had (``Verdicts``),
    unless ``drain_memo`` is False: then every new state is drained, which finds
    the same (tests/search/test_breadth.py). ``trying`` is told each trace before
    it is run (the watchdog's journal), ``progress`` the count of states as it grows.
    """
    root = Engine(world, factory)
    # A declaration that raised is a finding, which the drain of the first state reports.
    merge = root.state_declaration().stateless
    copied = _Copies(world, factory)
    verdicts = Verdicts(copied, remember=merge and drain_memo)
    seen: set[Hashable] = {fingerprint(root)}
    frontier: list[tuple[Engine, tuple[Action, ...]]] = [(root, ())]
    states = 1
    passed_over: tuple[Action, ...] | None = None

    def looked_for(actions: tuple[Action, ...], first: str) -> bool:
        nonlocal passed_over
        if invariant is None or first == invariant:
            return True
        passed_over = passed_over or actions
        return False

    for level in range(1, depth + 1):
        following: list[tuple[Engine, tuple[Action, ...]]] = []
        for engine, trace in frontier:
            choices = tuple(letters.actions(engine, trace))
            for n, action in enumerate(choices, 1):
                actions = (*trace, action)
                if trying is not None:
                    trying(actions)
                child: Engine | None
                if merge and action.kind != "step" and n < len(choices):
                    # An input (any action but a step) runs no scheduler code: the state it
                    # leads to is printed in the parent, and copied only if it is new and
                    # needed, to be extended or drained.
                    with engine.inputs_withdrawn():
                        apply(engine, action)
                        state: Print | None = fingerprint(engine)
                        if state in seen:
                            continue
                        needed = level < depth or not verdicts.knows(state)
                        child = copied(engine, actions) if needed else None
                else:
                    # The last child is made in its parent, which nothing reads after it.
                    child = engine if n == len(choices) else copied(engine, trace)
                    snapshot = apply(child, action)
                    broken = registry.check(snapshot, world) if snapshot is not None else []
                    if broken:
                        if looked_for(actions, broken[0].invariant):
                            return Searched(actions, level, states, True, passed_over)
                        continue  # every trace through here fails first on another invariant
                    state = fingerprint(child) if merge else None
                key = actions if state is None else state
                if key in seen:
                    continue
                seen.add(key)
                states += 1
                if progress is not None:
                    progress(states)
                # A state never extended, at the last level or the last state, is drained itself.
                extended = level < depth and states < max_states
                verdict = verdicts.of(child, actions, state, in_place=not extended)
                if verdict is not None and looked_for(actions, verdict):
                    return Searched(actions, level, states, True, passed_over)
                if states >= max_states or (until is not None and time.monotonic() > until):
                    return Searched(None, level - 1, states, False, passed_over)
                if extended:
                    assert child is not None, "a state to extend is made"
                    following.append((child, actions))
        frontier = following
        if not frontier:
            break
    return Searched(None, depth, states, True, passed_over)


class Verdicts:
    """The drain's verdict on each new state of a search: the invariant its first
    violation broke, or None if it drained clean.

    With ``remember``, a state whose world was drained before, faults aside
    (``Print.world``), takes that verdict without a copy or a drain. The search
    remembers only under the premise on which it merges states (a scheduler that
    declares ``keeps_no_state_between_passes = True``, deterministic as every
    replay assumes), and there it is sound for three reasons:

    - ``drain.drain`` clears the pending faults first, before it reads its bound
      or its premise or steps: two states that differ in them alone drain alike.
    - The rest of the fingerprint is everything that decides the world's future
      (``fingerprint``): the requests with what a snapshot leaves out of them, the
      pools, the PEFT manager and its LoRA caches, the pending cancellations, the
      next request id and what the overlap loop has yet to read back. The drain's
      bound and premise are read from the requests, its livelock memory starts
      empty, and its checks (``registry.check``) judge one snapshot at a time.
    - What the fingerprint leaves out, the iteration count and the last step's
      record, no step of a drain reads: the count only labels its violations, and
      the verdict is the first violation's invariant, not its label.
    """

    def __init__(self, copied: _Copies, *, remember: bool) -> None:
        self.copied = copied
        self.remember = remember
        self._known: dict[Hashable, str | None] = {}

    def knows(self, state: Print | None) -> bool:
        """Whether the verdict on a state printed ``state`` is remembered."""
        return self.remember and state is not None and state.world in self._known

    def of(
        self,
        child: Engine | None,
        trace: tuple[Action, ...],
        state: Print | None,
        *,
        in_place: bool,
    ) -> str | None:
        """The verdict on ``child`` (reached by ``trace``, printed ``state`` when the
        search merges): remembered (then ``child`` may be None, never made), or
        drained on a copy, or ``in_place`` for a state never extended, which the
        drain then consumes."""
        if self.knows(state):
            assert state is not None
            return self._known[state.world]
        assert child is not None, "a state whose verdict is not known is made to be drained"
        violations = drain.drain(child if in_place else self.copied(child, trace)).violations
        verdict = violations[0].invariant if violations else None
        if self.remember and state is not None:
            self._known[state.world] = verdict
        return verdict


class _Copies:
    """Copies of searched states, each an engine to go on from.

    What the world holds that cannot change (its configuration, the last step's
    records, the views it has shown) a copy shares (``peftlife.world.immutable``).
    A copy copies the scheduler, which runs its code (``__deepcopy__``, its
    ``__reduce_ex__``), and some schedulers cannot be copied (one holding a
    lock). For those the state is rebuilt instead: a fresh engine replays the
    trace, which for a deterministic scheduler, as every replay assumes, is
    the same state. The first copy that fails turns the search to
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
