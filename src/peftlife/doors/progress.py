"""Progress while a search runs: a bar with totals on a terminal, a heartbeat line elsewhere.

On a terminal the bar counts examples out of the budget (or runs out of the
gate's total); off a terminal (a CI log, a pipe) one line every few seconds
says the same, so a long run is visibly alive without flooding the log.
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

# Seconds between two heartbeat lines off a terminal.
HEARTBEAT = 5.0

Tick = Callable[[int, int], None]


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
        yield lambda done, iterations: None
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

        def tick(done: int, iterations: int) -> None:
            more = f", {iterations} iterations" if iterations else ""
            bar.update(task, completed=done, iterations=more)

        yield tick


@contextmanager
def _heartbeat(
    label: str, total: int | None, unit: str, every: float, stream: IO[str]
) -> Iterator[Tick]:
    state = [0, 0]
    start = time.perf_counter()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            done, iterations = state
            of = f"/{total}" if total else ""
            more = f", {iterations} iterations" if iterations else ""
            elapsed = time.perf_counter() - start
            print(f"{label}: {done}{of} {unit}{more}, {elapsed:.0f} s", file=stream, flush=True)

    thread = threading.Thread(target=beat, name="peftlife-heartbeat", daemon=True)
    thread.start()

    def tick(done: int, iterations: int) -> None:
        state[:] = [done, iterations]

    try:
        yield tick
    finally:
        stop.set()
        thread.join()
