"""Shrinking a counterexample over its trace, without Hypothesis.

The machine finds a failing example by search; this module makes it small by
replaying variations of its action list (delta debugging), then simplifying
each submitted request and the world's configuration, keeping a change only
when the replay still fails on the same invariant. A replay costs
milliseconds, so this takes seconds where Hypothesis's own shrink phase, which
re-runs whole generated examples, takes a minute; and it is deterministic: a
fixed budget of replays, no clock. A hung scheduler is the exception: each of
its replays waits out a deadline, so once a hang is confirmed the shrinker
replays with a short deadline and gives up after a few hung replays.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

import attrs

from peftlife.checker.drain import can_drain
from peftlife.search.trace import Action, Outcome, checked_replay
from peftlife.world.engine import DEFAULT_SCHEDULE_DEADLINE, EngineConfig
from peftlife.world.protocol import SchedulerFactory

T = TypeVar("T")

# Replays one shrink may spend; enough for the cases the scenarios generate.
BUDGET = 4000
# Once a hang is confirmed: the deadline of each shrink replay, and how many may hang.
HUNG_DEADLINE = 0.5
HUNG_REPLAYS = 8
# The passes that try every pair of positions run only on traces this short; on a
# longer one they would spend the budget before delta debugging has done its work.
PAIRWISE_LIMIT = 24


def first_invariant(
    config: EngineConfig,
    actions: tuple[Action, ...],
    factory: SchedulerFactory,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
) -> str | None:
    """The first invariant a checked replay violates (drain included), or None."""
    outcome = _outcome(config, actions, factory, schedule_deadline)
    return outcome.violations[0].invariant if outcome and outcome.violations else None


def _outcome(
    config: EngineConfig,
    actions: tuple[Action, ...],
    factory: SchedulerFactory,
    schedule_deadline: float | None,
) -> Outcome | None:
    try:
        return checked_replay(config, actions, factory, schedule_deadline=schedule_deadline)
    except ValueError:
        return None  # a variation that is not a valid world or request


@attrs.define
class _Shrinker:
    factory: SchedulerFactory
    invariant: str
    config: EngineConfig
    actions: tuple[Action, ...]
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE
    replays: int = 0
    hung_replays: int = 0
    # Verdicts already known: passes often propose the same candidate twice.
    known: dict[tuple[EngineConfig, tuple[Action, ...]], bool] = attrs.Factory(dict)

    def fails(self, config: EngineConfig, actions: tuple[Action, ...]) -> bool:
        key = (config, actions)
        if key in self.known:
            return self.known[key]
        if self.replays >= BUDGET or self.hung_replays >= HUNG_REPLAYS:
            return False
        requests = [
            (a.lora_task_id, a.prompt_len, a.max_new_tokens) for a in actions if a.kind == "submit"
        ]
        # Only worlds that can drain are fair: outside them the drain's verdict is void.
        verdict = False
        if can_drain(config, requests):
            self.replays += 1
            outcome = _outcome(config, actions, self.factory, self.schedule_deadline)
            if outcome is not None:
                self.hung_replays += outcome.hung
                verdict = (
                    bool(outcome.violations) and outcome.violations[0].invariant == self.invariant
                )
        self.known[key] = verdict
        return verdict

    def try_actions(self, actions: tuple[Action, ...]) -> bool:
        if actions != self.actions and self.fails(self.config, actions):
            self.actions = actions
            return True
        return False

    def try_config(self, config: EngineConfig) -> bool:
        if config != self.config and self.fails(config, self.actions):
            self.config = config
            return True
        return False

    def delete_actions(self) -> None:
        """Delta debugging: remove ever smaller chunks while the failure stays."""
        chunk = max(1, len(self.actions) // 2)
        while chunk >= 1:
            start = 0
            while start < len(self.actions):
                if not self.try_actions(_without(self.actions, start, start + chunk)):
                    start += chunk
            chunk //= 2

    def delete_pairs(self) -> None:
        """Remove two actions that are not neighbours at once (a submit and its step, say)."""
        if len(self.actions) > PAIRWISE_LIMIT:
            return
        self._first_success(
            lambda: (
                _dropping(self.actions, {i, j})
                for i in range(len(self.actions))
                for j in range(i + 2, len(self.actions))
            ),
            self.try_actions,
        )

    def move_earlier(self) -> None:
        """Move one action earlier when that lets another go (a submit before the steps)."""
        if len(self.actions) > PAIRWISE_LIMIT:
            return
        self._first_success(
            lambda: (
                moved
                for i in range(1, len(self.actions))
                for k in range(i - 1, -1, -1)
                for moved in (_moved(self.actions, i, k),)
                if self.fails(self.config, moved)
            ),
            self._try_shorter,
        )

    def unify_requests(self) -> None:
        """Give a request the parameters of an earlier one: fewer distinct requests to read."""
        self._first_success(
            lambda: (
                _with_submit(self.actions, j, _same_request(self.actions[j], self.actions[i]))
                for i, j in itertools.permutations(_submit_indices(self.actions), 2)
            ),
            self.try_actions,
        )

    def raise_values(self) -> None:
        """A larger request (weights sent, a longer prompt or output) that lets actions go."""
        if len(self.actions) > PAIRWISE_LIMIT:
            return
        self._first_success(
            lambda: (
                _with_submit(self.actions, index, larger)
                for index in _submit_indices(self.actions)
                for larger in _larger_submits(self.actions[index])
            ),
            self._try_shorter,
        )

    def _try_shorter(self, actions: tuple[Action, ...]) -> bool:
        """Keep ``actions`` (same length) only if deleting one action, or two neighbours,
        then still fails: a change that pays for itself."""
        if actions == self.actions or not self.fails(self.config, actions):
            return False
        for i in range(len(actions)):
            for j in (i, i + 1):
                shorter = _dropping(actions, {i, j})
                if self.fails(self.config, shorter):
                    self.actions = shorter
                    return True
        return False

    def simplify_requests(self) -> None:
        for index, action in enumerate(self.actions):
            if action.kind == "submit":
                self._first_success(partial(self._submit_variants, index), self.try_actions)

    def _submit_variants(self, index: int) -> Iterator[tuple[Action, ...]]:
        actions = self.actions
        for simpler in _simpler_submits(actions[index]):
            yield (*actions[:index], simpler, *actions[index + 1 :])

    def simplify_config(self) -> None:
        self._first_success(lambda: _simpler_configs(self.config, self.actions), self.try_config)

    @staticmethod
    def _first_success(candidates: Callable[[], Iterator[T]], attempt: Callable[[T], bool]) -> None:
        """Take the first candidate that still fails, then start over from it.

        Candidates are derived from the current case, so each success is kept.
        """
        while any(attempt(c) for c in candidates()):
            pass


# The passes of one round, in order: cheap deletions first, then the moves that
# need a deletion to pay off, then the simplifications of what is left.
PASSES: tuple[Callable[[_Shrinker], None], ...] = (
    _Shrinker.delete_actions,
    _Shrinker.delete_pairs,
    _Shrinker.move_earlier,
    _Shrinker.raise_values,
    _Shrinker.unify_requests,
    _Shrinker.simplify_requests,
    _Shrinker.simplify_config,
)
ROUNDS = 4


def _without(actions: tuple[Action, ...], start: int, end: int) -> tuple[Action, ...]:
    """The actions minus ``[start, end)``, with cancels renumbered to follow."""
    return _dropping(actions, set(range(start, end)))


def _dropping(actions: tuple[Action, ...], indices: set[int]) -> tuple[Action, ...]:
    """The actions minus those at ``indices``, with cancels renumbered to follow.

    Request ids are given in submit order, so removing a submit shifts the ids of
    later requests; a cancel of a removed request goes with it.
    """
    removed: list[int] = []
    kept: list[Action] = []
    submitted = 0
    for index, action in enumerate(actions):
        if action.kind == "submit":
            submitted += 1
            if index in indices:
                removed.append(submitted)
                continue
        elif index in indices:
            continue
        kept.append(action)
    result = []
    for action in kept:
        rid = action.request_id
        if action.kind == "cancel" and rid is not None:
            if rid in removed:
                continue
            action = attrs.evolve(action, request_id=rid - sum(r < rid for r in removed))
        result.append(action)
    return tuple(result)


def _moved(actions: tuple[Action, ...], source: int, dest: int) -> tuple[Action, ...]:
    """The action at ``source`` moved to ``dest``, cancels still naming the same requests."""
    order = list(range(len(actions)))
    order.insert(dest, order.pop(source))
    submits = [i for i in range(len(actions)) if actions[i].kind == "submit"]
    new_ids = {i: n for n, i in enumerate((i for i in order if i in submits), start=1)}
    old_to_new = {n: new_ids[i] for n, i in enumerate(submits, start=1)}
    result = []
    for i in order:
        action = actions[i]
        if action.kind == "cancel" and action.request_id in old_to_new:
            action = attrs.evolve(action, request_id=old_to_new[action.request_id])
        result.append(action)
    return tuple(result)


def _submit_indices(actions: tuple[Action, ...]) -> list[int]:
    return [i for i, a in enumerate(actions) if a.kind == "submit"]


def _with_submit(actions: tuple[Action, ...], index: int, submit: Action) -> tuple[Action, ...]:
    return (*actions[:index], submit, *actions[index + 1 :])


def _same_request(action: Action, model: Action) -> Action:
    return attrs.evolve(
        action,
        lora_task_id=model.lora_task_id,
        lora_weights=model.lora_weights,
        prompt_len=model.prompt_len,
        max_new_tokens=model.max_new_tokens,
    )


def _larger_submits(action: Action) -> Iterator[Action]:
    if not action.lora_weights and action.lora_task_id is not None:
        yield attrs.evolve(action, lora_weights=True)
    for prompt in (action.prompt_len + 1, action.prompt_len + 2, 2 * action.prompt_len):
        yield attrs.evolve(action, prompt_len=prompt)
    for outputs in (action.max_new_tokens + 1, 2 * action.max_new_tokens):
        yield attrs.evolve(action, max_new_tokens=outputs)


def _towards(value: int, floor: int) -> Iterator[int]:
    """Smaller values to try, smallest first."""
    seen = set()
    for v in (floor, value // 2, value - 1):
        if floor <= v < value and v not in seen:
            seen.add(v)
            yield v


def _simpler_submits(action: Action) -> Iterator[Action]:
    for prompt in _towards(action.prompt_len, 1):
        yield attrs.evolve(action, prompt_len=prompt)
    for outputs in _towards(action.max_new_tokens, 1):
        yield attrs.evolve(action, max_new_tokens=outputs)
    if action.lora_weights:
        yield attrs.evolve(action, lora_weights=False)


_INT_FIELDS = (
    ("device_pages", 1),
    ("host_pages", 0),
    ("draft_host_pages", 0),
    ("lora_device_pages", 1),
    ("lora_host_pages", 1),
    ("max_num_tokens", 1),
    ("max_batch_size", 1),
    ("chunk_unit_size", 1),
    ("tokens_per_block", 1),
)


def _simpler_configs(config: EngineConfig, actions: tuple[Action, ...]) -> Iterator[EngineConfig]:
    used = {a.lora_task_id for a in actions if a.kind == "submit"}
    kept = tuple((t, p) for t, p in config.adapter_pages if t in used)
    if kept != config.adapter_pages and kept:
        yield attrs.evolve(config, adapter_pages=kept)
    if config.draft_device_pages is not None:
        yield attrs.evolve(config, draft_device_pages=None, draft_host_pages=0)
    if config.enable_chunked_context:
        yield attrs.evolve(config, enable_chunked_context=False)
    for name, floor in _INT_FIELDS:
        for value in _towards(getattr(config, name), floor):
            change: dict[str, Any] = {name: value}
            yield attrs.evolve(config, **change)
    if config.draft_device_pages is not None:
        for value in _towards(config.draft_device_pages, 1):
            yield attrs.evolve(config, draft_device_pages=value)
    for index, (task, pages) in enumerate(config.adapter_pages):
        for value in _towards(pages, 1):
            smaller = list(config.adapter_pages)
            smaller[index] = (task, value)
            yield attrs.evolve(config, adapter_pages=tuple(smaller))


def minimize(
    config: EngineConfig,
    actions: tuple[Action, ...],
    factory: SchedulerFactory,
    invariant: str,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
    *,
    hung: bool = False,
) -> tuple[EngineConfig, tuple[Action, ...]]:
    """A smaller world and action list that still fail on ``invariant``.

    Returns the input unchanged if it does not fail on ``invariant`` to begin with.
    ``hung`` says the search saw the scheduler miss its deadline: the
    confirming replay then already uses the short one.
    """
    short = min(HUNG_DEADLINE, schedule_deadline or HUNG_DEADLINE)
    outcome = _outcome(config, actions, factory, short if hung else schedule_deadline)
    if outcome is None or not outcome.violations or outcome.violations[0].invariant != invariant:
        return config, actions
    if outcome.hung:
        # Every hung replay waits out its deadline: shrink a hang with a short one.
        schedule_deadline = short
    shrinker = _Shrinker(factory, invariant, config, actions, schedule_deadline)
    for _ in range(ROUNDS):  # every pass, until a round changes nothing (bounded)
        before = (shrinker.config, shrinker.actions)
        for run_pass in PASSES:
            run_pass(shrinker)
        if (shrinker.config, shrinker.actions) == before:
            break
    actions = shrinker.actions
    if shrinker.config.draft_device_pages is None:
        # Without a draft pool a fault aimed at it lands on the target: say so.
        actions = tuple(attrs.evolve(a, pool="target") for a in actions)
    return shrinker.config, actions
