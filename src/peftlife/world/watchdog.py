"""The deadline on untrusted scheduler code: one periodic alarm, not one per call.

An engine arms the watchdog once (a periodic ``ITIMER_REAL``) for as long as
it lives; entering and leaving the scheduler's code is then two attribute
writes and a monotonic clock read. The alarm handler raises ``SchedulerHung``
only while the scheduler's code runs and its deadline has passed.
``SchedulerHung`` derives from ``BaseException``, so a scheduler's
``except Exception`` cannot swallow it; one that swallows even that is
interrupted again a second later. The scheduler's code is entered and left
by ``peftlife.world.untrusted.call``, the one way it is called.

SIGALRM exists only on the main thread of a POSIX process: elsewhere the
watchdog does nothing and a hang is not caught (documented, never silently
wrong). No handler runs while native code holds the GIL, nor after the
process ends: ``peftlife.world.supervisor`` is the watchdog outside the
process for those, and ``enter``/``leave`` stamp its shared page too.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from types import FrameType
from typing import Any

from peftlife.world import supervisor

_MAIN = threading.main_thread().ident
# A hang that swallowed ``SchedulerHung`` is interrupted again after this long.
_AGAIN_AFTER = 1.0


def deadline_from_env(default: float) -> float:
    """``PEFTLIFE_SCHEDULE_DEADLINE`` in seconds if set to a positive number, else ``default``."""
    text = os.environ.get("PEFTLIFE_SCHEDULE_DEADLINE", "")
    try:
        seconds = float(text)
    except ValueError:
        return default
    return seconds if seconds > 0 else default


class SchedulerHung(BaseException):
    """The scheduler's code did not return within its deadline."""


class Watchdog:
    """A periodic alarm shared by every live engine of this process.

    >>> dog = Watchdog()
    >>> dog.enter(5.0, "schedule_request"); dog.inside  # never armed: nothing is watched
    False
    >>> issubclass(SchedulerHung, Exception)  # out of reach of ``except Exception``
    False
    """

    def __init__(self) -> None:
        self._armed = 0
        self._period = 0.0
        self._previous: Any = None
        self._deadline_at: float | None = None
        self._seconds = 0.0
        self._what = ""

    @staticmethod
    def usable() -> bool:
        return (
            hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        )

    @property
    def armers(self) -> int:
        """How many engines hold the alarm armed."""
        return self._armed

    @property
    def inside(self) -> bool:
        return self._deadline_at is not None

    def arm(self, seconds: float) -> bool:
        """Start (or share) the periodic alarm, ticking often enough for ``seconds``.

        Returns False where no alarm can be had; pair every True with ``disarm``.
        """
        if not self.usable():
            return False
        period = max(0.005, min(seconds / 8, 0.25))
        if self._armed == 0:
            self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
        self._armed += 1
        if self._armed == 1 or period < self._period:
            self._period = period
            signal.setitimer(signal.ITIMER_REAL, period, period)
        return True

    def disarm(self) -> None:
        """One armer is gone; the last one stops the alarm and restores the old handler."""
        if self._armed == 0 or not self.usable():
            return
        self._armed -= 1
        if self._armed == 0:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)
            self._previous = None
            self._period = 0.0

    def enter(self, seconds: float | None, what: str) -> None:
        """The scheduler's code starts now and must return within ``seconds`` (None: no limit).

        Only the main thread, where the alarm is delivered, is watched here; a
        supervised child also stamps it for the watchdog outside (``supervisor``).
        """
        if (stamp := supervisor.STAMP) is not None:
            stamp.enter(seconds, what)
        if seconds is not None and self._armed and threading.get_ident() == _MAIN:
            self._seconds, self._what = seconds, what
            self._deadline_at = time.monotonic() + seconds

    def leave(self) -> None:
        if (stamp := supervisor.STAMP) is not None:
            stamp.leave()
        if threading.get_ident() == _MAIN:
            self._deadline_at = None

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        deadline = self._deadline_at
        if deadline is None or time.monotonic() < deadline:
            return
        # Not cleared: a scheduler that swallows this is interrupted again.
        self._deadline_at = time.monotonic() + _AGAIN_AFTER
        raise SchedulerHung(f"{self._what} did not return within {self._seconds} s")


WATCHDOG = Watchdog()
