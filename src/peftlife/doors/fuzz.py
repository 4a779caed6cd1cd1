"""``peftlife fuzz``: a long campaign over many workers that share one example database.

Each worker is a process that searches in slices: slice ``k`` of worker ``w``
searches scenario ``scenarios[(w + k) % len(scenarios)]`` with seed
``base + k * workers + w``, so no two slices repeat one another. The first
slice of a scenario replays the shared database (every failure any machine
saved for this SUT and scenario); later ones only generate, so a known bug
does not keep a worker from looking past it. Hypothesis saves every failure
to the database as it is found.

A campaign shrinks each defect once (its ``defect.Signature``: the invariant and
the scheduler's calls where it broke). A worker's search counts a finding of a
defect it knows, no shorter than the defect's case so far, and goes on past it
(``Hits``). Any other finding ends the slice: the worker claims it (``Claim``),
and the campaign, which holds every defect, answers whether to shrink it: yes
for a new defect, or for one whose hit starts shorter than its best so far;
otherwise it is counted, not shrunk nor written. A granted worker shrinks and
sends the shrunk case; the campaign owns the clock, and writes the unshrunk
finding of a worker it has to end while it is still shrinking. One report per
defect, its shortest: a shorter one replaces it. A report that cannot be written
costs a line saying so, never the campaign: its story is told in the summary,
and summary.json and the JUnit file are written still.

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
from peftlife.search import defect, events, profiles, shrink
from peftlife.search.database import ResilientDatabase, open_database
from peftlife.search.failure import LifecycleFailure, ShrinkInterrupted, minimized
from peftlife.search.hunt import search
from peftlife.search.scenarios import Scenario
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
    # As the front door read them: each worker searches these values, read once.
    scenarios: tuple[Scenario, ...]
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

    def slice_of(self, worker: int, k: int) -> tuple[Scenario, int]:
        """The scenario and seed of a worker's k-th slice.

        >>> from peftlife.search.scenarios import load
        >>> two = (load("default"), load("overlap"))
        >>> scenario, seed = Plan("reference", two, 2, "dev", 100, Path(".")).slice_of(1, 1)
        >>> scenario.name, seed
        ('default', 103)
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


# ---- what a worker and the campaign say to each other, besides ``events`` ----


@attrs.frozen
class Claim:
    """A worker's finding that its own knowledge did not search past: may it shrink it?

    The finding comes as the search met it (``found``: unshrunk, its report's
    replay), so the campaign holds it even if the worker never says more.
    """

    found: Found
    # The campaign's clock at the hit is when the claim arrives; these say where.
    scenario: str
    seed: int
    source: int


@attrs.frozen
class Answer:
    """The campaign's answer to a claim: shrink it or not, and the defect's best so far."""

    shrink: bool
    best: int


@attrs.frozen
class Hits:
    """Findings of defects a worker's slice knew, and searched past: counted, by signature."""

    hits: dict[defect.Signature, int]
    source: int


# ---- the worker process ----


def _worker(worker: int, first_slice: int, plan: Plan, out: Any, inbox: Any, stop: Any) -> None:
    # A broken pipe means the campaign is gone: nobody is left to tell.
    with contextlib.suppress(BrokenPipeError, EOFError):
        _search_slices(worker, first_slice, plan, out, inbox, stop)


def _answer(inbox: Any, stop: Any) -> Answer | None:
    """The campaign's answer to this worker's claim; None if it stops first."""
    while not inbox.poll(0.1):
        if stop.is_set():
            return None
    answer = inbox.recv()
    assert isinstance(answer, Answer), answer
    return answer


