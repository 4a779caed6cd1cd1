"""Shrinking a counterexample over its trace, without Hypothesis.

The machine finds a failing example by search; this module makes it small by
replaying variations of its action list (delta debugging), then simplifying
each submitted request and the world's configuration, keeping a change only
when the replay still fails on the same invariant. A replay costs
milliseconds, so this takes well under a second where Hypothesis's own shrink
phase, which re-runs whole generated examples, takes a minute.

Why it always ends. Every case (a world and an action list) has a ``size``:
shortlex over a canonical encoding of natural numbers, that is the number of
actions first, then each action's encoding in order, then the world's (its
variable-length adapter list led by its length). That order is well-founded:
no infinite chain of ever smaller cases exists. The shrinker keeps a candidate
only when it is strictly smaller than the case it has (``_Shrinker.smaller``),
and drops any other candidate before replaying it, so whatever the passes
propose, the kept cases form a strictly descending chain, which must end. The
chain can still be long, so two bounds make the end come soon: every verdict
asked for costs one step of ``STEP_BUDGET``, a cached one included, and the
whole shrink stops at a time cap (``DEFAULT_TIMEOUT``). At either bound the
smallest case so far is the result, and ``Shrunk.stopped`` says which bound
ended it. Below the cap the shrink is deterministic: no clock decides anything.

A hung scheduler is the exception to "milliseconds": each of its replays waits
out a deadline, so once a hang is confirmed the shrinker replays with a short
deadline and gives up after a few hung replays.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, Literal, TypeVar

import attrs

from peftlife.checker.drain import can_drain
from peftlife.search.trace import KINDS, REQUEST_KINDS, Action, Outcome, checked_replay
from peftlife.world import config as knobs
from peftlife.world.config import EngineConfig
from peftlife.world.engine import DEFAULT_SCHEDULE_DEADLINE
from peftlife.world.protocol import CHUNKING_POLICIES, SchedulerFactory
from peftlife.world.words import count

T = TypeVar("T")

# Verdicts one shrink may ask for, cached ones included: a cached verdict costs no
# replay, but a pass that kept asking for them would otherwise never end.
STEP_BUDGET = 20_000
# Replays one shrink may spend; enough for the cases the scenarios generate.
REPLAY_BUDGET = 4000
# Seconds one shrink may take before it reports the smallest case so far.
DEFAULT_TIMEOUT = 30.0
# Once a hang is confirmed: the deadline of each shrink replay, and how many may hang.
HUNG_DEADLINE = 0.5
HUNG_REPLAYS = 8
# The passes that try every pair of positions run only on traces this short; on a
# longer one they would spend the budget before delta debugging has done its work.
PAIRWISE_LIMIT = 24


def timeout_from_text(text: str) -> float | None:
    """A shrink's time cap as a front door reads it: seconds, where 0 means no cap.

    >>> timeout_from_text("2.5"), timeout_from_text("0")
    (2.5, None)
    """
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"{text!r} is not a number of seconds (0 for no cap)")
    return seconds or None


# Why a shrink ended before every pass had run its course (None when they all did).
Stop = Literal["time cap", "step budget", "replay budget", "hung replays"]


@attrs.frozen
class ShrinkProgress:
    """Where a running shrink is, for a progress line."""

    replays: int
    best_actions: int

    def describe(self) -> str:
        return (
            f"shrinking: {count(self.replays, 'replay')}, best {count(self.best_actions, 'action')}"
        )


@attrs.frozen
class Shrunk:
    """The smallest case a shrink found, and what it cost."""

    config: EngineConfig
    actions: tuple[Action, ...]
    replays: int = 0
    # Verdicts asked for, cached ones included: the unit of ``STEP_BUDGET``.
    steps: int = 0
    seconds: float = 0.0
    stopped: Stop | None = None
    timeout: float | None = None

    @property
    def note(self) -> str | None:
        """What a report says when the shrink stopped at a bound, else None."""
        if self.stopped is None:
            return None
        bound = {
            "time cap": f"its {self.timeout:g} s time cap",
            "step budget": f"its budget of {STEP_BUDGET} steps",
            "replay budget": f"its budget of {REPLAY_BUDGET} replays",
            "hung replays": f"{HUNG_REPLAYS} replays that hung",
        }[self.stopped]
        replays = count(self.replays, "replay")
        return f"the shrink stopped at {bound} after {replays}: a smaller case may exist"


# ---- the order every kept candidate descends ----

# Every word a case holds, ranked: the simpler choice first (a fault on the
# target pool is simpler than one on the draft pool).
_WORD_RANK: dict[str, int] = {
    word: rank
    for words in (
        KINDS,
        ("target", "draft"),
        CHUNKING_POLICIES,
        knobs.values(knobs.RecomputeTeardown),
        knobs.values(knobs.Executor),
        knobs.values(knobs.InflightIds),
        knobs.values(knobs.HoldReason),
        knobs.values(knobs.InFlightPin),
    )
    for rank, word in enumerate(words)
}


def _code(value: object) -> tuple[int, ...]:
    """A canonical encoding as natural numbers; a tuple is led by its length.

    Leading every variable-length part by its length makes plain tuple
    comparison of two codes a shortlex order, which is well-founded.
    """
    if value is None:
        return (0,)
    if isinstance(value, bool | int):
        return (int(value),)
    if isinstance(value, str):
        return (_WORD_RANK[value],)
    if isinstance(value, tuple):
        return (len(value), *itertools.chain.from_iterable(_code(v) for v in value))
    raise TypeError(f"no canonical encoding for {value!r}")


def _record_code(record: Any) -> tuple[int, ...]:
    return tuple(
        itertools.chain.from_iterable(
            _code(getattr(record, f.name)) for f in attrs.fields(type(record))
        )
    )


def size(config: EngineConfig, actions: tuple[Action, ...]) -> tuple[int, ...]:
    """Where a case sits in the shrink order: fewer actions first, then simpler
    actions in order, then a simpler world. Smaller is simpler.

    >>> small = (Action("step"),)
    >>> size(EngineConfig(), small) < size(EngineConfig(), (*small, *small))
    True
    """
    return (
        len(actions),
        *itertools.chain.from_iterable(_record_code(a) for a in actions),
        *_record_code(config),
    )


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


class _Stopped(Exception):
    """A bound was reached: the shrink ends with the smallest case so far."""

    def __init__(self, why: Stop) -> None:
        super().__init__(why)
        self.why = why


@attrs.define
class _Shrinker:
    factory: SchedulerFactory
    invariant: str | None
    config: EngineConfig
    actions: tuple[Action, ...]
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE
    # ``time.monotonic()`` past which no verdict is asked for; None for no cap.
    deadline: float | None = None
    progress: Callable[[ShrinkProgress], None] | None = None
    # In place of the invariant check when given: whether a candidate still fails.
    predicate: Callable[[EngineConfig, tuple[Action, ...]], bool] | None = None
    replays: int = 0
    steps: int = 0
    hung_replays: int = 0
    # Verdicts already known: passes often propose the same candidate twice.
    known: dict[tuple[EngineConfig, tuple[Action, ...]], bool] = attrs.Factory(dict)

    def fails(self, config: EngineConfig, actions: tuple[Action, ...]) -> bool:
        """Whether the case still fails on the invariant; every call is a step."""
        self.steps += 1
        if self.steps > STEP_BUDGET:
            raise _Stopped("step budget")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _Stopped("time cap")
        key = (config, actions)
        if key in self.known:
            return self.known[key]
        if self.replays >= REPLAY_BUDGET:
            raise _Stopped("replay budget")
        if self.hung_replays >= HUNG_REPLAYS:
            raise _Stopped("hung replays")
        requests = [
            (a.lora_task_id, a.prompt_len, a.max_new_tokens) for a in actions if a.kind == "submit"
        ]
        # Only worlds that can drain are fair: outside them the drain's verdict is void.
        verdict = False
        if can_drain(config, requests):
            self.replays += 1
            outcome = None
            if self.predicate is not None:
                verdict = self.predicate(config, actions)
            else:
                outcome = _outcome(config, actions, self.factory, self.schedule_deadline)
            if outcome is not None:
                self.hung_replays += outcome.hung
                verdict = (
                    bool(outcome.violations) and outcome.violations[0].invariant == self.invariant
                )
            if self.progress is not None:
                self.progress(ShrinkProgress(self.replays, len(self.actions)))
        self.known[key] = verdict
        return verdict

    def adopt(self, config: EngineConfig, actions: tuple[Action, ...]) -> bool:
        """Keep the candidate if it is smaller than the case so far and still fails.

        The one way a case changes: a candidate that is not smaller is dropped
        before it is replayed, so the kept cases descend the order.
        """
        if size(config, actions) >= size(self.config, self.actions):
            return False
        if not self.fails(config, actions):
            return False
        self.config, self.actions = config, actions
        return True

    def try_actions(self, actions: tuple[Action, ...]) -> bool:
        return self.adopt(self.config, actions)

    def try_config(self, config: EngineConfig) -> bool:
        return self.adopt(config, self.actions)

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
                _moved(self.actions, i, k)
                for i in range(1, len(self.actions))
                for k in range(i - 1, -1, -1)
            ),
            self._try_shorter,
        )

    def unify_requests(self) -> None:
        """Give a request the parameters of a simpler one: fewer distinct requests to read.

        Only a copy from a simpler request is smaller in the order; the other
        direction is dropped unreplayed (copying both ways once let X, X, Y and
        Y, X, Y take turns for ever).
        """
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
        then still fails: a change that pays for itself.

        ``actions`` itself is only a probe, replayed to learn whether its shorter
        variants are worth replaying; it is never kept, and what is kept is shorter.
        """
        if actions == self.actions or not self.fails(self.config, actions):
            return False
        return any(
            self.try_actions(_dropping(actions, {i, j}))
            for i in range(len(actions))
            for j in (i, i + 1)
        )

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

    def shrink_pressure(self) -> None:
        """A shorter prompt and a pool smaller by the pages it no longer needs, together.

        A failure that needs KV pressure holds neither move alone: a smaller pool
        alone adds pressure and changes the path, a shorter prompt alone relieves
        it. Taken together the pressure stays, and the world gets smaller.
        """
        self._first_success(
            lambda: _tighter_worlds(self.config, self.actions),
            lambda candidate: self.adopt(*candidate),
        )

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
    _Shrinker.shrink_pressure,
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
        if action.kind in REQUEST_KINDS and rid is not None:
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
        if action.kind in REQUEST_KINDS and action.request_id in old_to_new:
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
        lora_path=model.lora_path,
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
    if action.lora_path:
        yield attrs.evolve(action, lora_path=False)


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


