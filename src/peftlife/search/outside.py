"""Searches and replays under the outside watchdog (``peftlife.world.supervisor``).

A search or a replay runs in a supervised child; what the child journals as
it goes is what turns its death into a finding. The machine journals each
example as it runs (``begin`` its world, ``action`` each action, ``iteration``
each checked iteration); a replay journals the world it opened with and each
entry. When scheduler code hangs in native code, ends the process or crashes
it, the parent makes of the journal a ``scheduler_protocol`` finding: for a
search, the example up to and including the action that died (not shrunk: a
shrink would take the process down again at every candidate); for a replay,
its entries up to the last completed iteration and one for the iteration that
died. A report of such a finding replays the same way, so ``peftlife replay``
and a kept regression test meet it again as a finding, not as a dead process.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import attrs

from peftlife.checker import invariants
from peftlife.search.failure import LifecycleFailure, Run
from peftlife.search.scenarios import Scenario
from peftlife.search.trace import Action, Entry, Outcome, checked_replay
from peftlife.world import supervisor
from peftlife.world.config import EngineConfig
from peftlife.world.engine import DEFAULT_SCHEDULE_DEADLINE, Engine
from peftlife.world.protocol import SchedulerFactory
from peftlife.world.snapshot import Snapshot, StepError, StepRecord

# The step error each way of dying is recorded as.
T = TypeVar("T")
_KINDS = {"hung": "scheduler_hung", "exited": "scheduler_exited", "crashed": "scheduler_crashed"}

# ---- the journal a search keeps in its child ----

# The mark of a run that does not count its iterations as it goes.
_UNKNOWN = -1


def begin(sut: str, scenario: Scenario, config: EngineConfig) -> None:
    """A new example starts in this world of ``scenario``."""
    if (stamp := supervisor.STAMP) is not None:
        stamp.begin()
        stamp.mark(0)
        # Its spec, not the whole value: pickled every example (the parent has the value).
        stamp.note((sut, scenario.spec, config))


def trying(sut: str, scenario: Scenario, config: EngineConfig, actions: Iterable[Action]) -> None:
    """A run is about to do ``actions`` from a fresh world (the last of them, or its drain,
    is what may die)."""
    if (stamp := supervisor.STAMP) is not None:
        begin(sut, scenario, config)
        for done in actions:
            action(done)
        stamp.mark(_UNKNOWN)


def action(done: Action) -> None:
    """The example applies this action next."""
    if (stamp := supervisor.STAMP) is not None:
        stamp.note(done)


def iteration(number: int) -> None:
    """The example's iteration ``number`` completed (and was checked)."""
    if (stamp := supervisor.STAMP) is not None:
        stamp.mark(number)


# ---- a search ----


# Runs a search saw hang, by (sut, world, actions): where (iteration, code) they hang.
# The report's replay of one is ended there at once instead of after the deadline again.
_HANGS: dict[tuple[str, EngineConfig, tuple[Action, ...]], tuple[int, str]] = {}


def died(death: supervisor.Death, searched: Sequence[Scenario]) -> tuple[LifecycleFailure, int]:
    """The finding a search's dead child leaves: its example up to the action that
    died, in the one of the scenarios ``searched`` it was drawn from; and how many
    examples had started."""
    (sut, spec, config), *actions = death.notes
    scenario = next(s for s in searched if s.spec == spec)
    if death.mark == _UNKNOWN:  # one iteration per step, as far as the steps go
        number = sum(a.kind == "step" for a in actions)
    else:
        number = death.mark + 1
        if death.kind == "hung":
            _HANGS[sut, config, tuple(actions)] = (death.mark, death.what)
    violation = invariants.protocol_violation(death.message, number)
    run = Run(sut, scenario, config, tuple(actions))
    failure = LifecycleFailure([violation], run, hung=death.kind == "hung", died=True)
    return failure, max(death.examples, 1)


def supervised_search(
    work: Callable[[Callable[[int, int], None] | None], T],
    progress: Callable[[int, int], None] | None,
    dead: Callable[[LifecycleFailure, int, float], T],
    searched: Sequence[Scenario],
) -> T:
    """``work(progress)`` run supervised, searching the scenarios ``searched``; a death
    becomes ``dead(failure, examples, seconds)``."""
    start = time.perf_counter()
    try:
        return supervisor.supervised(work, progress)
    except supervisor.SchedulerDied as err:
        failure, examples = died(err.death, searched)
        return dead(failure, examples, time.perf_counter() - start)


# ---- a replay ----


def replay(
    config: EngineConfig,
    actions: Iterable[Action],
    factory: SchedulerFactory,
    *,
    sut: str = "",
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
) -> Outcome:
    """``checked_replay``, supervised: a death is the replay's last entry and its finding.

    ``sut`` names the SUT, to know a run this process already saw hang.
    """
    actions = tuple(actions)
    try:
        return supervisor.supervised(
            lambda _: _journaled_replay(config, actions, factory, schedule_deadline),
            hangs_at=_HANGS.get((sut, config, actions)),
        )
    except supervisor.SchedulerDied as err:
        return _died_replay(err.death, actions)


def _journaled_replay(
    config: EngineConfig,
    actions: tuple[Action, ...],
    factory: SchedulerFactory,
    schedule_deadline: float | None,
) -> Outcome:
    """The replay as the child runs it, each entry journaled as it completes."""
    stamp = supervisor.STAMP
    if stamp is None:
        return checked_replay(config, actions, factory, schedule_deadline=schedule_deadline)
    # The world before the first iteration: what a death before any entry is shown on.
    # An engine never stepped: only its first snapshot is read, so it needs no scheduler.
    stamp.note(Engine(config, _no_scheduler, schedule_deadline=None).snapshot())  # type: ignore[arg-type]
    return checked_replay(
        config, actions, factory, schedule_deadline=schedule_deadline, journal=_entry_noted
    )


def _entry_noted(entry: Entry) -> None:
    if (stamp := supervisor.STAMP) is not None:
        stamp.note(entry)
        stamp.mark(entry.snapshot.iteration)


def _no_scheduler(env: object) -> object:
    return None


def _died_replay(death: supervisor.Death, actions: tuple[Action, ...]) -> Outcome:
    opening, *entries = death.notes
    last: Snapshot = entries[-1].snapshot if entries else opening
    # The action that died is the next step (only a step runs the scheduler); none left: the drain.
    after = -1 if not entries or entries[-1].action_index is None else entries[-1].action_index
    drained = bool(entries) and entries[-1].action_index is None
    index = next(
        (i for i, a in enumerate(actions) if i > after and a.kind == "step" and not drained), None
    )
    number = last.iteration + 1
    error = StepError(_KINDS[death.kind], death.message, exception=death.kind)
    step = StepRecord(number, None, False, (), (), (error,))
    dying = attrs.evolve(last, iteration=number, ended=(), step=step)
    violation = invariants.protocol_violation(death.message, number)
    return Outcome(
        (*entries, Entry(index, dying)), (violation,), "drain" if index is None else "step"
    )
