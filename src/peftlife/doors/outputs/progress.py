"""Progress while a search runs: a bar with totals on a terminal, a heartbeat line elsewhere.

Both are handlers of the search's events (``peftlife.search.events``). On a
terminal the bar counts examples out of the budget (or runs out of the gate's
total); off a terminal (a CI log, a pipe) one line every few seconds says the
same, so a long run is visibly alive without flooding the log. Once a finding
is being shrunk, both say so ("shrinking: N replays, best M actions") instead
of a count of examples that no longer moves, until ``NewsOver``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from peftlife.search import events
from peftlife.world.words import count

# Seconds between two heartbeat lines off a terminal.
HEARTBEAT = 5.0

# What a display shows: examples (or states, runs) done, iterations, and the phase line
# (None: counting).
Show = Callable[[int, int, str | None], None]


class Display:
    """A progress display as a handler of events: counts, and the shrink's line meanwhile."""

    def __init__(self, show: Show) -> None:
        self._show = show
        self._counts = (0, 0)
        self._phase: str | None = None

    def __call__(self, event: events.Event) -> None:
        if isinstance(event, events.ExamplesRan):
            self._counts = (event.done, event.iterations)
        elif isinstance(event, events.PhaseStarted | events.ShrinkStep):
            self._phase = event.describe()
        elif isinstance(event, events.NewsOver):
            self._phase = None
        else:
            return
        self._show(*self._counts, self._phase)


@contextmanager
def progress(
    console: Console,
    label: str,
    total: int | None,
    *,
    show: bool,
    unit: str = "examples",
    heartbeat: float = HEARTBEAT,
    stream: IO[str] | None = None,
) -> Iterator[events.Handler]:
    """A handler to emit the run's events to.

    Silent when ``show`` is false; a bar on a terminal; otherwise a heartbeat
    line on ``stream`` (stderr by default) every ``heartbeat`` seconds.
    """
    if not show:
        yield events.ignore
        return
    if console.is_terminal:
        with _bar(console, label, total, unit) as display:
            yield display
        return
    with _heartbeat(label, total, unit, heartbeat, stream or sys.stderr) as display:
        yield display


@contextmanager
def _bar(console: Console, label: str, total: int | None, unit: str) -> Iterator[Display]:
    columns = (
        TextColumn(label),
        BarColumn(bar_width=20),
        MofNCompleteColumn(),
        TextColumn(unit + "{task.fields[iterations]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=total, iterations="")

        def show(done: int, iterations: int, phase: str | None) -> None:
            more = f", {count(iterations, 'iteration')}" if iterations else ""
            more += f" · {phase}" if phase else ""
            bar.update(task, completed=done, iterations=more)

        yield Display(show)


@contextmanager
def _heartbeat(
    label: str, total: int | None, unit: str, every: float, stream: IO[str]
) -> Iterator[Display]:
    state: tuple[int, int, str | None] = (0, 0, None)
    start = time.perf_counter()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            done, iterations, phase = state
            of = f"/{total}" if total else ""
            more = f", {count(iterations, 'iteration')}" if iterations else ""
            now = f", {phase}" if phase else ""
            elapsed = time.perf_counter() - start
            line = f"{label}: {done}{of} {unit}{more}{now}, {elapsed:.0f} s"
            print(line, file=stream, flush=True)

    thread = threading.Thread(target=beat, name="peftlife-heartbeat", daemon=True)
    thread.start()

    def show(done: int, iterations: int, phase: str | None) -> None:
        nonlocal state
        state = (done, iterations, phase)

    try:
        yield Display(show)
    finally:
        stop.set()
        thread.join()
