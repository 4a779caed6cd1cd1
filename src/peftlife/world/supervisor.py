"""The outside watchdog: work that runs scheduler code, in a child the harness can take back.

The in-process watchdog (``peftlife.world.watchdog``) interrupts a scheduler
that loops in Python, but nothing in a process runs while native code holds
the GIL, and nothing survives the process ending (``os._exit``), a segfault
or the kernel's out-of-memory kill. So ``supervised(work)`` forks: the child
does the work (a search, a replay) and sends back its result; the parent only
waits, and watches a page of shared memory the child writes as it goes:

- a stamp, written by the watchdog as scheduler code is entered and left: the
  moment it was entered, its deadline and what it is (``schedule_request``);
- progress counters (examples, iterations), which the parent hands on to its
  progress display, and one number the work marks (an iteration, an index);
- a journal of pickled notes (the world and the actions of the example under
  way, or the entries of a replay so far), so the parent knows what the child
  had done when it died.

The parent ends a child that has been inside scheduler code for its deadline
plus ``MARGIN`` (the in-process alarm had its chance and could not run):
``SchedulerDied`` then says it hung. A child that ended inside scheduler code
exited (an exit code) or crashed (a signal; SIGKILL we did not send is most
likely the out-of-memory killer). Either way the journal comes with it, and
the search layer turns it into a ``scheduler_protocol`` finding. A child that
died outside scheduler code is the harness's own failure: ``HarnessDied``.

Cost: one fork per supervised piece of work (a search, a replay: a few
milliseconds), a few stores into shared memory per scheduler call and a
pickled note per action. Nested work runs in the child already supervising
it, without another fork. The child's address space is capped at what the
parent uses plus ``MEMORY_HEADROOM`` (``PEFTLIFE_MEMORY_LIMIT_MB`` overrides),
so a scheduler that allocates without bound meets a ``MemoryError`` (a
finding) before it starves the machine.

Limits: where ``os.fork`` is missing (Windows) the work runs in-process, as
before, and only a Python-level hang is caught. A native hang is detected only
when the call has a deadline. Ctrl-C reaches the parent, which ends the child
at once and raises ``KeyboardInterrupt``; the child ignores SIGINT so that it
never prints a traceback of its own. Work that keeps a result worth having when
stopped (a shrink: its smallest case so far) runs ``interruptible``: the child
then takes one SIGINT as ``KeyboardInterrupt``, the parent hands Ctrl-C on to
it, and whatever the child sends back within ``GRACE`` comes with the
``Interrupted`` the parent raises; a child that does not answer by then (stuck
in native code) is ended, and ``Interrupted`` comes with nothing.

Why not Pebble (``pebble.ProcessPool``, a timeout per task): its timeout ends a
whole task and hands back nothing of it, where this deadline is on each call
into the scheduler, inside a search that rightly runs for minutes, and the
journal of what the child did is what makes a crash a finding; the address-space
cap and the Ctrl-C grace are ours as well. Pebble would replace only the fork,
the pipe and the wait, so the module does without the dependency
(docs/fuzzing.md compares it, and ``peftlife fuzz`` with HypoFuzz).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import pickle
import resource
import select
import signal
import struct
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar, cast

import attrs

T = TypeVar("T")

# Seconds past the deadline before the parent ends a child stuck in scheduler code:
# the in-process alarm fires at the deadline and again a second later.
MARGIN = 2.0
# How often the parent looks at the stamp; progress is handed on when it changes, and
# at least every half second, so a caller can stop the work from its progress callback.
_POLL = 0.05
# A caller that stops the work while scheduler code has been running this long
# gets a hang: ending a worker inside scheduler code must not read as "held".
STOPPED_INSIDE = 1.0
# Seconds an interruptible child has to send back what it has once Ctrl-C came.
GRACE = 1.0
MEMORY_HEADROOM = 4 << 30
_PR_SET_PDEATHSIG = 1
_JOURNAL = 32 << 20

# since, deadline, examples, iterations, mark, journal end, what (64 bytes)
_HEAD = struct.Struct("=ddqqqq64s")


class SchedulerDied(Exception):
    """The child ended (or was ended) inside scheduler code; ``death`` says how."""

    def __init__(self, death: Death) -> None:
        super().__init__(death.message)
        self.death = death


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped interruptible work; ``result`` is what the child sent back in
    time (a value, or None when it sent nothing or raised)."""

    def __init__(self, result: Any = None) -> None:
        super().__init__()
        self.result = result


class HarnessDied(RuntimeError):
    """The child ended outside scheduler code: a failure of the harness itself."""


@attrs.frozen
class Death:
    """How scheduler code took its process down, and what the child had journaled."""

    kind: str  # "hung", "exited" or "crashed"
    what: str
    message: str
    notes: tuple[Any, ...]
    mark: int
    examples: int


