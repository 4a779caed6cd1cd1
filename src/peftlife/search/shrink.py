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

    def fails(self, config: EngineConfig, actions: tuple[Action, ...]) -> bool:
        if self.replays >= BUDGET or self.hung_replays >= HUNG_REPLAYS:
            return False
        requests = [
            (a.lora_task_id, a.prompt_len, a.max_new_tokens) for a in actions if a.kind == "submit"
        ]
        # Only worlds that can drain are fair: outside them the drain's verdict is void.
        if not can_drain(config, requests):
            return False
        self.replays += 1
        outcome = _outcome(config, actions, self.factory, self.schedule_deadline)
        if outcome is None:
            return False
        self.hung_replays += outcome.hung
        return bool(outcome.violations) and outcome.violations[0].invariant == self.invariant

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


def _without(actions: tuple[Action, ...], start: int, end: int) -> tuple[Action, ...]:
    """The actions minus ``[start, end)``, with cancels renumbered to follow.

    Request ids are given in submit order, so removing a submit shifts the ids of
    later requests; a cancel of a removed request goes with it.
    """
    removed: list[int] = []
    kept: list[Action] = []
    submitted = 0
    for index, action in enumerate(actions):
        if action.kind == "submit":
            submitted += 1
            if start <= index < end:
                removed.append(submitted)
                continue
        elif start <= index < end:
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
    for _ in range(3):  # passes until nothing changes (bounded)
        before = (shrinker.config, shrinker.actions)
        shrinker.delete_actions()
        shrinker.simplify_requests()
        shrinker.simplify_config()
        if (shrinker.config, shrinker.actions) == before:
            break
    actions = shrinker.actions
    if shrinker.config.draft_device_pages is None:
        # Without a draft pool a fault aimed at it lands on the target: say so.
        actions = tuple(attrs.evolve(a, pool="target") for a in actions)
    return shrinker.config, actions
