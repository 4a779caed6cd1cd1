"""Shrinking a counterexample over its trace, without Hypothesis.

The machine finds a failing example by search; this module makes it small by
replaying variations of its trace (a world and an action list): deleting
actions (delta debugging), then simplifying each action and the world, keeping
a change only when the variation still fails. What "still fails" means is one
predicate, given by the caller: ``same_finding`` (a checked replay that fails
on the same invariant) or, for ``peftlife diff``, the same divergence of two
schedulers. A replay costs milliseconds, so this takes well under a second
where Hypothesis's own shrink phase, which re-runs whole generated examples,
takes a minute.

The passes are run as Hypothesis's shrinker runs its own: each keeps its place
after a success (it goes on from where it was, on the smaller case, rather than
from the start), keeps statistics (``PassStats``), and after each round the
passes that removed actions go first. Two costly passes (``LAST_RESORT``)
run only in a round where the others changed nothing: they replace actions by
others (two neighbours by a copy of one action, a tail holding a fault by one
more request), which a failure found by a fault often needs to reach the
shortest case, and which deletion never finds. When those too change nothing,
one last move leaves the passes behind: a search of the case's own world,
breadth first, for a shorter case (``Shorter``, given by the caller; the
explorer's search, ``peftlife.search.breadth``, for a broken invariant), which
finds what no local move reaches, two requests changed at once say, as long
as it is a few actions deep. A candidate must stay a case the
scenario could have generated (``admits``): a smaller case outside it is a
story the search could never have told, and a dead end for the shrink.

Why it always ends. Every case has a ``size``: shortlex over a canonical
encoding of natural numbers, that is the number of actions first, then each
action's encoding in order, then the world's (its variable-length adapter list
led by its length). That order is well-founded: no infinite chain of ever
smaller cases exists. The shrinker keeps a candidate only when it is strictly
smaller than the case it has (``_Shrinker.adopt``), and drops any other
candidate before replaying it, so whatever the passes propose, the kept cases
form a strictly descending chain, which must end. Each loop of a pass moves
past a place or keeps a smaller case, and each round runs every pass at most
once (the last-resort ones only when the others changed nothing; the search of
the world within its own bound of states, and in a later round only after a
search that found a shorter case), at most ``MAX_ROUNDS`` rounds. Three
counts make the end come soon, whatever the predicate: every verdict asked for
costs one step of ``STEP_BUDGET`` (a cached one included), every replay one of
``REPLAY_BUDGET``, a replay in which the scheduler hung one of
``HUNG_REPLAYS``. At any bound the smallest case so far is the result, and
``Shrunk.stopped`` says which bound ended it.

Counts, not a clock, decide the case. The shrink is deterministic, the same
case from the same case on a busy machine as on a quiet one, because every
bound that ends it is a count: the rounds, the steps, the replays, the hung
replays, and the states of each search (``shorter``'s own ``max_states``). A
wall-clock cap is the user's alone: ``minimize`` has none unless it is given
one, and the front doors give the user's ``--shrink-timeout`` (``DEFAULT_TIMEOUT``
unless told). A shrink the cap cut short, in a pass or in a search, says so
(``stopped`` is "time cap", and ``note`` tells the report), since its case may
then depend on how busy the machine was.

A hung scheduler is the exception to "milliseconds": each of its replays waits
out a deadline, so once a replay hangs ``same_finding`` replays with a short
deadline, and the shrink gives up after a few hung replays.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import attrs

from peftlife.checker.drain import can_drain
from peftlife.search.trace import KINDS, REQUEST_KINDS, Action, Outcome, checked_replay
from peftlife.world import config as knobs
from peftlife.world.config import EngineConfig
from peftlife.world.engine import DEFAULT_SCHEDULE_DEADLINE
from peftlife.world.protocol import CHUNKING_POLICIES, SchedulerFactory
from peftlife.world.words import count

# Verdicts one shrink may ask for, cached ones included: a cached verdict costs no
# replay, but a pass that kept asking for them would otherwise never end.
STEP_BUDGET = 20_000
# Replays one shrink may spend; enough for the cases the scenarios generate (the
# most measured: 4,068, for a 60-action case that ends 4 actions long).
REPLAY_BUDGET = 6000
# The front doors' cap on one shrink, in seconds, before it reports the smallest
# case so far: a guard for the user waiting, which the counts are meant to beat
# (``minimize`` has none unless given one). It is Hypothesis's own limit on a
# shrink, five minutes, so that the counts, not the machine's load, end every
# shrink the catalogue and the scenarios produce: the hardest measured,
# tests/search/test_shrink.py's last case with the searches' real bounds (688
# replays, 22,725 states), takes 21 s on a quiet core and 142 s on a core shared
# with three busy loops; at 30 s (the cap until then) a busy CI runner cut such
# shrinks short, and so changed the case a baseline matches on.
DEFAULT_TIMEOUT = 300.0
# Once a hang is confirmed: the deadline of each shrink replay, and how many may hang.
HUNG_DEADLINE = 0.5
HUNG_REPLAYS = 8
# The passes that try every pair of positions, and replay more than once for some
# (moving an action, raising a value, merging, trading a tail), run only on traces
# this short; on a longer one they would spend the budget before delta debugging
# has done its work.
PAIRWISE_LIMIT = 24
# Deleting a pair replays once per pair: n(n-1)/2 at most, 1,128 at this length. A
# long case whose actions hold each other in pairs (two refused resumes, where either
# gone alone changes which later resume is refused) has no other way down to where
# the costlier passes start.
PAIR_DELETION_LIMIT = 48
# Rounds of every pass; a shrink ends sooner when a round changes nothing.
MAX_ROUNDS = 8


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
# "interrupted": Ctrl-C, taken as one more bound.
Stop = Literal["time cap", "step budget", "replay budget", "hung replays", "interrupted"]


@attrs.frozen
class Trace:
    """What a shrink makes smaller: a world and the actions applied to it."""

    config: EngineConfig
    actions: tuple[Action, ...]

    @property
    def requests(self) -> list[tuple[int | None, int, int]]:
        """Each submit as ``can_drain`` reads it: (adapter, prompt, outputs)."""
        return [
            (a.lora_task_id, a.prompt_len, a.max_new_tokens)
            for a in self.actions
            if a.kind == "submit"
        ]


@attrs.frozen
class Verdict:
    """What one replay of a candidate says: whether it still fails, and whether the
    scheduler hung in it (each hung replay counts against ``HUNG_REPLAYS``)."""

    fails: bool
    hung: bool = False

    def __bool__(self) -> bool:
        return self.fails


# Whether a candidate still fails: a plain bool, or a ``Verdict`` that also says it hung.
StillFails = Callable[[Trace], "bool | Verdict"]
# A search of a case's world for a shorter case that still fails, given the
# ``time.monotonic()`` of the user's cap, at which it must give up (None: its own
# bound of states alone); None when it finds none. What it returns is replayed like
# any candidate before it is kept.
Shorter = Callable[[Trace, "float | None"], "Trace | None"]


def same_finding(
    factory: SchedulerFactory,
    invariant: str,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
    *,
    hung: bool = False,
) -> Callable[[Trace], Verdict]:
    """ "The same finding": a checked replay (drain included) whose first violation
    is on ``invariant``.

    ``hung`` says the search saw the scheduler miss its deadline: every replay then
    waits only the short ``HUNG_DEADLINE``, as do all replays after one that hangs.
    """
    short = min(HUNG_DEADLINE, schedule_deadline or HUNG_DEADLINE)
    deadline = [short if hung else schedule_deadline]

    def still_fails(trace: Trace) -> Verdict:
        outcome = _outcome(trace.config, trace.actions, factory, deadline[0])
        if outcome is None:
            return Verdict(False)
        if outcome.hung:  # every hung replay waits out its deadline: a short one from now on
            deadline[0] = short
        first = outcome.violations[0].invariant if outcome.violations else None
        return Verdict(first == invariant, outcome.hung)

    return still_fails


@attrs.frozen
class ShrinkProgress:
    """Where a running shrink is, for a progress line."""

    replays: int
    best_actions: int

    def describe(self) -> str:
        return (
            f"shrinking: {count(self.replays, 'replay')}, best {count(self.best_actions, 'action')}"
        )


@attrs.define
class PassStats:
    """What one pass did over a whole shrink."""

    name: str
    # Verdicts it asked for (cached ones included), and the replays among them.
    attempts: int = 0
    replays: int = 0
    # Candidates it kept, the actions they removed, and the sum of the numbers in
    # the case's encoding they removed (how much simpler the values got; a pass that
    # raises a value to delete an action may remove fewer numbers than it adds).
    successes: int = 0
    actions_removed: int = 0
    values_removed: int = 0
    # Wall seconds in the pass: a measurement only, no decision reads it.
    seconds: float = attrs.field(default=0.0, eq=False)


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
    # Each pass's statistics, in the order the last round ran them.
    passes: tuple[PassStats, ...] = ()
    rounds: int = 0

    @property
    def note(self) -> str | None:
        """What a report says when the shrink stopped at a bound, else None."""
        if self.stopped is None:
            return None
        if self.stopped == "interrupted":
            return (
                f"the shrink was interrupted after {count(self.replays, 'replay')}: "
                "a smaller case may exist"
            )
        bound = {
            "time cap": f"its {self.timeout:g} s time cap",
            "step budget": f"its budget of {STEP_BUDGET} steps",
            "replay budget": f"its budget of {REPLAY_BUDGET} replays",
            "hung replays": f"{HUNG_REPLAYS} replays that hung",
        }[self.stopped]
        replays = count(self.replays, "replay")
        return f"the shrink stopped at {bound} after {replays}: a smaller case may exist"

    def describe(self) -> str:
        """One modest line: ``shrink: 8 passes, 120 replays``."""
        passes = "1 pass" if len(self.passes) == 1 else f"{len(self.passes)} passes"
        return f"shrink: {passes}, {count(self.replays, 'replay')}"


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


def _admit_all(config: EngineConfig, actions: Sequence[Action]) -> bool:
    return True


@attrs.define
class _Shrinker:
    still_fails: StillFails
    config: EngineConfig
    actions: tuple[Action, ...]
    # Whether a case is one the finding's scenario could have generated.
    admits: Callable[[EngineConfig, Sequence[Action]], bool] = _admit_all
    # The search for a shorter case, run once when every pass is stuck (None: no search).
    shorter: Shorter | None = None
    # ``time.monotonic()`` of the user's cap, past which no verdict is asked for and
    # no search goes on; None for no cap.
    deadline: float | None = None
    progress: Callable[[ShrinkProgress], None] | None = None
    replays: int = 0
    steps: int = 0
    hung_replays: int = 0
    # Verdicts already known: passes often propose the same candidate twice.
    known: dict[Trace, bool] = attrs.Factory(dict)
    # Each pass's statistics by name, and the pass now running.
    stats: dict[str, PassStats] = attrs.Factory(dict)
    current: PassStats = attrs.Factory(lambda: PassStats("none"))

    @property
    def trace(self) -> Trace:
        return Trace(self.config, self.actions)

    def fails(self, config: EngineConfig, actions: tuple[Action, ...]) -> bool:
        """Whether the case still fails; every call is a step, every replay one more."""
        self.steps += 1
        self.current.attempts += 1
        if self.steps > STEP_BUDGET:
            raise _Stopped("step budget")
        self._within_cap()
        trace = Trace(config, actions)
        if trace in self.known:
            return self.known[trace]
        if self.replays >= REPLAY_BUDGET:
            raise _Stopped("replay budget")
        if self.hung_replays >= HUNG_REPLAYS:
            raise _Stopped("hung replays")
        # Only worlds that can drain are fair: outside them the drain's verdict is void.
        verdict = False
        if can_drain(config, trace.requests):
            self.replays += 1
            self.current.replays += 1
            answer = self.still_fails(trace)
            self.hung_replays += isinstance(answer, Verdict) and answer.hung
            verdict = bool(answer)
            if self.progress is not None:
                self.progress(ShrinkProgress(self.replays, len(self.actions)))
        self.known[trace] = verdict
        return verdict

    def _within_cap(self) -> None:
        """Stop at the user's time cap, if one was given and it has passed."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _Stopped("time cap")

    def adopt(self, config: EngineConfig, actions: tuple[Action, ...]) -> bool:
        """Keep the candidate if it is smaller than the case so far, one its scenario
        could generate, and still fails.

        The one way a case changes: any other candidate is dropped before it is
        replayed, so the kept cases descend the order.
        """
        before = size(self.config, self.actions)
        after = size(config, actions)
        if after >= before or not self.admits(config, actions):
            return False
        if not self.fails(config, actions):
            return False
        self.current.successes += 1
        self.current.actions_removed += len(self.actions) - len(actions)
        self.current.values_removed += sum(before[1:]) - sum(after[1:])
        self.config, self.actions = config, actions
        return True

    def try_actions(self, actions: tuple[Action, ...]) -> bool:
        return self.adopt(self.config, actions)

    def try_config(self, config: EngineConfig) -> bool:
        return self.adopt(config, self.actions)

    def run(self, run_pass: Callable[[_Shrinker], None]) -> PassStats:
        """Run one pass, its verdicts, replays and successes counted to it."""
        name = run_pass.__name__
        self.current = self.stats.setdefault(name, PassStats(name))
        start = time.monotonic()
        try:
            run_pass(self)
        finally:
            self.current.seconds += time.monotonic() - start
        return self.current

    @staticmethod
    def _walk(places: Callable[[], Sequence[Any]], attempt: Callable[[Any], bool]) -> None:
        """Try each place of the case in order; after a success, go on from the same
        place of the smaller case rather than from the start.

        ``places()`` lists the current case's places, sorted. It ends: each turn
        either moves past a place or keeps a smaller case (a step down the
        well-founded order, and a step of the budget).
        """
        here = places()
        index = 0
        while index < len(here):
            place = here[index]
            if attempt(place):
                here = places()
                index = bisect.bisect_left(here, place)
            else:
                index += 1

    # ---- the passes ----

    def delete_actions(self) -> None:
        """Delta debugging: remove ever smaller chunks while the failure stays."""
        chunk = max(1, len(self.actions) // 2)
        while chunk >= 1:  # halves each time round
            start = 0
            while start < len(self.actions):  # start rises, or the case gets shorter
                if not self.try_actions(_without(self.actions, start, start + chunk)):
                    start += chunk
            chunk //= 2

    def delete_pairs(self) -> None:
        """Remove two actions that are not neighbours at once (a submit and its step, say)."""
        if len(self.actions) > PAIR_DELETION_LIMIT:
            return
        self._walk(
            lambda: [
                (i, j) for i in range(len(self.actions)) for j in range(i + 2, len(self.actions))
            ],
            lambda place: self.try_actions(_dropping(self.actions, set(place))),
        )

    def move_earlier(self) -> None:
        """Move one action earlier when that lets another go (a submit before the steps)."""
        if len(self.actions) > PAIRWISE_LIMIT:
            return
        # A place is (action, how far back it moves).
        self._walk(
            lambda: [(i, back) for i in range(1, len(self.actions)) for back in range(1, i + 1)],
            lambda place: self._try_shorter(_moved(self.actions, place[0], place[0] - place[1])),
        )

    def raise_values(self) -> None:
        """A larger request (weights sent, a longer prompt or output) that lets actions go."""
        if len(self.actions) > PAIRWISE_LIMIT:
            return
        self._walk(
            lambda: _submit_indices(self.actions),
            lambda index: any(
                self._try_shorter(_with_action(self.actions, index, larger))
                for larger in _larger_submits(self.actions[index])
            ),
        )

    def unify_requests(self) -> None:
        """Give a request the parameters of a simpler one: fewer distinct requests to read.

        Only a copy from a simpler request is smaller in the order; the other
        direction is dropped unreplayed (copying both ways once let X, X, Y and
        Y, X, Y take turns for ever).
        """
        self._walk(
            lambda: list(itertools.permutations(_submit_indices(self.actions), 2)),
            lambda place: self.try_actions(
                _with_action(
                    self.actions,
                    place[1],
                    _same_request(self.actions[place[1]], self.actions[place[0]]),
                )
            ),
        )

    def simplify_actions(self) -> None:
        """Each action's counts smaller and its switches off, one field at a time."""
        self._walk(
            lambda: list(range(len(self.actions))),
            lambda index: any(
                self.try_actions(_with_action(self.actions, index, simpler))
                for simpler in _simpler_records(
                    self.actions[index], _ACTION_COUNTS, _ACTION_SWITCHES
                )
            ),
        )

    def simplify_config(self) -> None:
        """The world's counts smaller, its switches off, and what its actions do not use gone."""
        self._walk(
            lambda: list(range(len(_CONFIG_MOVES))),
            lambda move: any(
                self.try_config(simpler)
                for simpler in _CONFIG_MOVES[move](self.config, self.actions)
            ),
        )

    def shrink_pressure(self) -> None:
        """A shorter prompt and a pool smaller by the pages it no longer needs, together.

        A failure that needs KV pressure holds neither move alone: a smaller pool
        alone adds pressure and changes the path, a shorter prompt alone relieves
        it. Taken together the pressure stays, and the world gets smaller.
        """
        self._walk(
            lambda: _submit_indices(self.actions),
            lambda index: any(
                self.adopt(*candidate)
                for candidate in _tighter_worlds(self.config, self.actions, index)
            ),
        )

    def renumber_adapters(self) -> None:
        """The adapters numbered 1, 2, ... in the order the requests first name them,
        in the world and the actions together: "adapter 3" alone reads as if two
        others had been left out."""
        renumbered = _renumbered_adapters(self.config, self.actions)
        if renumbered is not None:
            self.adopt(*renumbered)

    def merge_neighbours(self) -> None:
        """Two neighbouring actions replaced by a copy of one of the case's actions (two
        small requests by one like a larger one, say): one action less."""
        if len(self.actions) > PAIRWISE_LIMIT:
            return
        self._walk(
            lambda: list(range(len(self.actions) - 1)),
            lambda index: any(
                self.try_actions(_inserted(_without(self.actions, index, index + 2), index, copy))
                for copy in _copyable(self.actions)
            ),
        )

    def trade_tail(self) -> None:
        """The tail from an event on (a fault, a cancel, a held batch) replaced by a copy
        of a request or by nothing, with at most one request changed.

        What a fault did, KV pressure above all, one more request often does in
        the drain: ``submit, step, step, fail_grow, step`` may become two submits.
        Neither half holds alone (the tail gone, the pressure goes; a request
        changed, the path changes), so each candidate makes both moves at once;
        every one is shorter than the case, or equal in length and dropped
        unreplayed unless smaller.
        """
        if len(self.actions) > PAIRWISE_LIMIT:
            return
        self._walk(
            lambda: _tail_starts(self.actions),
            lambda start: any(self.try_actions(c) for c in _traded(self.actions, start)),
        )

    def search_world(self) -> None:
        """A shorter case searched for in the case's world (``shorter``), kept if it fails
        the same way: what the passes cannot reach by one local move at a time."""
        if self.shorter is not None:
            found = self.shorter(self.trace, self.deadline)
            if found is None:
                # A search the cap cut short proved nothing: the shrink stopped at the
                # cap, not because no shorter case exists.
                self._within_cap()
            else:
                self.adopt(found.config, found.actions)

    def _try_shorter(self, actions: tuple[Action, ...]) -> bool:
        """Keep ``actions`` (same length) only if deleting one action, or two neighbours,
        then still fails: a change that pays for itself.

        ``actions`` itself is only a probe, replayed to learn whether its shorter
        variants are worth replaying; it is never kept, and what is kept is shorter.
        """
        if actions == self.actions or not self.admits(self.config, actions):
            return False
        if not self.fails(self.config, actions):
            return False
        return any(
            self.try_actions(_dropping(actions, {i, j}))
            for i in range(len(actions))
            for j in (i, i + 1)
        )


# The passes, in the order of the first round: cheap deletions first, then the
# moves that need a deletion to pay off, then the simplifications of what is
# left. Later rounds run first the passes that removed actions in the round before.
PASSES: tuple[Callable[[_Shrinker], None], ...] = (
    _Shrinker.delete_actions,
    _Shrinker.delete_pairs,
    _Shrinker.move_earlier,
    _Shrinker.raise_values,
    _Shrinker.unify_requests,
    _Shrinker.simplify_actions,
    _Shrinker.simplify_config,
    _Shrinker.shrink_pressure,
    _Shrinker.renumber_adapters,
)
# Passes that propose many candidates for a rare success: run only when a round of
# ``PASSES`` changed nothing, to move the shrink on from where they are stuck.
LAST_RESORT: tuple[Callable[[_Shrinker], None], ...] = (
    _Shrinker.merge_neighbours,
    _Shrinker.trade_tail,
)
# The move after the last resort: its one search costs as much as many passes. One
# that finds nothing ends the shrink, so it runs again only after it found a shorter
# case, from which the passes may have gone on, and a search from there may reach
# deeper.
SEARCH = _Shrinker.search_world


def _usefulness(before: PassStats, after: PassStats) -> int:
    """How a pass did in one round, for the next round's order (smaller goes first):
    0 it removed actions, 1 it simplified values, 2 it changed nothing."""
    if after.actions_removed > before.actions_removed:
        return 0
    return 1 if after.successes > before.successes else 2


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


def _copyable(actions: tuple[Action, ...]) -> list[Action]:
    """The case's distinct actions that name no request (a copy of a cancel would name
    another request once moved), in order of first appearance."""
    return list(dict.fromkeys(a for a in actions if a.kind not in REQUEST_KINDS))


def _inserted(actions: tuple[Action, ...], index: int, action: Action) -> tuple[Action, ...]:
    """``action`` put at ``index``; a submit shifts the ids of the requests after it, and
    the cancels naming them follow."""
    if action.kind != "submit":
        return (*actions[:index], action, *actions[index:])
    new_id = len(_submit_indices(actions[:index])) + 1
    shifted = tuple(
        attrs.evolve(a, request_id=a.request_id + 1)
        if a.kind in REQUEST_KINDS and a.request_id is not None and a.request_id >= new_id
        else a
        for a in actions
    )
    return (*shifted[:index], action, *shifted[index:])


def _tail_starts(actions: tuple[Action, ...]) -> list[int]:
    """Where a tail may start: after the first action, at or before the last event
    (an action other than a submit or a step)."""
    events = [i for i, a in enumerate(actions) if a.kind not in ("submit", "step")]
    return list(range(1, events[-1] + 1)) if events else []


def _traded(actions: tuple[Action, ...], start: int) -> Iterator[tuple[Action, ...]]:
    """``actions[:start]`` alone or with a copy of one of its requests after it, each as
    it is, then with one request changed (the copy first)."""
    head = actions[:start]
    requests = list(dict.fromkeys(a for a in head if a.kind == "submit"))
    bases = [head, *((*head, request) for request in requests)]
    yield from bases
    for base in bases:
        yield from _changed_heads(base, _submit_indices(base))


def _changed_heads(head: tuple[Action, ...], submitted: list[int]) -> Iterator[tuple[Action, ...]]:
    """``head`` with one request changed: a longer prompt or output, a short prompt with a
    longer output, or two requests in the other order."""
    for index in reversed(submitted):
        action = head[index]
        p, m = action.prompt_len, action.max_new_tokens
        sizes = dict.fromkeys(((p + 1, m), (p, m + 1), (1, m + 1), (max(1, p // 2), m + 1)))
        for prompt, outputs in sizes:  # distinct, in order
            yield _with_action(
                head, index, attrs.evolve(action, prompt_len=prompt, max_new_tokens=outputs)
            )
    for first, second in itertools.pairwise(submitted):
        yield _moved(head, second, first)


def _submit_indices(actions: tuple[Action, ...]) -> list[int]:
    return [i for i, a in enumerate(actions) if a.kind == "submit"]


def _with_action(actions: tuple[Action, ...], index: int, action: Action) -> tuple[Action, ...]:
    return (*actions[:index], action, *actions[index + 1 :])


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


# ---- the fields a pass simplifies, read from the records' declarations ----


def _typed(cls: type, *types: str) -> tuple[str, ...]:
    """The fields of an attrs class declared with one of ``types`` (as written)."""

    def written(declared: object) -> str:
        return (
            declared if isinstance(declared, str) else getattr(declared, "__name__", str(declared))
        )

    return tuple(f.name for f in attrs.fields(cls) if written(f.type) in types)


# An action's counts are its plain ints (prompt and output lengths); an optional int
# in an action names something (a request, an adapter), so it is not a count.
_ACTION_COUNTS = _typed(Action, "int")
_ACTION_SWITCHES = _typed(Action, "bool")
# The world's counts, an optional one (a pool that may be absent) included.
_CONFIG_COUNTS = _typed(EngineConfig, "int", "int | None")
_CONFIG_SWITCHES = _typed(EngineConfig, "bool")


def _valid(record: Any, **change: Any) -> Any | None:
    """``record`` with ``change``, or None where its declaration refuses it."""
    try:
        return attrs.evolve(record, **change)
    except ValueError:
        return None


def _floor(record: Any, name: str) -> int | None:
    """The smallest count the field's declaration accepts (0 or 1), None if neither."""
    return next((v for v in (0, 1) if _valid(record, **{name: v}) is not None), None)


def _simpler_records(
    record: Any, counts: tuple[str, ...], switches: tuple[str, ...]
) -> Iterator[Any]:
    """``record`` with one count smaller (towards its floor) or one switch off."""
    for name in counts:
        value = getattr(record, name)
        floor = _floor(record, name) if value is not None else None
        if floor is None:
            continue
        for smaller in _towards(value, floor):
            candidate = _valid(record, **{name: smaller})
            if candidate is not None:
                yield candidate
    for name in switches:
        if getattr(record, name):
            candidate = _valid(record, **{name: False})
            if candidate is not None:
                yield candidate


def _tighter_worlds(
    config: EngineConfig, actions: tuple[Action, ...], index: int
) -> Iterator[tuple[EngineConfig, tuple[Action, ...]]]:
    """The submit at ``index`` with its prompt cut down, with the device pool cut by
    the pages that frees, smallest world first.

    Two ways to count what is freed, since which keeps the pressure depends on how
    the prompt's chunks fall: the prompt's own pages, for shorter prompts spread
    over the range; and the whole request's (prompt and output, what a world must
    hold for the request to drain), for the shortest and the longest prompt of
    each smaller page count.
    """
    block = config.tokens_per_block

    def pages(tokens: int) -> int:
        return -(-tokens // block)

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
                _with_action(actions, index, attrs.evolve(action, prompt_len=shorter)),
            )


def _unused_adapters(config: EngineConfig, actions: tuple[Action, ...]) -> Iterator[EngineConfig]:
    used = {a.lora_task_id for a in actions if a.kind == "submit"}
    kept = tuple((t, p) for t, p in config.adapter_pages if t in used)
    if kept != config.adapter_pages and kept:
        yield attrs.evolve(config, adapter_pages=kept)


def _renumbered_adapters(
    config: EngineConfig, actions: tuple[Action, ...]
) -> tuple[EngineConfig, tuple[Action, ...]] | None:
    """The case with its adapters numbered 1, 2, ... by first use (the world's unused
    ones after), or None when they already are.

    >>> config = EngineConfig(adapter_pages=((3, 1), (1, 2)))
    >>> submit = Action("submit", lora_task_id=3, prompt_len=1, max_new_tokens=1)
    >>> world, acts = _renumbered_adapters(config, (submit,))
    >>> world.adapter_pages, acts[0].lora_task_id
    (((1, 1), (2, 2)), 1)
    """
    named = [a.lora_task_id for a in actions if a.kind == "submit" and a.lora_task_id]
    order = list(dict.fromkeys([*named, *(task for task, _ in config.adapter_pages)]))
    number = {task: new for new, task in enumerate(order, start=1)}
    if all(task == new for task, new in number.items()):
        return None
    pages = tuple((number[task], p) for task, p in config.adapter_pages)
    return attrs.evolve(config, adapter_pages=pages), tuple(
        attrs.evolve(a, lora_task_id=number[a.lora_task_id])
        if a.kind == "submit" and a.lora_task_id
        else a
        for a in actions
    )


def _no_draft_pool(config: EngineConfig, actions: tuple[Action, ...]) -> Iterator[EngineConfig]:
    if config.draft_device_pages is not None:
        yield attrs.evolve(config, draft_device_pages=None, draft_host_pages=0)


def _simpler_fields(config: EngineConfig, actions: tuple[Action, ...]) -> Iterator[EngineConfig]:
    return _simpler_records(config, (), _CONFIG_SWITCHES)


def _smaller_counts(config: EngineConfig, actions: tuple[Action, ...]) -> Iterator[EngineConfig]:
    return _simpler_records(config, _CONFIG_COUNTS, ())


def _smaller_adapters(config: EngineConfig, actions: tuple[Action, ...]) -> Iterator[EngineConfig]:
    for index, (task, pages) in enumerate(config.adapter_pages):
        for value in _towards(pages, 1):
            smaller = list(config.adapter_pages)
            smaller[index] = (task, value)
            yield attrs.evolve(config, adapter_pages=tuple(smaller))


# The moves ``simplify_config`` walks, in order: what the actions leave unused goes first.
_CONFIG_MOVES: tuple[Callable[[EngineConfig, tuple[Action, ...]], Iterator[EngineConfig]], ...] = (
    _unused_adapters,
    _no_draft_pool,
    _simpler_fields,
    _smaller_counts,
    _smaller_adapters,
)


def minimize(
    trace: Trace,
    still_fails: StillFails,
    *,
    admits: Callable[[EngineConfig, Sequence[Action]], bool] | None = None,
    shorter: Shorter | None = None,
    timeout: float | None = None,
    progress: Callable[[ShrinkProgress], None] | None = None,
) -> Shrunk:
    """The smallest trace found on which ``still_fails`` holds.

    Returns ``trace`` unchanged if it does not fail to begin with. ``admits``
    says whether a world and its actions are a case the finding's scenario
    could generate (``scenarios.admitting``); any other candidate is never
    replayed. A trace it does not admit itself (a scenario changed since) is
    shrunk without it. ``shorter`` searches a stuck case's world for a shorter
    one (again only after it found one). ``timeout`` is the user's cap on the whole
    shrink in seconds (None or 0, the default: none, and counts alone end it, so
    the result does not depend on the machine's load); Ctrl-C ends it as a bound
    does (``stopped`` is "interrupted"); ``progress`` is told after every replay.

    >>> fails = lambda trace: len(trace.actions) > 1
    >>> shrunk = minimize(Trace(EngineConfig(), (Action("step"),) * 5), fails)
    >>> len(shrunk.actions), shrunk.stopped
    (2, None)
    """
    start = time.monotonic()
    if not still_fails(trace):
        return Shrunk(
            trace.config, trace.actions, replays=1, steps=1, seconds=time.monotonic() - start
        )
    if admits is None or not admits(trace.config, trace.actions):
        admits = _admit_all
    shrinker = _Shrinker(
        still_fails,
        trace.config,
        trace.actions,
        admits,
        shorter,
        deadline=start + timeout if timeout else None,
        progress=progress,
    )
    passes = list(PASSES)
    stopped: Stop | None = None
    rounds = 0
    try:
        while rounds < MAX_ROUNDS:  # every pass, until a round changes nothing
            rounds += 1
            before = shrinker.trace
            useful: dict[str, int] = {}
            for run_pass in passes:
                name = run_pass.__name__
                was = attrs.evolve(shrinker.stats.get(name, PassStats(name)))
                useful[name] = _usefulness(was, shrinker.run(run_pass))
            if shrinker.trace == before:  # stuck: the costly passes, then the search
                for run_pass in LAST_RESORT:
                    shrinker.run(run_pass)
                if shrinker.trace == before and shorter is not None:
                    shrinker.run(SEARCH)
                if shrinker.trace == before:  # a search that found nothing ends the shrink
                    break
            passes.sort(key=lambda p: useful[p.__name__])  # stable: ties keep their order
    except _Stopped as bound:
        stopped = bound.why
    except KeyboardInterrupt:  # Ctrl-C: the smallest case so far is the result
        stopped = "interrupted"
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
        passes=tuple(
            shrinker.stats[p.__name__]
            for p in (*passes, *LAST_RESORT, SEARCH)
            if p.__name__ in shrinker.stats
        ),
        rounds=rounds,
    )
