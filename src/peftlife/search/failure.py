"""A finding: what a search met, the run that led to it, and its shrink.

``Finding`` is what a machine raises and a search returns. Its one kind here,
``LifecycleFailure``, is a broken invariant; ``minimized`` replaces one with the
smallest world and trace the shrinker (``peftlife.search.shrink``) finds that
still fails on the same invariant. ``peftlife diff``'s divergence of two
schedulers is the other kind (``peftlife.search.diff.Diverged``).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from peftlife import sut
from peftlife.checker.invariants import Violation
from peftlife.search import scenarios, shrink
from peftlife.search.trace import Action, checked_replay
from peftlife.world import supervisor
from peftlife.world.config import EngineConfig
from peftlife.world.engine import DEFAULT_SCHEDULE_DEADLINE


@attrs.frozen
class Run:
    """What one example did: the SUT, the scenario, the world and the actions."""

    sut: str
    scenario: str
    config: EngineConfig
    actions: tuple[Action, ...]


class Finding(AssertionError):
    """What ends an example: the run that led to it, and what the search learned of it."""

    def __init__(self, message: str, run: Run) -> None:
        self.run = run
        # Set once the trace shrinker has made this finding as small as it can,
        # with what the shrink cost and whether it stopped at a bound.
        self.shrunk = False
        self.shrink: shrink.Shrunk | None = None
        # Whether the scheduler missed its deadline: its replays then each wait it out.
        self.hung = False
        # The seed of the search that found it (None: derandomized, or not told).
        self.seed: int | None = None
        # Whether the scheduler took its process down (``peftlife.search.outside``):
        # such a finding is not shrunk, since every candidate would do it again.
        self.died = False
        super().__init__(message)

    @property
    def verdict(self) -> str:
        """The example's verdict in a word or two, for the observability records."""
        raise NotImplementedError

    def __reduce__(self) -> tuple[object, ...]:
        # A supervised child sends its finding to the parent pickled; the default
        # would call ``__init__`` with the message alone.
        return _restored, (type(self), self.args, self.__dict__)


class LifecycleFailure(Finding):
    """A broken invariant: the violations seen, and the run that led to them."""

    def __init__(self, violations: list[Violation], run: Run) -> None:
        self.violations = violations
        first = violations[0]
        more = f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""
        super().__init__(f"[{first.invariant}] {first}{more}", run)

    @property
    def invariant(self) -> str:
        return self.violations[0].invariant

    @property
    def verdict(self) -> str:
        return self.invariant


def _restored(cls: type[Finding], args: tuple[object, ...], state: dict[str, object]) -> object:
    failure = cls.__new__(cls)
    failure.args = args
    failure.__dict__.update(state)
    return failure


def minimized(
    failure: LifecycleFailure,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
    *,
    timeout: float | None = shrink.DEFAULT_TIMEOUT,
    progress: Callable[[shrink.ShrinkProgress], None] | None = None,
) -> LifecycleFailure:
    """The same finding on the smallest world and action list the shrinker finds.

    ``timeout`` caps the shrink (None or 0: no cap); ``progress`` is told as it goes.
    """
    if failure.shrunk or failure.died:
        return failure
    # Supervised (``peftlife.world.supervisor``): a candidate may hang in native code,
    # end the process or eat its memory. Progress crosses as (replays, best actions).
    told = None if progress is None else _told(progress)
    try:
        return supervisor.supervised(
            lambda tell: _minimized(failure, schedule_deadline, timeout, tell), told
        )
    except supervisor.SchedulerDied:
        return failure  # as the search met it: no smaller case could be run to the end


def _told(progress: Callable[[shrink.ShrinkProgress], None]) -> Callable[[int, int], None]:
    return lambda replays, best: progress(shrink.ShrinkProgress(replays, best))


def _minimized(
    failure: LifecycleFailure,
    schedule_deadline: float | None,
    timeout: float | None,
    tell: Callable[[int, int], None] | None,
) -> LifecycleFailure:
    progress = None if tell is None else (lambda p: tell(p.replays, p.best_actions))
    run = failure.run
    factory = sut.load(run.sut)
    shrunk = shrink.minimize(
        shrink.Trace(run.config, run.actions),
        shrink.same_finding(factory, failure.invariant, schedule_deadline, hung=failure.hung),
        admits=scenarios.admitting(run.scenario),
        timeout=timeout,
        progress=progress,
    )
    outcome = checked_replay(
        shrunk.config, shrunk.actions, factory, schedule_deadline=schedule_deadline
    )
    if not outcome.violations:  # cannot happen for a deterministic SUT; keep the original
        return failure
    smaller = Run(run.sut, run.scenario, shrunk.config, shrunk.actions)
    result = LifecycleFailure(list(outcome.violations), smaller)
    result.shrunk = True
    result.shrink = shrunk
    result.seed = failure.seed
    return result
