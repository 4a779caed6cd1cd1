"""``peftlife fuzz``: a long campaign over many workers that share one example database.

Each worker is a process that searches in slices: slice ``k`` of worker ``w``
searches scenario ``scenarios[(w + k) % len(scenarios)]`` with seed
``base + k * workers + w``, so no two slices repeat one another. The first
slice of a scenario replays the shared database (every failure any machine
saved for this SUT and scenario); later ones only generate, so a known bug
does not keep a worker from looking past it. Hypothesis saves every failure
to the database as it is found. The worker sends the finding to the campaign at
once, then shrinks it and sends the shrunk one; the campaign owns the clock, and
writes the unshrunk finding of a worker it has to end while it is still
shrinking. Every report is kept; the summary shows one row per defect
(``defect_key``).

Several machines run the same command against one Redis (``--database
redis://host:port/db``): there is no protocol of our own between them, only
Hypothesis's database.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import attrs
import hypothesis
from hypothesis import Phase
from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table

from peftlife import reports, sut
from peftlife.search import events, profiles, shrink
from peftlife.search.database import ResilientDatabase, open_database
from peftlife.search.failure import LifecycleFailure, ShrinkInterrupted, minimized
from peftlife.search.hunt import search
from peftlife.world.words import count

# Examples per slice: large enough that a slice's set-up is noise. A stop is
# honoured between two examples, whatever the slice.
SLICE_EXAMPLES = 50
# How long a worker may take to stop once the campaign asks it to (its duration is
# over, or Ctrl-C): time to finish an example or a shrink. A worker still busy
# then is ended, so a campaign ends at most this long after its duration.
STOP_GRACE_S = 2.0
# A worker whose process dies is started again on its next slice, this many times by default.
MAX_RESTARTS = 3
_HEARTBEAT_S = 5.0


@attrs.frozen
class Plan:
    """What one campaign searches, for how long, and where it keeps what it finds."""

    sut: str
    scenarios: tuple[str, ...]
    workers: int
    profile: str
    seed: int
    report_dir: Path
    database: str | None = None
    duration: float | None = None
    max_examples: int | None = None
    slice_examples: int = SLICE_EXAMPLES
    max_restarts: int = MAX_RESTARTS
    shrink_timeout: float | None = shrink.DEFAULT_TIMEOUT

    def slice_of(self, worker: int, k: int) -> tuple[str, int]:
        """The scenario and seed of a worker's k-th slice.

        >>> Plan("reference", ("a", "b"), 2, "dev", 100, Path(".")).slice_of(1, 1)
        ('a', 103)
        """
        return self.scenarios[
            (worker + k) % len(self.scenarios)
        ], self.seed + k * self.workers + worker

    def worker_budget(self, worker: int) -> int | None:
        """This worker's share of ``max_examples`` (None: until the duration ends)."""
        if self.max_examples is None:
            return None
        share, extra = divmod(self.max_examples, self.workers)
        return share + (1 if worker < extra else 0)


# ---- the worker process ----


def _worker(worker: int, first_slice: int, plan: Plan, out: Any, stop: Any) -> None:
    # A broken pipe means the campaign is gone: nobody is left to tell.
    with contextlib.suppress(BrokenPipeError, EOFError):
        _search_slices(worker, first_slice, plan, out, stop)


