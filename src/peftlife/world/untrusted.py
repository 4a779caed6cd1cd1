"""Calling the scheduler's code: the one way every layer does it.

The scheduler is untrusted code: its module as it is imported, its factory,
each ``schedule_request``, the output object it returns (a property on it),
its declaration that it keeps no state, and its ``__deepcopy__``. Each is
called through ``call``: under the watchdog's deadline, with whatever it
raises turned into ``Failed``, which carries a finding (a ``StepError`` of the
kind ``scheduler_raised`` or ``scheduler_hung``, with the scheduler's frames)
and the exception itself. ``BaseException`` is caught too: a ``SystemExit``
or a ``KeyboardInterrupt`` the scheduler raises is its own bug, not a request
to stop the harness.

Only a real Ctrl-C gets through. Python raises ``KeyboardInterrupt`` for a
SIGINT in whatever frame runs, so the interrupt looks the same as one the
scheduler raised; the difference is whether a SIGINT arrived. On the main
thread the Python-level SIGINT handler in place is wrapped once with one
that counts arrivals and then hands on to it, so the behaviour of Ctrl-C is
otherwise unchanged.
"""

from __future__ import annotations

import inspect
import os
import signal
import threading
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import attrs

from peftlife.world.immutable import immutable
from peftlife.world.protocol import STATELESS_DECLARATION
from peftlife.world.snapshot import StepError
from peftlife.world.watchdog import WATCHDOG, SchedulerHung

T = TypeVar("T")


class Failed(Exception):
    """The scheduler's code raised or hung: ``error`` is the finding, ``cause`` what it raised."""

    def __init__(self, error: StepError, cause: BaseException) -> None:
        super().__init__(error.message)
        self.error = error
        self.cause = cause


def call(fn: Callable[[], T], what: str, *, deadline: float | None, arm: bool = False) -> T:
    """``fn()``, the scheduler's code, run within ``deadline`` seconds (None: no limit).

    Raises ``Failed`` for anything ``fn`` raises and for a hang; only a
    ``KeyboardInterrupt`` caused by a SIGINT gets through. ``what`` names the
    code in the finding (``schedule_request raised ...``). An engine arms the
    watchdog and wraps the SIGINT handler (``watch_sigints``) once for its
    life; a one-off caller passes ``arm=True`` to do both for this call alone.

    >>> call(lambda: 1 / 0, "dividing", deadline=None)
    Traceback (most recent call last):
    ...
    peftlife.world.untrusted.Failed: dividing raised ZeroDivisionError: division by zero
    """
    if arm:
        watch_sigints()
    sigints = _SIGINTS.count
    armed = arm and deadline is not None and WATCHDOG.arm(deadline)
    WATCHDOG.enter(deadline, what)
    try:
        result = fn()
    except BaseException as err:  # the scheduler is untrusted, SystemExit included
        # Stop watching first: the alarm must not fire while the finding is built.
        WATCHDOG.leave()
        if isinstance(err, KeyboardInterrupt) and _from_sigint(sigints):
            raise  # Ctrl-C: it stops the run
        raise Failed(_finding(what, err, fn), err) from None
    else:
        WATCHDOG.leave()
    finally:
        if armed:
            WATCHDOG.disarm()
    return result


def _finding(what: str, err: BaseException, fn: Callable[..., object]) -> StepError:
    if isinstance(err, SchedulerHung):
        return StepError("scheduler_hung", str(err), exception="SchedulerHung")
    # A lambda is the caller's wrapper around the scheduler's code: its module is the harness.
    wrapper = getattr(fn, "__name__", None) == "<lambda>"
    found = frames(err, getattr(fn, "__module__", None) if wrapper else None)
    where = f" (at {' < '.join(found)})" if found else ""
    return StepError(
        "scheduler_raised",
        f"{what} raised {type(err).__name__}: {err}{where}",
        exception=type(err).__name__,
        frames=found,
    )


# Frames shown per exception, innermost first.
MAX_FRAMES = 6

# The harness's frames between a caller and the scheduler's code.
_HARNESS_MODULES = frozenset(
    {
        __name__,
        "contextlib",
        "copy",
        "importlib",
        "importlib._bootstrap",
        "importlib._bootstrap_external",
        "peftlife.world.watchdog",
    }
)