def _search_slices(
    worker: int, first_slice: int, plan: Plan, out: Any, inbox: Any, stop: Any
) -> None:
    """Search slice after slice until the budget is spent or the campaign says stop.

    ``out`` is this worker's end of a pipe: a send is written before it returns,
    so what a worker announced is known even if the scheduler then ends the
    process, or the campaign ends it in the middle of a shrink. ``inbox`` brings
    the campaign's answer to each claim.
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
    examples, k, replayed = 0, first_slice, set[Scenario]()
    base = profiles.get(plan.profile)
    # The SUT, resolved once by this worker (a process of its own) for all its slices.
    subject: sut.Resolved | None = None
    # Each defect the campaign told of, and its best case's length: searched past.
    known: dict[defect.Signature, int] = {}
    while not stop.is_set():
        if budget is not None and examples >= budget:
            break
        scenario, seed = plan.slice_of(worker, k)
        # By what loads it again: a died worker's line gives it to rerun the slice.
        tell(events.SliceStarted(k, scenario.spec, seed, worker))
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
            result = search(
                subject, scenario, settings, seed=seed, progress=tick, shrink=False, known=known
            )
            examples += result.examples
            tell(events.ExamplesRan(examples, source=worker))
            if result.hits:
                out.send(Hits(dict(result.hits), worker))
            if (failure := result.failure) is not None:
                # The claim carries the finding unshrunk: the campaign writes it, rather
                # than nothing, should the shrink outlast the campaign.
                found = Found.of(failure, seed, plan.profile, subject, size, result.signature)
                out.send(Claim(found, scenario.name, seed, worker))
                answer = _answer(inbox, stop)
                if answer is None:
                    break
                known[found.signature] = answer.best
                if answer.shrink:
                    tell(events.PhaseStarted("shrinking", worker))
                    news = events.shrinking(tell, worker, SHRINK_NEWS_EVERY)
                    shrunk = minimized(
                        failure, timeout=plan.shrink_timeout, progress=news, subject=subject
                    )
                    again = Found.of(shrunk, seed, plan.profile, subject, size, found.signature)
                    tell(again.event(worker))
                    known[found.signature] = min(answer.best, len(shrunk.run.actions))
        except ShrinkInterrupted as stop:  # Ctrl-C reached the shrink: its case so far
            kept = Found.of(stop.failure, seed, plan.profile, subject, size, found.signature)
            tell(kept.event(worker))
            break
        except KeyboardInterrupt:
            break
        except Exception:  # a harness bug: report it, and go on with the next slice
            tell(events.HarnessError(scenario.spec, seed, traceback.format_exc(), worker))
        k += 1
    pending = len(db.pending) if isinstance(db, ResilientDatabase) else 0
    tell(events.RunDone(examples, pending, worker))


# Seconds between two pieces of a worker's shrink news.
SHRINK_NEWS_EVERY = 0.25


@attrs.frozen
class Found:
    """A finding as a worker sends it: its case, the case's replay, and its defect.

    The worker replays it, so the campaign never runs the scheduler's code.
    """

    case: reports.Case
    outcome: reports.Outcome
    # Its defect, as the search met it: a shrunk case stays its unshrunk one's.
    signature: defect.Signature
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
        signature: defect.Signature | None = None,
    ) -> Found:
        """``signature`` as the search read it; else (the scheduler took the search's
        process down before it could) from this replay."""
        case = reports.Case.from_failure(failure, seed=seed, profile=profile, shrunk=failure.shrunk)
        outcome = reports.replay(case, subject)
        sig = signature or defect.signature(outcome)
        return cls(case, outcome, sig, budget, failure.replayed)

    def event(self, worker: int) -> events.Found:
        """The finding as the worker tells it, this record its detail."""
        return events.Found(self.signature.invariant, self.case.shrunk, self, worker)


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
    # The campaign's end of the pipe that answers this worker's claims.
    answers: Any = None


@attrs.frozen
class Seen:
    """Where and when a defect was first met: the campaign's clock and examples then,
    the worker, and its slice's scenario and seed."""

    seconds: float
    examples: int
    worker: int
    scenario: str
    seed: int

    def describe(self) -> str:
        """Where and when, in a few words.

        >>> Seen(12.3, 480, 1, "kv-pressure", 7).describe()
        '12 s, kv-pressure, worker 1'
        """
        return f"{self.seconds:.0f} s, {self.scenario}, worker {self.worker}"


