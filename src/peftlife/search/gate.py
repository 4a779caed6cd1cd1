"""The mutant gate: the reference holds, and search alone catches every known defect.

The gate is one search of the reference in each shipped scenario, which must
hold, and one hunt of each mutant of the catalogue through the shipped
scenarios taking turns (``hunted_scenarios``), which must fail on an invariant
its catalogue entry accepts. ``plan`` lists those runs, ``run_gate`` runs them (on worker
processes when asked) into a ``Gate`` of rows, and ``GateRow.passed`` is the
pass rule: the one the command, its JSON, the report directory's index and the
tests all read. ``write`` saves a gate as ``peftlife mutants --json`` writes it;
``read`` reads such a file back.
"""

from __future__ import annotations

import contextlib
import enum
import json
import multiprocessing
import queue
import signal
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import attrs
import hypothesis

from peftlife.search import events, profiles, scenarios
from peftlife.search.failure import minimized
from peftlife.search.hunt import hunt, search
from peftlife.sut.mutants import CATALOGUE, Mutant

# The columns of the gate's table, wherever it is shown: terminal, step summary, index page.
HEADER = ("mutant", "caught", "scenario", "invariant", "examples", "steps", "seconds")
HELD = "the reference held and every mutant was caught"
FAILED = "the gate FAILED"


class GateFileError(ValueError):
    """A file that is not a gate table this version of peftlife writes."""


class Kind(enum.Enum):
    """What a row of the gate ran."""

    # The reference in one shipped scenario: it must hold.
    REFERENCE = "reference"
    # One mutant hunted through every shipped scenario: it must be caught, on an
    # invariant its catalogue entry accepts.
    MUTANT = "mutant"


@attrs.frozen
class GateRow:
    """How one run of the gate ended."""

    kind: Kind
    # The mutant's name, or ``reference @ SCENARIO``: unique within a gate.
    name: str
    # The search met a failure.
    caught: bool
    # Where it was caught; the reference's scenario; "-" for a mutant never caught.
    scenario: str
    # The invariant that failed, or "-".
    invariant: str
    # The reference held; a mutant was caught on an invariant its entry accepts.
    acceptable: bool
    # Examples searched: in all for the reference, to the failure for a mutant.
    examples: int
    # Actions of the shrunk failure (None when not shrunk).
    shrunk_steps: int | None
    seconds: float

    @property
    def passed(self) -> bool:
        """The gate's rule for one row: the reference held, a mutant was rightly caught."""
        if self.kind is Kind.REFERENCE:
            return self.acceptable
        return self.caught and self.acceptable

    @property
    def verdict(self) -> str:
        """The table's "caught" column."""
        if self.kind is Kind.REFERENCE:
            return "held" if self.passed else "FAILED"
        if not self.caught:
            return "NO"
        return "yes" if self.acceptable else "yes, unexpected invariant"

    @property
    def failure(self) -> str | None:
        """Why this row fails the gate, in one line; None when it passed."""
        if self.passed:
            return None
        if self.kind is Kind.REFERENCE:
            return f"the reference failed {self.invariant} in {self.scenario}"
        return f"{self.name}: " + (f"caught by {self.invariant}" if self.caught else "not caught")

    def cells(self) -> list[str]:
        """The row under ``HEADER``; the reference's scenario has a column of its own."""
        steps = "-" if self.shrunk_steps is None else str(self.shrunk_steps)
        label = "reference" if self.kind is Kind.REFERENCE else self.name
        return [
            label,
            self.verdict,
            self.scenario,
            self.invariant,
            str(self.examples),
            steps,
            f"{self.seconds:.1f}",
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "mutant": self.name,
            "kind": self.kind.value,
            "caught": self.caught,
            "scenario": self.scenario,
            "invariant": self.invariant,
            "acceptable": self.acceptable,
            "examples": self.examples,
            "shrunk_steps": self.shrunk_steps,
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, data: object) -> GateRow:
        """A row as ``to_json`` wrote it; ``GateFileError`` says what is missing or wrong."""
        if not isinstance(data, dict):
            raise GateFileError(f"a row is {type(data).__name__}, not an object")
        kinds = {k.value: k for k in Kind}
        if data.get("kind") not in kinds:
            raise GateFileError(
                f"row {data.get('mutant')!r} has no kind ({' or '.join(kinds)}); "
                "run 'peftlife mutants --json' again"
            )

        def field(key: str, types: tuple[type, ...]) -> Any:
            value = data.get(key)
            # bool is an int to isinstance: a count or a time that is a bool is still wrong.
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise GateFileError(f"row {data.get('mutant')!r} has no valid {key!r}")
            return value

        return cls(
            kinds[data["kind"]],
            field("mutant", (str,)),
            field("caught", (bool,)),
            field("scenario", (str,)),
            field("invariant", (str,)),
            field("acceptable", (bool,)),
            field("examples", (int,)),
            field("shrunk_steps", (int, type(None))),
            float(field("seconds", (int, float))),
        )