def frames(err: BaseException, caller: str | None = None) -> tuple[str, ...]:
    """Where the exception went in the scheduler's code, innermost first, as
    ``path:line in function``.

    The harness's frames on the way in are left out: this module's, the
    watchdog's, the standard library's that copy or import, and those of the
    module ``caller`` that wrapped the scheduler's code in a lambda. A path is
    the frame's module name spelled as a path (``tests/my_sched.py``), so the
    text depends neither on where the code is installed nor on which door
    imported it.
    """
    harness = _HARNESS_MODULES | {caller} if caller else _HARNESS_MODULES
    shown = []
    inside = False
    for frame, line in traceback.walk_tb(err.__traceback__):
        module = str(frame.f_globals.get("__name__", ""))
        # Once in the scheduler's code every frame counts: it may call back into the world.
        inside = inside or module not in harness
        if inside:
            code = frame.f_code
            shown.append(f"{_module_path(module, code.co_filename)}:{line} in {code.co_name}")
    shown.reverse()
    if len(shown) > MAX_FRAMES:
        # Keep where it was raised and the scheduler's own outer frames, which name its code.
        shown = [*shown[:2], "...", *shown[2 - MAX_FRAMES :]]
    return tuple(shown)


def _module_path(module: str, filename: str) -> str:
    if not module or module == "__main__":
        return os.path.basename(filename)
    base = module.replace(".", "/")
    return f"{base}/__init__.py" if filename.endswith("__init__.py") else f"{base}.py"


# ---- a real Ctrl-C ----


@attrs.define
class _Sigints:
    """SIGINTs delivered since the handler was wrapped, and the handler it hands on to."""

    count: int = 0
    previous: Callable[[int, FrameType | None], Any] | None = None


_SIGINTS = _Sigints()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _SIGINTS.count += 1
    if _SIGINTS.previous is not None:
        _SIGINTS.previous(signum, frame)


def _from_sigint(count_before: int) -> bool:
    """Whether a ``KeyboardInterrupt`` met in the scheduler's code came from a SIGINT.

    A SIGINT counted since the call began says yes; the wrapper in place and
    nothing counted says no, as does a handler that raises nothing (ignored, or
    the process's default). A handler set since the engine wrapped the one before
    leaves it unknown: then it is taken as Ctrl-C, which must stop the run.
    """
    if _SIGINTS.count != count_before:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False  # signals reach only the main thread
    current = signal.getsignal(signal.SIGINT)
    return callable(current) and current is not _on_sigint


def watch_sigints() -> None:
    """Wrap the SIGINT handler in place, unless it is wrapped already or no Python
    handler runs for a SIGINT (ignored, or the process's default of ending): then
    no ``KeyboardInterrupt`` can come from a SIGINT at all.

    Reading the handler costs nearly half of a small world's scheduler pass, so
    an engine does it once, when it starts, not at every call.
    """
    if threading.current_thread() is not threading.main_thread():
        return  # signals reach only the main thread: here every interrupt is raised
    current = signal.getsignal(signal.SIGINT)
    if current is _on_sigint or not callable(current):
        return
    _SIGINTS.previous = current
    signal.signal(signal.SIGINT, _on_sigint)


# ---- the declaration that the scheduler keeps no state ----


@immutable
@attrs.frozen
class StateDeclaration:
    """Whether a scheduler declared that it keeps no state between passes, as read.

    ``stateless`` holds only for the bool ``True``. ``error`` is a finding of the
    kind ``scheduler_raised`` or ``scheduler_hung``: reading the declaration ran
    the scheduler's code (a property, a ``__getattr__``) and it raised or hung;
    the scheduler is then taken to keep state.
    """

    stateless: bool
    error: StepError | None = None


def state_declaration(scheduler: object, *, deadline: float | None) -> StateDeclaration:
    """The scheduler's ``keeps_no_state_between_passes``, read strictly.

    Only the bool ``True`` declares a scheduler stateless; anything else (no
    declaration, ``False``, ``"yes"``, ``1``) means it keeps state. A raise or
    a hang while it is read is a finding, and the scheduler keeps state.

    >>> state_declaration(type("Says", (), {STATELESS_DECLARATION: "yes"})(), deadline=None)
    StateDeclaration(stateless=False, error=None)
    """
    try:
        value = call(lambda: _declared(scheduler), STATELESS_DECLARATION, deadline=deadline)
    except Failed as failed:
        return StateDeclaration(False, failed.error)
    return StateDeclaration(value is True)


def _declared(scheduler: object) -> object:
    """The scheduler's declaration, or None when it makes none.

    An ``AttributeError`` means no declaration only when none is defined: one
    raised by a property that is defined is the scheduler's code raising.
    """
    try:
        return getattr(scheduler, STATELESS_DECLARATION)
    except AttributeError:
        try:
            inspect.getattr_static(scheduler, STATELESS_DECLARATION)
        except AttributeError:
            return None
        raise