def _search_slices(worker: int, first_slice: int, plan: Plan, out: Any, stop: Any) -> None:
    """Search slice after slice until the budget is spent or the campaign says stop.

    ``out`` is this worker's end of a pipe: a send is written before it returns,
    so what a worker announced is known even if the scheduler then ends the
    process, or the campaign ends it in the middle of a shrink.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the campaign decides when to stop
    tell: events.Handler = out.send
    warn: Callable[[str], None] = lambda text: tell(events.Warned(text, worker))  # noqa: E731
    db = (
        None
        if plan.database is None
        else open_database(
            plan.database, local=plan.report_dir / "database", warn=warn, require=False
        )
    )
    budget = plan.worker_budget(worker)
    examples, k, replayed = 0, first_slice, set[str]()
    base = profiles.get(plan.profile)
    # The SUT, resolved once by this worker (a process of its own) for all its slices.
    subject: sut.Resolved | None = None
    while not stop.is_set():
        if budget is not None and examples >= budget:
            break
        scenario, seed = plan.slice_of(worker, k)
        tell(events.SliceStarted(k, scenario, seed, worker))
        phases = [Phase.generate] if scenario in replayed else [Phase.reuse, Phase.generate]
        replayed.add(scenario)
        size = (
            plan.slice_examples if budget is None else min(plan.slice_examples, budget - examples)
        )
        # Each slice has its own seed, so the profile's derandomization never applies.
        settings = hypothesis.settings(
            profiles.for_search(base, max_examples=size, database=db), phases=phases
        )
        done_before = examples

        def tick(n: int, _iterations: int, done_before: int = done_before) -> None:
            if stop.is_set():  # between two examples: Hypothesis stops cleanly on this
                raise KeyboardInterrupt
            tell(events.ExamplesRan(done_before + n, source=worker))

        try:
            subject = subject or sut.resolve(plan.sut)
            result = search(subject, scenario, settings, seed=seed, progress=tick, shrink=False)
            examples += result.examples
            tell(events.ExamplesRan(examples, source=worker))
            if result.failure is not None:
                # Sent before shrinking, which may outlast the campaign: the campaign
                # then writes this one, unshrunk, rather than nothing.
                tell(Found.of(result.failure, seed, plan.profile, subject, size).event(worker))
                tell(events.PhaseStarted("shrinking", worker))
                news = events.shrinking(tell, worker, SHRINK_NEWS_EVERY)
                shrunk = minimized(
                    result.failure, timeout=plan.shrink_timeout, progress=news, subject=subject
                )
                tell(Found.of(shrunk, seed, plan.profile, subject, size).event(worker))
        except ShrinkInterrupted as stop:  # Ctrl-C reached the shrink: its case so far
            tell(Found.of(stop.failure, seed, plan.profile, subject, size).event(worker))
            break
        except KeyboardInterrupt:
            break
        except Exception:  # a harness bug: report it, and go on with the next slice
            tell(events.HarnessError(scenario, seed, traceback.format_exc(), worker))
        k += 1
    pending = len(db.pending) if isinstance(db, ResilientDatabase) else 0
    tell(events.RunDone(examples, pending, worker))


# Seconds between two pieces of a worker's shrink news.
SHRINK_NEWS_EVERY = 0.25


@attrs.frozen
class Found:
    """A finding as a worker sends it: its case and the case's replay.

    The worker replays it, so the campaign never runs the scheduler's code.
    """

    case: reports.Case
    outcome: reports.Outcome
    # The examples its slice searched under its seed (``check --max-examples`` searches
    # the same only with the same budget), and whether it was met replaying the
    # database instead, which no seed finds again.
    budget: int | None = None
    replayed: bool = False

    @classmethod
    def of(
        cls,
        failure: LifecycleFailure,
        seed: int,
        profile: str,
        subject: sut.Resolved | None = None,
        budget: int | None = None,
    ) -> Found:
        case = reports.Case.from_failure(failure, seed=seed, profile=profile, shrunk=failure.shrunk)
        return cls(case, reports.replay(case, subject), budget, failure.replayed)

    def event(self, worker: int) -> events.Found:
        """The finding as the worker tells it, this record its detail."""
        return events.Found(defect_key(self.outcome)[0], self.case.shrunk, self, worker)


def defect_key(outcome: reports.Outcome) -> tuple[str, tuple[str, ...]]:
    """The defect a finding most likely shows: its invariant and the scheduler's move.

    The move is the names of the manager methods the scheduler called in the
    iteration that broke the invariant, each once, in name order. Left out is
    what the generated world decides rather than the defect: which requests and
    adapters (their ids), how many (so how often each method was called, and in
    what order), in which pool (a draft pool repeats the target's calls), and the
    executor's calls in that iteration (registering first chunks, freeing
    finished requests), which follow from whatever else the world held. So one
    defect met in several scenarios, or by several workers, is one group, while
    two defects that break one invariant by different moves are two.
    """
    if not outcome.violations:  # a nondeterministic scheduler: the replay held
        return "held on replay", ()
    violation = outcome.violations[0]
    step = next(
        (
            e.snapshot.step
            for e in reversed(outcome.entries)
            if e.snapshot.iteration == violation.iteration
        ),
        None,
    )
    calls = step.calls if step is not None else ()
    return violation.invariant, tuple(sorted({c.method for c in calls if c.caller == "scheduler"}))


# ---- the campaign ----


@attrs.define
class WorkerState:
    process: Any
    # The campaign's end of the worker's pipe; None once the worker has closed it.
    reader: Any
    slice: int = 0
    scenario: str = "-"
    seed: int = 0
    examples: int = 0
    started: float = attrs.field(factory=time.monotonic)
    restarts: int = 0
    findings: int = 0
    done: bool = False
    pending: int = 0
    # The finding this worker is shrinking: written as it is if the worker never finishes.
    unshrunk: Found | None = None
    # How far that shrink got ("shrinking: N replays, best M actions"), while it runs.
    shrinking: str | None = None
    # Ended by the campaign, still busy after the grace.
    ended: bool = False


@attrs.define
class Group:
    """The findings of one defect (``defect_key``): how many, who found them, the shortest."""

    invariant: str
    move: tuple[str, ...]
    shortest: reports.Case
    # The shortest finding's Markdown report.
    report: Path
    workers: list[int]
    count: int = 1
    # The shortest finding's replay, for its story.
    outcome: reports.Outcome | None = None
    # Every distinct trace of this defect (its hash), with its JSON report.
    traces: dict[str, Path] = attrs.Factory(dict)
    # How the shortest finding was met: its slice's budget, or replaying the database.
    budget: int | None = None
    replayed: bool = False


class Campaign:
    """The parent of the workers: starts them, listens, writes every finding's reports."""

    def __init__(self, plan: Plan, console: Console, quiet: bool = False) -> None:
        self.plan = plan
        self.console = console
        # Quiet: no live table, heartbeat or finding lines; warnings and the summary stay.
        self.quiet = quiet
        self.workers: dict[int, WorkerState] = {}
        self.groups: dict[tuple[str, tuple[str, ...]], Group] = {}
        self.findings = 0
        # Each trace's reports, so a trace found again is not written again.
        self._written: dict[str, dict[str, Path]] = {}
        self.crashes: list[str] = []
        self.warnings: list[str] = []
        self.interrupted = False
        self.started = time.monotonic()
        self.ended: float | None = None
        # Examples of worker processes that died and were started again.
        self._retired_examples = 0
        self._ctx = mp.get_context("spawn")
        self._stop = self._ctx.Event()
        # The live table or heartbeat while the campaign runs: a handler of every event.
        self._show: events.Handler = events.ignore

    def _start(self, worker: int, first_slice: int, restarts: int = 0) -> None:
        reader, writer = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(
            target=_worker,
            args=(worker, first_slice, self.plan, writer, self._stop),
            name=f"peftlife-fuzz-{worker}",
            daemon=True,
        )
        process.start()
        writer.close()  # the worker holds the only writer: its exit reads as end of file
        self.workers[worker] = WorkerState(process, reader, slice=first_slice, restarts=restarts)

    @property
    def examples(self) -> int:
        return sum(w.examples for w in self.workers.values()) + self._retired_examples

    @property
    def elapsed(self) -> float:
        """Seconds since the campaign started, or that it ran once it has ended: the
        summary it prints and the one it writes give the same figure."""
        return (self.ended or time.monotonic()) - self.started

    def _all_done(self) -> bool:
        return all(w.done for w in self.workers.values())

    def run(self) -> None:
        # Ended from outside (a CI timeout, kill): stop as Ctrl-C does, writing what was found.
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
        for worker in range(self.plan.workers):
            self._start(worker, 0)
        # The campaign keeps the clock: a worker busy in a long shrink or a hung
        # scheduler cannot stretch the duration.
        end = None if self.plan.duration is None else self.started + self.plan.duration
        try:
            with self._display() as show:
                self._show = show
                while not self._all_done() and (end is None or time.monotonic() < end):
                    left = 0.25 if end is None else end - time.monotonic()
                    self._receive(timeout=max(0.0, min(0.25, left)))
                    # The campaign's own count, so the display moves while workers are quiet.
                    show(events.ExamplesRan(self.examples))
                self._show = events.ignore
                self._stop_workers()
        except KeyboardInterrupt:
            self.interrupted = True
            self._stop_workers()
        finally:
            self.ended = time.monotonic()
            signal.signal(signal.SIGTERM, previous)

    def _stop_workers(self) -> None:
        """Ask every worker to stop; end those still busy after ``STOP_GRACE_S``.

        A worker ended in the middle of a shrink leaves its finding unshrunk: its
        reports are written as the search found it, and say so.
        """
        self._stop.set()
        grace_end = time.monotonic() + STOP_GRACE_S
        while not self._all_done() and time.monotonic() < grace_end:
            self._receive(timeout=max(0.0, min(0.25, grace_end - time.monotonic())), restart=False)
        for worker, state in self.workers.items():
            if state.done:
                continue
            state.process.terminate()
            state.process.join(timeout=1)
            if state.process.is_alive():  # a scheduler that ignores SIGTERM
                state.process.kill()
                state.process.join(timeout=1)
            state.done = state.ended = True
            self._settle(worker)

    def _receive(self, timeout: float, restart: bool = True) -> None:
        """Handle what the workers sent; a pipe that ends before ``done`` is a dead worker."""
        readers: dict[Any, int] = {
            w.reader: n for n, w in self.workers.items() if w.reader is not None
        }
        ready: list[Any] = wait(list(readers), timeout)
        for reader in ready:
            worker = readers[reader]
            try:
                while reader.poll():
                    event = reader.recv()
                    self._handle(event)
                    self._show(event)
            except EOFError:
                self.workers[worker].reader = None
                if not self.workers[worker].done:
                    self._died(worker, restart)

    def _handle(self, event: events.Event) -> None:
        """Take in what a worker told: every message is an event naming its worker."""
        worker = getattr(event, "source", None)
        assert isinstance(worker, int), event
        state = self.workers[worker]
        if not isinstance(event, events.ShrinkStep | events.PhaseStarted):
            state.shrinking = None  # any other news: the shrink is over
        if isinstance(event, events.SliceStarted):
            self._settle(worker)  # the worker moved on without shrinking it (a harness error)
            state.slice, state.scenario, state.seed = event.index, event.scenario, event.seed
        elif isinstance(event, events.ShrinkStep | events.PhaseStarted):
            state.shrinking = event.describe()
        elif isinstance(event, events.ExamplesRan):
            state.examples = event.done
        elif isinstance(event, events.Found):
            found = event.detail
            assert isinstance(found, Found)
            if found.case.shrunk:
                state.unshrunk = None
                self._record(worker, found)
            else:  # kept until its shrunk form comes, or never does
                state.unshrunk = found
        elif isinstance(event, events.Warned):
            if event.text not in self.warnings:
                self.warnings.append(event.text)
                self.console.print(f"warning: {event.text}", soft_wrap=True)
        elif isinstance(event, events.HarnessError):
            self.crashes.append(
                f"worker {worker} met a harness error in scenario {event.scenario} seed "
                f"{event.seed}: {event.text.strip().splitlines()[-1]}"
            )
        elif isinstance(event, events.RunDone):
            self._settle(worker)
            state.examples, state.pending = event.examples, event.pending
            state.done = True

    def _settle(self, worker: int) -> None:
        """Record the finding a worker was shrinking, as it was found: it will not shrink it now."""
        state = self.workers[worker]
        if state.unshrunk is not None:
            found, state.unshrunk = state.unshrunk, None
            self._record(worker, found)

    def _record(self, worker: int, found: Found) -> None:
        """Write a finding's reports (once per trace) and count it in its defect's group."""
        case = found.case
        self.findings += 1
        self.workers[worker].findings += 1
        trace = reports.trace_hash(case)
        if trace not in self._written:
            self._written[trace] = reports.write(case, found.outcome, self.plan.report_dir)
        report = self._written[trace]["markdown"]
        key = defect_key(found.outcome)
        group = self.groups.get(key)
        if group is None:
            group = Group(*key, shortest=case, report=report, workers=[worker])
            group.outcome, group.budget, group.replayed = (
                found.outcome,
                found.budget,
                found.replayed,
            )
            group.traces[trace] = self._written[trace]["json"]
            self.groups[key] = group
            if not self.quiet:
                self.console.print(
                    f"finding: {key[0]} in {case.scenario} (worker {worker}, "
                    f"{_length(case)}) → {report}",
                    soft_wrap=True,
                )
            return
        group.count += 1
        group.traces.setdefault(trace, self._written[trace]["json"])
        if worker not in group.workers:
            group.workers.append(worker)
        if _shorter(case, group.shortest):
            group.shortest, group.report, group.outcome = case, report, found.outcome
            group.budget, group.replayed = found.budget, found.replayed

    def _died(self, worker: int, restart: bool) -> None:
        """A worker gone without saying done: a finding, then its next slice in a new process."""
        state = self.workers[worker]
        state.process.join(timeout=5)
        code = state.process.exitcode
        how = f"signal {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"
        self.crashes.append(
            f"worker {worker} died ({how}) in scenario {state.scenario} with seed "
            f"{state.seed} after {count(state.examples, 'example')}: the scheduler may end its "
            f"process; replay with: peftlife check --sut {self.plan.sut} "
            f"--scenario {state.scenario} --seed {state.seed} --profile {self.plan.profile}"
        )
        self.console.print(f"warning: {self.crashes[-1]}", soft_wrap=True)
        self._settle(worker)
        self._retired_examples += state.examples
        state.examples = 0
        if restart and state.restarts < self.plan.max_restarts and not self._stop.is_set():
            self._start(worker, state.slice + 1, state.restarts + 1)
        else:
            state.done = True

    # ---- showing it ----

    def _progress_table(self) -> Table:
        table = Table(box=box.SIMPLE_HEAD, title="peftlife fuzz", title_justify="left")
        for column in ("worker", "scenario", "seed"):
            table.add_column(column, no_wrap=True)
        for column in ("examples", "ex/s", "findings"):
            table.add_column(column, justify="right")
        table.add_column("now", no_wrap=True)
        now = time.monotonic()
        for worker, w in sorted(self.workers.items()):
            rate = w.examples / max(now - w.started, 1e-9)
            table.add_row(
                str(worker),
                w.scenario,
                str(w.seed),
                str(w.examples),
                f"{rate:.1f}",
                str(w.findings),
                "done" if w.done else w.shrinking or "searching",
            )
        elapsed = self.elapsed
        examples = count(self.examples, "example")
        table.caption = f"{elapsed:.0f} s · {examples} · {self._tally()} · {self._lost()}"
        return table

    @contextmanager
    def _display(self) -> Iterator[events.Handler]:
        """The campaign's display, a handler of the events it hears: the live table on a
        terminal, else a heartbeat line every ``_HEARTBEAT_S``; nothing when quiet."""
        if self.quiet:
            yield events.ignore
            return
        if self.console.is_terminal:
            redraw = events.Throttle(0.25)
            with Live(self._progress_table(), console=self.console, refresh_per_second=4) as live:

                def update(event: events.Event) -> None:
                    if redraw.due():
                        live.update(self._progress_table())

                yield update
            return
        beat = events.Throttle(_HEARTBEAT_S)
        beat.restart()  # the first line after one period, not at once

        def heartbeat(event: events.Event) -> None:
            if not beat.due():
                return
            elapsed = self.elapsed
            shrinks = "".join(
                f", worker {n} {w.shrinking}"
                for n, w in sorted(self.workers.items())
                if w.shrinking and not w.done
            )
            self.console.print(
                f"fuzz: {elapsed:.0f} s, {count(self.examples, 'example')} "
                f"({self.examples / max(elapsed, 1e-9):.0f}/s), "
                f"{count(len(self.workers), 'worker')}, "
                f"{self._tally()}{shrinks}"
            )

        yield heartbeat

    def summary(self) -> None:
        elapsed = self.elapsed
        plan = self.plan
        self.console.print(
            f"fuzzed {plan.sut} in {', '.join(plan.scenarios)}: {count(self.examples, 'example')} "
            f"in {elapsed:.1f} s ({self.examples / max(elapsed, 1e-9):.0f}/s) on "
            f"{count(plan.workers, 'worker')}, base seed {plan.seed}: "
            f"{self._tally()}, {self._lost()}" + (" (interrupted)" if self.interrupted else "")
        )
        if self.groups:
            table = Table(
                box=box.SIMPLE_HEAD,
                title=f"{self._tally()} (invariant and the scheduler's calls where it broke)",
                title_justify="left",
            )
            # The invariant stays whole on a narrow terminal; the calls wrap between names.
            table.add_column("invariant", no_wrap=True)
            table.add_column("scheduler's calls", overflow="fold")
            for column in ("found", "workers", "actions"):
                table.add_column(column, justify="right", no_wrap=True)
            # The shortest report of each defect. Its name ends in the hash of its trace:
            # enough to find its files.
            table.add_column("shortest *_HASH.md", no_wrap=True)
            for g in self.groups.values():
                table.add_row(
                    g.invariant,
                    ", ".join(g.move) or "none",
                    str(g.count),
                    ",".join(map(str, g.workers)),
                    str(len(g.shortest.actions)),
                    g.report.stem.rsplit("_", 1)[-1] + ("" if g.shortest.shrunk else " unshrunk"),
                )
            self.console.print(table)
            self.console.print(
                f"{_plural(len(self._written), 'report')}, every finding's, in {plan.report_dir}"
            )
        elif not self.crashes and not self.interrupted:
            self.console.print("no finding: every example held")
        for worker, state in sorted(self.workers.items()):
            if state.ended:
                self.console.print(
                    f"worker {worker} was still busy {STOP_GRACE_S:.0f} s after the campaign "
                    "stopped, and was ended (a long shrink or a hung scheduler)",
                    soft_wrap=True,
                )
        for crash in self.crashes:
            self.console.print(f"crash: {crash}", soft_wrap=True)
        pending = sum(w.pending for w in self.workers.values())
        if pending:
            self.console.print(
                f"{pending} database saves were not written to {plan.database}: they are kept "
                f"in {plan.report_dir / 'database'}, and the reports in {plan.report_dir}"
            )

    def _tally(self) -> str:
        return f"{_plural(self.findings, 'finding')} of {_plural(len(self.groups), 'defect')}"

    def _lost(self) -> str:
        """The workers that died, or were ended busy: neither may read as held."""
        ended = sum(w.ended for w in self.workers.values())
        return f"{_plural(len(self.crashes) + ended, 'worker lost', 'workers lost')}"

    @property
    def found(self) -> bool:
        return bool(self.groups or self.crashes or any(w.ended for w in self.workers.values()))


def _plural(n: int, noun: str, nouns: str = "") -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {nouns or noun + 's'}"


def _length(case: reports.Case) -> str:
    return _plural(len(case.actions), "action") + ("" if case.shrunk else ", unshrunk")


def _shorter(case: reports.Case, than: reports.Case) -> bool:
    """Fewer actions; at equal length, shrunk beats unshrunk."""
    return (len(case.actions), not case.shrunk) < (len(than.actions), not than.shrunk)
