"""The wiring check: a SUT's factory is built once in a small world before any search.

A factory that raises, hangs, cannot take an ``Environment``, or returns
something without a callable ``schedule_request(active_requests,
inflight_request_ids)`` is a mistake in how the SUT is named or wired, not a
lifecycle bug: every front door refuses it with one line (exit 2) instead of
reporting a "counterexample" after a search. What the scheduler does once it
is called (raising, hanging, returning malformed lists) is left to the search,
which reports it as a finding with its story.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from peftlife.sut.loader import SUTError, describe_error, load
from peftlife.world import untrusted
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
from peftlife.world.protocol import Environment, SchedulerFactory, SchedulerOutput
from peftlife.world.watchdog import SchedulerHung
from peftlife.world.words import article

T = TypeVar("T")

# Seconds the factory gets to build its scheduler (the engine gives schedule_request as long).
DEADLINE = 10.0

# One target pool with a lower tier, one adapter, no draft pool.
SMALL_WORLD = EngineConfig(device_pages=8, host_pages=8, adapter_pages=((1, 2),))
_SMALL = "a world of 8 device pages, 8 host pages, one adapter, no draft pool"


class WiringError(SUTError):
    """A factory that does not build a scheduler; the message says what came back."""


def wired(spec: str, *, deadline: float | None = None) -> SchedulerFactory:
    """Load a SUT and check its wiring; every front door calls this before searching.

    >>> wired("reference").__name__
    'ReferenceScheduler'
    """
    factory = load(spec)
    check_wiring(factory, spec, deadline=deadline)
    return factory


def check_wiring(factory: SchedulerFactory, spec: str, *, deadline: float | None = None) -> None:
    """Build the factory in a small world and call ``schedule_request`` once, each
    within ``deadline`` seconds (``DEADLINE`` by default).

    Raises ``WiringError`` when the factory raises, hangs, does not take an
    ``Environment``, or returns no scheduler, or when ``schedule_request`` does
    not take ``(active_requests, inflight_request_ids)``.
    """
    deadline = DEADLINE if deadline is None else deadline
    environment = Engine(SMALL_WORLD, _placeholder).environment
    built = _call(lambda: factory(environment), "the factory", deadline)
    if isinstance(built, BaseException):
        raise WiringError(_failed(f"the factory of SUT {spec!r}", built, deadline)) from built
    # A __getattr__ of the scheduler's own may raise or hang: that is the search's finding.
    schedule = _call(lambda: getattr(built, "schedule_request", None), "schedule_request", deadline)
    if isinstance(schedule, BaseException):
        return
    if not callable(schedule):
        what = "None" if built is None else article(type(built).__name__)
        raise WiringError(
            f"the factory of SUT {spec!r} returned {what}, which has no schedule_request "
            "method; a SUT names a factory Environment -> Scheduler, whose "
            "schedule_request(active_requests, inflight_request_ids) returns a SchedulerOutput"
        )
    called = _call(lambda: schedule([], set()), "schedule_request", deadline)
    if _at_the_call(called):
        assert isinstance(called, BaseException)
        raise WiringError(
            f"the scheduler of SUT {spec!r} ({type(built).__name__}) cannot be called as "
            f"schedule_request(active_requests, inflight_request_ids): {called}; "
            "give it that signature"
        ) from called
    # Whatever else the call did (raise, hang, a malformed output) is the search's finding.


def _placeholder(environment: Environment) -> _Idle:
    return _Idle()


class _Idle:
    def schedule_request(self, active: object, inflight: object) -> SchedulerOutput:
        return SchedulerOutput()


def _call(fn: Callable[[], T], what: str, deadline: float) -> T | BaseException:
    """``fn()``'s result, or what it raised (a hang raises ``SchedulerHung``)."""
    try:
        return untrusted.call(fn, what, deadline=deadline, arm=True)
    except untrusted.Failed as failed:
        return failed.cause


def _at_the_call(outcome: object) -> bool:
    """A TypeError raised by the call itself (arguments that do not bind), not inside it."""
    if not isinstance(outcome, TypeError) or outcome.__traceback__ is None:
        return False
    # The traceback starts in the lambda of check_wiring; a frame below it is the callee's.
    tb = outcome.__traceback__
    while tb.tb_next is not None and tb.tb_frame.f_code.co_name != "<lambda>":
        tb = tb.tb_next
    return tb.tb_next is None


def _failed(what: str, err: BaseException, deadline: float) -> str:
    if isinstance(err, SchedulerHung):
        return (
            f"{what} did not return within {deadline} s while building a scheduler in {_SMALL}; "
            "a factory must build its scheduler and return"
        )
    if _at_the_call(err):
        return (
            f"{what} cannot be called with an Environment ({err}); "
            "a SUT names a factory Environment -> Scheduler"
        )
    return (
        f"{what} raised {describe_error(err)} while building a scheduler in {_SMALL}; "
        "fix the factory (run with -v for the traceback)"
    )