class Stamp:
    """The page of shared memory a supervised child writes and its parent reads."""

    def __init__(self) -> None:
        self._map = mmap.mmap(-1, _HEAD.size + _JOURNAL)
        self._what = ""
        self._end = _HEAD.size
        self.full = False

    # ---- written by the child ----

    def enter(self, deadline: float | None, what: str) -> None:
        struct.pack_into("=dd", self._map, 0, time.monotonic(), deadline or 0.0)
        if what != self._what:
            self._what = what
            self._map[48 : 48 + 64] = what.encode()[:64].ljust(64, b"\0")

    def leave(self) -> None:
        struct.pack_into("=d", self._map, 0, 0.0)

    def progress(self, examples: int, iterations: int) -> None:
        struct.pack_into("=qq", self._map, 16, examples, iterations)

    def mark(self, value: int) -> None:
        struct.pack_into("=q", self._map, 32, value)

    def begin(self) -> None:
        """Start the journal afresh (a new example)."""
        self._end = _HEAD.size
        self.full = False
        struct.pack_into("=q", self._map, 40, self._end)

    def note(self, obj: object) -> None:
        """Add one note to the journal; past its capacity notes are dropped (``full``)."""
        data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
        end = self._end + 4 + len(data)
        if end > len(self._map):
            self.full = True
            return
        struct.pack_into("=I", self._map, self._end, len(data))
        self._map[self._end + 4 : end] = data
        self._end = end
        struct.pack_into("=q", self._map, 40, end)

    # ---- read by the parent ----

    def read(self) -> tuple[float, float, int, int, int, int, str]:
        since, deadline, examples, iterations, mark, end, what = _HEAD.unpack_from(self._map, 0)
        return since, deadline, examples, iterations, mark, end, what.rstrip(b"\0").decode()

    def notes(self) -> tuple[Any, ...]:
        end = self.read()[5]
        found = []
        at = _HEAD.size
        while at < end:
            (size,) = struct.unpack_from("=I", self._map, at)
            found.append(pickle.loads(self._map[at + 4 : at + 4 + size]))
            at += 4 + size
        return tuple(found)


# The stamp of this process when it is a supervised child; None otherwise.
STAMP: Stamp | None = None


def available() -> bool:
    return hasattr(os, "fork") and os.environ.get("PEFTLIFE_SUPERVISE", "1") != "0"


Progress = Callable[[int, int], None]


def supervised(
    work: Callable[[Progress | None], T],
    progress: Progress | None = None,
    *,
    hangs_at: tuple[int, str] | None = None,
    interruptible: bool = False,
) -> T:
    """``work(progress)``, run in a supervised child; its result, or what it raised, comes back.

    The child's ``progress`` writes to the shared page (so a death says how
    many examples ran), and the parent tells ``progress`` (examples, iterations)
    as it reads them. Raises
    ``SchedulerDied`` when scheduler code hung, exited or crashed the child.
    Already in a supervised child, or where there is no fork, ``work`` runs here.
    ``hangs_at`` (a mark and the code's name) is where the work is known to hang:
    the child is ended as soon as it enters that code there, not after the deadline.
    ``interruptible`` work is told of Ctrl-C and given ``GRACE`` to send back what it
    has, which comes with the ``Interrupted`` raised here.
    """
    if STAMP is not None or not available():
        return work(progress)
    stamp = Stamp()
    stamp.begin()
    read_end, write_end = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _child(lambda: work(stamp.progress), stamp, write_end, interruptible)
    os.close(write_end)
    try:
        return cast(T, _parent(pid, stamp, read_end, progress, hangs_at, interruptible))
    finally:
        os.close(read_end)


def _child(work: Callable[[], Any], stamp: Stamp, out: int, interruptible: bool) -> None:
    global STAMP
    try:  # whatever happens, the child never runs on into the parent's code
        STAMP = stamp
        signal.signal(signal.SIGINT, _stop_once if interruptible else signal.SIG_IGN)
        _die_with_parent()
        _cap_memory()
        try:
            result: tuple[str, Any] = ("returned", work())
        except BaseException as err:  # handed to the parent, which raises it
            result = ("raised", err)
        try:
            data = pickle.dumps(result, pickle.HIGHEST_PROTOCOL)
        except Exception as err:
            failed = result[1] if result[0] == "raised" else err
            text = "".join(traceback.format_exception(failed))
            data = pickle.dumps(("raised", HarnessDied(f"a result that cannot be sent: {text}")))
        with os.fdopen(out, "wb") as pipe:
            pipe.write(data)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        os._exit(0)


