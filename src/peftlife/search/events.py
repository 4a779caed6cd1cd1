"""What a running search tells its outputs: typed events, handed to every handler.

A command runs a search and emits what happens as it happens (``PhaseStarted``,
``ExamplesRan``, ``ShrinkStep``, ``Found``, ``Warned``...); every output that
listens is a handler, a callable of one event: the progress bar or heartbeat,
the fuzz campaign's table, the pytest plugin's shrink line. ``Events`` hands one
event to each of them. A worker process tells its parent the same records down
a pipe or a queue, each naming its ``source`` (a worker's number, a mutant's
name), so the parent emits them on as they came.

``Throttle`` is the one rate limit: news that may come thousands of times a
second (a shrink's replays) is told a few times a second at most.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

from peftlife.search.shrink import ShrinkProgress

# Who an event is about: a worker's number, a mutant's name; None for the run itself.
Source = int | str | None


@attrs.frozen
class PhaseStarted:
    """The run moves on to another phase ("shrinking"): a display says so at once, before
    the phase's first news (a slow scheduler's first replay may take a while)."""

    phase: str
    source: Source = None

    def describe(self) -> str:
        """The phase, after whose run it is if a mutant's.

        >>> [PhaseStarted("shrinking", who).describe() for who in ("no_release", 0)]
        ['no_release shrinking', 'shrinking']
        """
        return _after(self.source, self.phase)


@attrs.frozen
class ExamplesRan:
    """So many examples (states, runs: the phase's unit) done so far, and executor iterations."""

    done: int
    iterations: int = 0
    source: Source = None


@attrs.frozen
class SliceStarted:
    """A fuzz worker starts its ``index``-th slice: one scenario under one seed."""

    index: int
    scenario: str
    seed: int
    source: Source = None


@attrs.frozen
class ShrinkStep:
    """Where a running shrink is: replays so far, and the shortest failing case's length."""

    replays: int
    best_actions: int
    source: Source = None

    def describe(self) -> str:
        """``shrinking: 7 replays, best 3 actions``, after whose shrink it is if anyone's.

        >>> ShrinkStep(7, 3, "no_release").describe()
        'no_release shrinking: 7 replays, best 3 actions'
        """
        return _after(self.source, ShrinkProgress(self.replays, self.best_actions).describe())


def _after(source: Source, said: str) -> str:
    # A worker's number is shown in a column (or a "worker N" line) of its own.
    return said if source is None or isinstance(source, int) else f"{source} {said}"


@attrs.frozen
class NewsOver:
    """What was last said of a shrink no longer holds: show the count again."""

    source: Source = None


@attrs.frozen
class Found:
    """A counterexample, shrunk or not yet; ``detail`` is what the emitter knows of it
    (a fuzz worker's case and replay), for the handler that writes it."""

    invariant: str
    shrunk: bool
    detail: object = None
    source: Source = None


@attrs.frozen
class Warned:
    """Something the user should know that does not fail the run."""

    text: str
    source: Source = None


@attrs.frozen
class HarnessError:
    """peftlife's own code raised (not the scheduler's): the run goes on, and fails."""

    scenario: str
    seed: int
    text: str
    source: Source = None


@attrs.frozen
class RunDone:
    """A search (or a worker) is done: examples in all, database saves left unwritten."""

    examples: int
    pending: int = 0
    source: Source = None


@attrs.frozen
class RunConcluded:
    """The command is over: ``record`` is what it concluded (its verdict, its findings),
    which every output that writes a file of the run writes from."""

    record: object


Event = (
    PhaseStarted | ExamplesRan | SliceStarted | ShrinkStep | NewsOver | Found | Warned
    | HarnessError | RunDone | RunConcluded
)  # fmt: skip
Handler = Callable[[Event], None]


def ignore(event: Event) -> None:
    """The handler of a run nobody watches."""


class Events:
    """Hands each event to every handler, in the order they were added."""

    def __init__(self, *handlers: Handler) -> None:
        self.handlers = list(handlers)

    def __call__(self, event: Event) -> None:
        for handler in self.handlers:
            handler(event)


class Throttle:
    """True at most once every ``every`` seconds: the first time, then once the time is up.

    >>> clock = iter([0.0, 0.1, 0.3]).__next__
    >>> gate = Throttle(0.25, clock)
    >>> [gate.due() for _ in range(3)]
    [True, False, True]
    """

    def __init__(self, every: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self._clock = clock
        self._last: float | None = None

    def due(self) -> bool:
        now = self._clock()
        if self._last is not None and now - self._last < self.every:
            return False
        self._last = now
        return True

    def restart(self) -> None:
        """Count the time from now, as if it had just been due."""
        self._last = self._clock()

    def since(self) -> float:
        """Seconds since it was last due (0 before it ever was)."""
        return 0.0 if self._last is None else self._clock() - self._last


# ---- what the search functions call, as events ----


def counting(emit: Handler, source: Source = None) -> Callable[[int, int], None]:
    """The ``progress(examples, iterations)`` a search calls, as ``ExamplesRan`` events."""
    return lambda done, iterations: emit(ExamplesRan(done, iterations, source))


def shrinking(
    emit: Handler, source: Source = None, every: float = 0.0
) -> Callable[[ShrinkProgress], None]:
    """The ``progress`` a shrink calls, as ``ShrinkStep`` events, ``every`` seconds at most."""
    throttle = Throttle(every)

    def step(where: ShrinkProgress) -> None:
        if throttle.due():
            emit(ShrinkStep(where.replays, where.best_actions, source))

    return step