def _tighter_worlds(
    config: EngineConfig, actions: tuple[Action, ...]
) -> Iterator[tuple[EngineConfig, tuple[Action, ...]]]:
    """Each submit's prompt cut down, with the device pool cut by the pages that frees,
    smallest world first.

    Two ways to count what is freed, since which keeps the pressure depends on how
    the prompt's chunks fall: the prompt's own pages, for shorter prompts spread
    over the range; and the whole request's (prompt and output, what a world must
    hold for the request to drain), for the shortest and the longest prompt of
    each smaller page count.
    """
    block = config.tokens_per_block

    def pages(tokens: int) -> int:
        return -(-tokens // block)

    for index in _submit_indices(actions):
        action = actions[index]
        prompt, outputs = action.prompt_len, action.max_new_tokens
        cuts = {(shorter, pages(prompt) - pages(shorter)) for shorter in _towards(prompt, 1)}
        whole = pages(prompt + outputs)
        for fewer in _towards(whole, 1):
            shortest = max(1, (fewer - 1) * block + 1 - outputs)
            longest = min(fewer * block - outputs, prompt - 1)
            cuts |= {(p, whole - fewer) for p in (shortest, longest) if shortest <= p <= longest}
        for shorter, freed in sorted(cuts, key=lambda cut: (-cut[1], cut[0])):
            if 0 < freed < config.device_pages:
                yield (
                    attrs.evolve(config, device_pages=config.device_pages - freed),
                    _with_submit(actions, index, attrs.evolve(action, prompt_len=shorter)),
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
    invariant: str | None,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
    *,
    hung: bool = False,
    timeout: float | None = DEFAULT_TIMEOUT,
    progress: Callable[[ShrinkProgress], None] | None = None,
    still_fails: Callable[[EngineConfig, tuple[Action, ...]], bool] | None = None,
) -> Shrunk:
    """The smallest world and action list found that still fail on ``invariant``.

    Returns the input unchanged if it does not fail on ``invariant`` to begin with.
    ``hung`` says the search saw the scheduler miss its deadline: the
    confirming replay then already uses the short one. ``timeout`` caps the
    whole shrink in seconds (None or 0: no cap); ``progress`` is told after
    every replay. ``still_fails``, when given, says whether a case fails in
    place of the checked replay on ``invariant`` (None then: ``peftlife diff``
    shrinks a divergence of two schedulers, which breaks no invariant, with it);
    the order, the passes and the bounds are the same.
    """
    start = time.monotonic()
    short = min(HUNG_DEADLINE, schedule_deadline or HUNG_DEADLINE)
    if still_fails is not None:
        outcome = None
        if not still_fails(config, actions):
            return Shrunk(config, actions, replays=1, steps=1, seconds=time.monotonic() - start)
    else:
        outcome = _outcome(config, actions, factory, short if hung else schedule_deadline)
        if (
            outcome is None
            or not outcome.violations
            or outcome.violations[0].invariant != invariant
        ):
            return Shrunk(config, actions, replays=1, steps=1, seconds=time.monotonic() - start)
    if outcome is not None and outcome.hung:
        # Every hung replay waits out its deadline: shrink a hang with a short one.
        schedule_deadline = short
    shrinker = _Shrinker(
        factory,
        invariant,
        config,
        actions,
        schedule_deadline,
        deadline=start + timeout if timeout else None,
        progress=progress,
        predicate=still_fails,
    )
    stopped: Stop | None = None
    try:
        for _ in range(ROUNDS):  # every pass, until a round changes nothing (bounded)
            before = (shrinker.config, shrinker.actions)
            for run_pass in PASSES:
                run_pass(shrinker)
            if (shrinker.config, shrinker.actions) == before:
                break
    except _Stopped as bound:
        stopped = bound.why
    actions = shrinker.actions
    if shrinker.config.draft_device_pages is None:
        # Without a draft pool a fault aimed at it lands on the target: say so
        # (the simpler word, so the result stays no larger in the order).
        actions = tuple(attrs.evolve(a, pool="target") for a in actions)
    return Shrunk(
        shrinker.config,
        actions,
        replays=shrinker.replays + 1,
        steps=shrinker.steps + 1,
        seconds=time.monotonic() - start,
        stopped=stopped,
        timeout=timeout or None,
    )