@attrs.frozen
class Gate:
    """The rows of one gate, in the order they were planned."""

    rows: tuple[GateRow, ...]

    @property
    def ok(self) -> bool:
        return all(row.passed for row in self.rows)

    @property
    def verdict(self) -> str:
        return HELD if self.ok else FAILED

    @property
    def searched(self) -> list[scenarios.Scenario]:
        """The scenarios its rows name, read by name: the gate searches only shipped ones,
        and a row read back from its JSON has nothing else ("-": a mutant not caught)."""
        shipped = scenarios.shipped_names()
        named = dict.fromkeys(row.scenario for row in self.rows)
        return [scenarios.load(name) for name in named if name in shipped]

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "rows": [row.to_json() for row in self.rows]}

    @classmethod
    def from_json(cls, data: object) -> Gate:
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise GateFileError("no 'rows' list")
        return cls(tuple(GateRow.from_json(row) for row in data["rows"]))


def write(gate: Gate, path: Path) -> None:
    """Write the gate's table as JSON, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(gate.to_json(), indent=1) + "\n", "utf-8")


def read(path: Path) -> Gate:
    """A gate ``write`` saved; ``GateFileError`` if the file is not one.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "mutants.json"
    >>> row = GateRow(Kind.MUTANT, "m", False, "-", "-", False, 40, None, 1.0)
    >>> write(Gate((row,)), path)
    >>> read(path).rows[0].failure
    'm: not caught'
    """
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GateFileError(f"cannot read {str(path)!r}: {err}") from err
    return Gate.from_json(data)


# ---- the runs ----


@attrs.frozen
class ReferenceRun:
    """The reference searched in one shipped scenario, unshrunk: it must hold."""

    scenario: str
    profile: str
    # The gate's seed under a random profile (None: derandomized), and whether
    # the example database is replayed (not under a seed the user gave).
    seed: int | None = None
    replay_saved: bool = True

    def run(self, emit: events.Handler = events.ignore) -> GateRow:
        searching = _settings(self.profile, self.replay_saved)
        result = search("reference", self.scenario, searching, shrink=False, seed=self.seed)
        failure = result.failure
        return GateRow(
            Kind.REFERENCE,
            f"reference @ {self.scenario}",
            failure is not None,
            self.scenario,
            "-" if failure is None else failure.invariant,
            failure is None,
            result.examples,
            None,
            round(result.seconds, 1),
        )


def hunted_scenarios(mutant: Mutant) -> list[str]:
    """The shipped scenarios the gate hunts a mutant through, in the order they take turns.

    Every one that can catch it (``scenarios.catchable``): a mutant whose trigger
    needs the overlap executor is hunted through the overlap scenarios only, since
    under the simple loop (no batch on the device, no retiring request) it
    schedules as the reference does. A mutant that is a defect only where the
    executor leaves the recompute teardown to the scheduler is hunted through
    every one: it carries that world, and every search of it runs there
    (``scenarios.for_sut``).

    >>> from peftlife.sut.mutants import BY_NAME
    >>> hunted_scenarios(BY_NAME["schedules_retiring"])[:2]
    ['overlap', 'overlap-empty']
    """
    spec = f"mutant:{mutant.name}"
    return [
        name
        for name in scenarios.shipped_names()
        if name not in mutant.not_hunted_in and scenarios.catchable(spec, [name])
    ]


@attrs.frozen
class MutantRun:
    """One mutant hunted through the shipped scenarios; what was found is shrunk if asked."""

    mutant: Mutant
    profile: str
    shrink: bool = True
    # The user's cap on each shrink (None: counts alone end it, whatever the load).
    shrink_timeout: float | None = None
    seed: int | None = None  # as ``ReferenceRun``'s
    replay_saved: bool = True

    def run(self, emit: events.Handler = events.ignore) -> GateRow:
        """Hunt the mutant; how its shrink goes is told to ``emit``, a few times a second."""
        start = time.perf_counter()
        found = hunt(
            f"mutant:{self.mutant.name}",
            _settings(self.profile, self.replay_saved),
            scenario_names=hunted_scenarios(self.mutant),
            seed=self.seed,
        )
        if found.failure is None:
            return GateRow(
                Kind.MUTANT,
                self.mutant.name,
                False,
                "-",
                "-",
                False,
                found.examples_to_find,
                None,
                _since(start),
            )
        steps = None
        if self.shrink:
            emit(events.PhaseStarted("shrinking", self.mutant.name))
            news = events.shrinking(emit, self.mutant.name, SHRINK_NEWS_EVERY)
            smaller = minimized(found.failure, timeout=self.shrink_timeout, progress=news)
            steps = len(smaller.run.actions)
        invariant = found.failure.invariant
        return GateRow(
            Kind.MUTANT,
            self.mutant.name,
            True,
            found.scenario,
            invariant,
            invariant in self.mutant.acceptable,
            found.examples_to_find,
            steps,
            _since(start),
        )


Run = ReferenceRun | MutantRun


def plan(
    profile: str,
    *,
    shrink: bool = True,
    shrink_timeout: float | None = None,
    seed: int | None = None,
    replay_saved: bool = True,
) -> tuple[Run, ...]:
    """The gate's runs: the reference in each shipped scenario, then each mutant.

    ``seed`` fixes every run's search (None: the profile's own, derandomized or
    not); ``replay_saved`` False leaves the example database unreplayed, so that a
    seed the user gave finds the same in any directory.
    """
    references = tuple(
        ReferenceRun(name, profile, seed, replay_saved) for name in scenarios.shipped_names()
    )
    return references + tuple(
        MutantRun(m, profile, shrink, shrink_timeout, seed, replay_saved) for m in CATALOGUE
    )


def run_gate(runs: Sequence[Run], *, jobs: int = 1, emit: events.Handler = events.ignore) -> Gate:
    """Run the gate, on ``jobs`` worker processes when more than one.

    ``emit`` is told ``ExamplesRan`` (runs ended, each time one ends) and each
    running shrink's ``ShrinkStep`` (its source the mutant), then ``NewsOver``
    once that shrink has nothing more to tell.
    """
    if jobs <= 1:
        rows: list[GateRow] = []
        for one in runs:
            rows.append(one.run(emit))
            emit(events.NewsOver())
            emit(events.ExamplesRan(len(rows)))
        return Gate(tuple(rows))
    return Gate(tuple(_in_processes(runs, jobs, emit)))


def _settings(profile: str, replay_saved: bool = True) -> hypothesis.settings:
    # Every run of the gate is under the profile as the command line runs it.
    searching = profiles.for_search(profiles.get(profile))
    if replay_saved:
        return searching
    generating = [p for p in searching.phases if p != hypothesis.Phase.reuse]
    return hypothesis.settings(searching, phases=generating)


def _since(start: float) -> float:
    return round(time.perf_counter() - start, 1)


# Seconds between two pieces of a run's shrink news, and how long the last one stays shown.
SHRINK_NEWS_EVERY, SHRINK_NEWS_SHOWN = 0.25, 1.0


def _ignore_ctrl_c() -> None:
    # Ctrl-C is the gate's to handle: a worker that took it would print a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _in_processes(runs: Sequence[Run], jobs: int, emit: events.Handler) -> list[GateRow]:
    """The rows of ``runs`` run on ``jobs`` processes; the events they send reach ``emit``.

    Each run is handed the ``put`` of a queue the parent reads (a manager's, whose
    proxy travels with the run to whichever worker takes it).
    """
    with multiprocessing.Manager() as manager:
        heard: queue.Queue[events.Event] = manager.Queue()
        with ProcessPoolExecutor(jobs, initializer=_ignore_ctrl_c) as pool:
            futures = [pool.submit(_run, one, heard.put) for one in runs]
            try:
                return _collect(futures, heard, emit)
            except BaseException:  # Ctrl-C: end the workers now, not after every queued run
                for process in list(getattr(pool, "_processes", {}).values()):
                    process.kill()
                pool.shutdown(wait=False, cancel_futures=True)
                raise


def _collect(
    futures: list[Future[GateRow]], heard: queue.Queue[events.Event], emit: events.Handler
) -> list[GateRow]:
    """Wait for the runs, handing on the latest shrink news; their rows in order."""
    pending, shown, showing = set(futures), events.Throttle(SHRINK_NEWS_SHOWN), False
    while pending:
        _, pending = wait(pending, timeout=SHRINK_NEWS_EVERY, return_when=FIRST_COMPLETED)
        latest = None
        with contextlib.suppress(queue.Empty):
            while True:
                latest = heard.get_nowait()
        if latest is not None:
            emit(latest)
            shown.restart()
            showing = True
        elif showing and shown.since() > SHRINK_NEWS_SHOWN:
            emit(events.NewsOver())
            showing = False
        emit(events.ExamplesRan(len(futures) - len(pending)))
    return [f.result() for f in futures]


def _run(one: Run, emit: events.Handler) -> GateRow:
    # A module-level function, so the pool can send it to a worker.
    return one.run(emit)