@attrs.define
class Group:
    """The findings of one defect: how many, who found them, where first, its shortest case."""

    # The defect's: its shrunk case's, once recorded (until then, the hit's).
    signature: defect.Signature
    first: Seen
    # The shortest case so far (the first claim's, unshrunk, until one is recorded).
    shortest: reports.Case
    # Its replay, for its story.
    outcome: reports.Outcome
    workers: list[int]
    # How the shortest finding was met: its slice's budget, or replaying the database.
    budget: int | None = None
    replayed: bool = False
    count: int = 1
    # The shortest length known, a shrink still running included: a later hit is shrunk
    # only if it starts shorter.
    best: int = 0
    # The shortest case's report files, once written; why they could not be, if not.
    paths: dict[str, Path] = attrs.Factory(dict)
    unwritten: str = ""
    recorded: bool = False

    @property
    def invariant(self) -> str:
        return self.signature.invariant

    @property
    def move(self) -> tuple[str, ...]:
        return self.signature.calls

    @property
    def report(self) -> Path | None:
        """The shortest finding's Markdown report, if it was written."""
        return self.paths.get("markdown")


class Campaign:
    """The parent of the workers: starts them, listens, writes each defect's report."""

    def __init__(self, plan: Plan, console: Console, quiet: bool = False) -> None:
        self.plan = plan
        self.console = console
        # Quiet: no live table, heartbeat or finding lines; warnings and the summary stay.
        self.quiet = quiet
        self.workers: dict[int, WorkerState] = {}
        # Each defect's group by every signature a hit of it was met with, and by the
        # signature of its shrunk case, which names the defect.
        self.groups: dict[defect.Signature, Group] = {}
        self.defects: dict[defect.Signature, Group] = {}
        # Findings in all, each a hit of one defect: the claims and the hits searched past.
        self.findings = 0
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
        inbox, answers = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(
            target=_worker,
            args=(worker, first_slice, self.plan, writer, inbox, self._stop),
            name=f"peftlife-fuzz-{worker}",
            daemon=True,
        )
        process.start()
        writer.close()  # the worker holds the only writer: its exit reads as end of file
        inbox.close()
        self.workers[worker] = WorkerState(
            process, reader, slice=first_slice, restarts=restarts, answers=answers
        )

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

    def _handle(self, event: events.Event | Claim | Hits) -> None:
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
            if isinstance(event, events.ShrinkStep) and state.unshrunk is not None:
                group = self.groups[state.unshrunk.signature]
                group.best = min(group.best, event.best_actions)
        elif isinstance(event, events.ExamplesRan):
            state.examples = event.done
        elif isinstance(event, Claim):
            self._claim(worker, event)
        elif isinstance(event, Hits):
            for signature, hits in event.hits.items():
                self._count(self.groups[signature], worker, hits)
        elif isinstance(event, events.Found):
            found = event.detail
            assert isinstance(found, Found)
            state.unshrunk = None
            self._record(worker, found)
        elif isinstance(event, events.Warned):
            self._warn(event.text)
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

    def _count(self, group: Group, worker: int, hits: int = 1) -> None:
        self.findings += hits
        self.workers[worker].findings += hits
        group.count += hits
        if worker not in group.workers:
            group.workers.append(worker)

    def _claim(self, worker: int, claim: Claim) -> None:
        """Answer a worker's claim: shrink a new defect, or a hit shorter than its best."""
        found = claim.found
        length = len(found.case.actions)
        group = self.groups.get(found.signature)
        new = group is None
        if group is None:
            first = Seen(round(self.elapsed, 1), self.examples, worker, claim.scenario, claim.seed)
            group = Group(found.signature, first, found.case, found.outcome, [], count=0)
            group.budget, group.replayed, group.best = found.budget, found.replayed, length
            self.groups[found.signature] = group
        self._count(group, worker)
        shrink = new or length < group.best
        if shrink:
            group.best = length
            self.workers[worker].unshrunk = found
        with contextlib.suppress(BrokenPipeError, OSError):  # a worker gone: nobody to answer
            self.workers[worker].answers.send(Answer(shrink, group.best))

    def _record(self, worker: int, found: Found) -> None:
        """Keep a defect's finding if it is its shortest yet, and write its reports.

        One report per defect: a shorter case's replaces the one before. A report
        that cannot be written costs one line, and its story is told in the summary.
        """
        group = self.groups[found.signature]
        if not group.recorded:
            # The defect is its shrunk case's signature, which another hit's may share.
            named = defect.signature(found.outcome)
            if (other := self.defects.get(named)) is not None:
                self._merge(group, other)
                group = other
            else:
                group.signature = named
                self.defects[named] = group
        case = found.case
        if group.recorded and not _shorter(case, group.shortest):
            return
        first = not group.recorded
        group.recorded = True
        group.shortest, group.outcome = case, found.outcome
        group.budget, group.replayed = found.budget, found.replayed
        group.best = min(group.best, len(case.actions))
        before = group.paths
        try:
            group.paths, group.unwritten = (
                reports.write(case, found.outcome, self.plan.report_dir),
                "",
            )
        except OSError as err:
            group.paths, group.unwritten = (
                {},
                f"{err.strerror}: {err.filename or self.plan.report_dir}",
            )
            self._warn(
                f"could not write the report of {group.signature} to "
                f"{str(self.plan.report_dir)!r} ({group.unwritten}); its story is in the summary"
            )
        else:
            self._replaced(before, group.paths)
        if first and not self.quiet:
            where = group.report or "its report not written"
            self.console.print(
                f"finding: {group.invariant} in {case.scenario} (worker {worker}, "
                f"{_length(case)}) → {where}",
                soft_wrap=True,
            )

    def _merge(self, group: Group, into: Group) -> None:
        """A hit met with another signature turned out, shrunk, to be a defect held already:
        its count, workers and first sighting go to that defect's group."""
        into.count += group.count
        into.workers += [w for w in group.workers if w not in into.workers]
        into.first = min(into.first, group.first, key=lambda seen: seen.seconds)
        into.best = min(into.best, group.best)
        for met, held in self.groups.items():
            if held is group:
                self.groups[met] = into

    @property
    def defect_groups(self) -> list[Group]:
        """Each defect's group once, in the order the campaign first met them."""
        unique = {id(g): g for g in self.groups.values()}
        return sorted(unique.values(), key=lambda g: g.first.seconds)

    def _replaced(self, before: dict[str, Path], now: dict[str, Path]) -> None:
        """Remove a defect's earlier report, now that a shorter one is written."""
        gone = [p for kind, p in before.items() if kind != "index" and p not in now.values()]
        for path in gone:
            with contextlib.suppress(OSError):
                path.unlink()
        if gone:
            with contextlib.suppress(OSError):
                reports.write_index(self.plan.report_dir)

    def _warn(self, text: str) -> None:
        """A line the campaign says once, kept for summary.json and the step summary."""
        if text not in self.warnings:
            self.warnings.append(text)
            self.console.print(f"warning: {text}", soft_wrap=True)

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
            f"fuzzed {plan.sut} in {', '.join(s.name for s in plan.scenarios)}: "
            f"{count(self.examples, 'example')} "
            f"in {elapsed:.1f} s ({self.examples / max(elapsed, 1e-9):.0f}/s) on "
            f"{count(plan.workers, 'worker')}, base seed {plan.seed}: "
            f"{self._tally()}, {self._lost()}" + (" (interrupted)" if self.interrupted else "")
        )
        groups = self.defect_groups
        if groups:
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
            table.add_column("first seen", overflow="fold")
            # The report of each defect, its shortest case's. Its name ends in the hash of
            # its trace: enough to find its files.
            table.add_column("report *_HASH.md", no_wrap=True)
            for g in groups:
                hashed = reports.trace_hash(g.shortest) if g.report is None else g.report.stem
                table.add_row(
                    g.invariant,
                    ", ".join(g.move) or "none",
                    str(g.count),
                    ",".join(map(str, g.workers)),
                    str(len(g.shortest.actions)),
                    g.first.describe(),
                    hashed.rsplit("_", 1)[-1]
                    + ("" if g.shortest.shrunk else " unshrunk")
                    + ("" if g.report else " not written"),
                )
            self.console.print(table)
            written = sum(g.report is not None for g in groups)
            self.console.print(
                f"{_plural(written, 'report')}, one per defect, in {plan.report_dir}"
                + (f"; {len(groups) - written} not written" if written < len(groups) else "")
            )
            # A report that could not be written loses nothing: its story is told here.
            for g in groups:
                if g.report is None:
                    self.console.print(
                        f"{g.signature}, its report not written ({g.unwritten}):", soft_wrap=True
                    )
                    reports.render_terminal(g.shortest, g.outcome, self.console)
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
        return (
            f"{_plural(self.findings, 'finding')} of {_plural(len(self.defect_groups), 'defect')}"
        )

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
