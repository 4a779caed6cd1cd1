"""Progress while a search runs: a bar with totals on a terminal, a heartbeat line elsewhere.

On a terminal the bar counts examples out of the budget (or runs out of the
gate's total); off a terminal (a CI log, a pipe) one line every few seconds
says the same, so a long run is visibly alive without flooding the log. Once a
finding is being shrunk, both say so ("shrinking: N replays, best M actions")
instead of a count of examples that no longer moves.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from peftlife.search.shrink import ShrinkProgress

# Seconds between two heartbeat lines off a terminal.
HEARTBEAT = 5.0


class Tick:
    """What a running command tells its progress display.

    Call it with (done, iterations) as work completes; ``shrinking`` says a
    finding is being shrunk, ``phase`` sets any other phase line (None: counting).
    """

    def __init__(self, show: Callable[[int, int, str | None], None]) -> None:
        self._show = show
        self._counts = (0, 0)
        self._phase: str | None = None

    def __call__(self, done: int, iterations: int) -> None:
        self._counts = (done, iterations)
        self._show(done, iterations, self._phase)

    def phase(self, text: str | None) -> None:
        self._phase = text
        self._show(*self._counts, text)

    def shrinking(self, where: ShrinkProgress) -> None:
        self.phase(where.describe())


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
) -> Iterator[Tick]:
    """A ``tick(done, iterations)`` to call as work completes.

    Silent when ``show`` is false; a bar on a terminal; otherwise a heartbeat
    line on ``stream`` (stderr by default) every ``heartbeat`` seconds.
    """
    if not show:
        yield Tick(lambda done, iterations, phase: None)
        return
    if console.is_terminal:
        with _bar(console, label, total, unit) as tick:
            yield tick
        return
    with _heartbeat(label, total, unit, heartbeat, stream or sys.stderr) as tick:
        yield tick


@contextmanager
def _bar(console: Console, label: str, total: int | None, unit: str) -> Iterator[Tick]:
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
            more = f", {iterations} iterations" if iterations else ""
            more += f" · {phase}" if phase else ""
            bar.update(task, completed=done, iterations=more)

        yield Tick(show)


@contextmanager
def _heartbeat(
    label: str, total: int | None, unit: str, every: float, stream: IO[str]
) -> Iterator[Tick]:
    state: list[Any] = [0, 0, None]
    start = time.perf_counter()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            done, iterations, phase = state
            of = f"/{total}" if total else ""
            more = f", {iterations} iterations" if iterations else ""
            now = f", {phase}" if phase else ""
            elapsed = time.perf_counter() - start
            line = f"{label}: {done}{of} {unit}{more}{now}, {elapsed:.0f} s"
            print(line, file=stream, flush=True)

    thread = threading.Thread(target=beat, name="peftlife-heartbeat", daemon=True)
    thread.start()

    def show(done: int, iterations: int, phase: str | None) -> None:
        state[:] = [done, iterations, phase]

    try:
        yield Tick(show)
    finally:
        stop.set()
        thread.join()