def _stop_once(signum: int, frame: object) -> None:
    """An interruptible child's Ctrl-C: the first stops the work; the rest (the
    terminal's and the parent's, which hands it on, may both arrive) are ignored,
    so that what the work has is sent back whole."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _die_with_parent() -> None:
    """Ask Linux to end this child when its parent ends (a parent killed outright
    cannot end it itself); elsewhere an orphan finishes its work and exits."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _cap_memory() -> None:
    limit_mb = os.environ.get("PEFTLIFE_MEMORY_LIMIT_MB")
    try:
        with open("/proc/self/statm") as statm:
            used = int(statm.read().split()[0]) * mmap.PAGESIZE
    except OSError:
        return  # no way to tell what the process uses: leave it uncapped
    cap = used + (int(limit_mb) << 20 if limit_mb else MEMORY_HEADROOM)
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or cap < hard:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def _parent(
    pid: int,
    stamp: Stamp,
    pipe: int,
    progress: Progress | None,
    hangs_at: tuple[int, str] | None,
    interruptible: bool,
) -> Any:
    chunks: list[bytes] = []
    ended_by_us = stopped_inside = False
    told, told_at = (0, 0), time.monotonic()
    try:
        while True:
            ready, _, _ = select.select([pipe], [], [], _POLL)
            if ready:
                chunk = os.read(pipe, 1 << 16)
                if chunk:
                    chunks.append(chunk)
                    continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                # What is still in the pipe was written before the child ended.
                while chunk := os.read(pipe, 1 << 16):
                    chunks.append(chunk)
                break
            since, deadline, examples, iterations, mark, _, what = stamp.read()
            now = time.monotonic()
            if progress is not None and ((examples, iterations) != told or now > told_at + 0.5):
                told, told_at = (examples, iterations), now
                try:
                    progress(examples, iterations)
                except BaseException:  # the caller stops the work: not a hang unless it was one
                    stopped_inside = bool(since) and now - since > STOPPED_INSIDE
                    raise
            overdue = deadline and time.monotonic() > since + deadline + MARGIN
            if since and (overdue or (mark, what) == hangs_at):
                ended_by_us = True
                os.kill(pid, signal.SIGKILL)
    except KeyboardInterrupt:
        if not interruptible or stopped_inside:
            _end(pid)
            if stopped_inside:
                raise _stopped(stamp) from None
            raise
        raise Interrupted(_what_it_had(pid, pipe, chunks)) from None
    except BaseException:  # anything else: the child must not outlive us
        _end(pid)
        raise
    if chunks:
        kind, value = pickle.loads(b"".join(chunks))
        if kind == "raised":
            raise value
        return value
    raise _died(status, stamp, ended_by_us)


def _end(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, ChildProcessError):  # reaped already
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _what_it_had(pid: int, pipe: int, chunks: list[bytes]) -> Any:
    """Hand Ctrl-C on to an interruptible child and take what it sends back within
    ``GRACE`` seconds: its value, or None (it raised, died or did not answer)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)
    until = time.monotonic() + GRACE
    ended = False
    try:
        while not ended and time.monotonic() < until:
            ready, _, _ = select.select([pipe], [], [], min(_POLL, until - time.monotonic()))
            if ready:
                chunk = os.read(pipe, 1 << 16)
                chunks.append(chunk)
                ended = not chunk  # the child closed its end: all it had is here
    finally:
        _end(pid)
    if not ended:
        return None
    try:
        kind, value = pickle.loads(b"".join(chunks))
    except Exception:
        return None
    return value if kind == "returned" else None


def _died(status: int, stamp: Stamp, ended_by_us: bool) -> BaseException:
    since, deadline, examples, _, mark, _, what = stamp.read()
    if not since:
        return HarnessDied(f"the harness's process {_how(status)} outside the scheduler's code")
    if ended_by_us:
        kind = "hung"
        how = (
            f"did not return within {deadline:g} s and could not be interrupted "
            "(native code holding the GIL?): ended from outside"
        )
    elif os.WIFEXITED(status):
        kind, how = "exited", f"ended the process with exit code {os.WEXITSTATUS(status)}"
    else:
        kind, how = "crashed", f"crashed the process ({_how(status)})"
    return SchedulerDied(Death(kind, what, f"{what} {how}", stamp.notes(), mark, examples))


def _stopped(stamp: Stamp) -> SchedulerDied:
    since, _, examples, _, mark, _, what = stamp.read()
    how = f"had not returned after {time.monotonic() - since:.1f} s when the run was stopped"
    return SchedulerDied(Death("hung", what, f"{what} {how}", stamp.notes(), mark, examples))


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        name = signal.Signals(number).name
        if number == signal.SIGKILL:
            return f"was killed by {name}, most likely for running out of memory"
        return f"was killed by {name}"
    return f"exited with code {os.WEXITSTATUS(status)}"
