"""Two schedulers on the same traces: the first iteration where they behave differently.

A refactor of a scheduler should not change which requests run, pause or
resume, nor which KV and PEFT calls it makes. ``peftlife diff A B`` checks that
the way ``check`` checks one scheduler: the machine generates traces (the same
rules, the same worlds), and every action goes to two worlds at once, one
driven by A and one by B. After each executor iteration (the drain's
included) the two are compared on what the iteration observably did:

* the scheduler's four output lists. ``context`` and ``generation`` are
  compared as sequences: the protocol (docs/protocol.md), like upstream, sorts the batch (adapter,
  then request id) and the reference does so. ``paused`` and
  ``recompute_paused`` are compared as sets: the protocol leaves their order open
  and the invariants read all four as sets. A context entry carries its chunk;
* the scheduler's own KV and PEFT calls (``caller == "scheduler"``), in order,
  with their arguments and results, and the request fields it wrote;
* each request's state, prefill and token progress, KV residency in each pool
  and adapter ownership; a request that ended says how;
* the engine's own errors (a registration or ``ensure_batch`` that raised),
  and whether the scheduler gave a readable output at all.

``ignore`` drops parts of that: ``calls`` compares only the lists, states and
errors (not the calls, nor the fields written); ``order`` compares every list
as a set and the calls as a multiset.

A divergence is not a verdict on either side. Each side is also checked
against the invariants on every iteration up to the divergence; an example
goes on past a broken invariant (the worlds stay comparable), and the first
violations of each side are kept for the report.

The search is ``peftlife.search.hunt``'s, with ``Paired`` mixed into the
machine; a divergence is shrunk by ``peftlife.search.shrink`` with "still
diverges" as its predicate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable
from typing import Any, ClassVar, Literal

import attrs
import hypothesis

from peftlife import sut
from peftlife.checker import drain, registry
from peftlife.checker.invariants import Violation, owned
from peftlife.search import outside, scenarios, shrink
from peftlife.search.failure import Finding, Run
from peftlife.search.hunt import SearchResult, died_result, hunt, search
from peftlife.search.machine import LifecycleMachine, SearchContext
from peftlife.search.trace import Action, apply
from peftlife.world.config import EngineConfig
from peftlife.world.engine import DEFAULT_SCHEDULE_DEADLINE, Engine
from peftlife.world.fields import QUIET_AT_DEFAULT
from peftlife.world.ledger import Call, given
from peftlife.world.protocol import SchedulerFactory
from peftlife.world.snapshot import Snapshot, in_flight_line

IGNORABLE = ("calls", "order")
Ignore = Literal["calls", "order"]

# The output lists, as the world names them, with how they are compared.
LISTS = ("context", "generation", "paused", "recompute_paused")
ORDERED_LISTS = frozenset({"context", "generation"})
# A request's fields, in the order every rendering shows them.
REQUEST_FIELDS = ("listed", "state", "prefill", "tokens", "target", "draft", "owns", "calls")
# The fields that say what became of a request (always compared); "listed" and
# "calls" are its share of the lists and of the calls, compared through them.
STATE_FIELDS = ("state", "prefill", "tokens", "target", "draft", "owns")
SHARE_FIELDS = ("listed", "calls")


# ---- what one iteration observably does ----


@attrs.frozen
class RequestRow:
    """One request after an iteration, every field as text (``-`` where it has none)."""

    request_id: int
    adapter: int | None
    listed: str = "-"
    state: str = "-"
    prefill: str = "-"
    tokens: str = "-"
    target: str = "-"
    draft: str = "-"
    owns: str = "-"
    calls: tuple[str, ...] = ()

    def field(self, name: str) -> str:
        value = getattr(self, name)
        return ("; ".join(value) or "-") if isinstance(value, tuple) else str(value)


@attrs.frozen
class Observation:
    """What one executor iteration observably did in one world."""

    iteration: int
    # The four lists as text, in the world's order; None when the scheduler
    # gave no readable output (``fault`` says why; ``fault_kind`` is what is compared:
    # the kind and the exception's type, not a message that names files).
    lists: tuple[tuple[str, tuple[str, ...]], ...] | None
    fault: str
    # The scheduler's KV and PEFT calls, in order, as (request id, text).
    calls: tuple[tuple[int | None, str], ...]
    writes: tuple[str, ...]
    errors: tuple[str, ...]
    requests: tuple[RequestRow, ...]
    fault_kind: str = ""
    # Under the overlap executor, the batches read back and launched (the story's
    # in-flight line without its label): shown, not compared (they follow from the
    # lists and the calls, which are).
    in_flight: str = ""

    def request(self, request_id: int) -> RequestRow:
        for row in self.requests:
            if row.request_id == request_id:
                return row
        return RequestRow(request_id, None)

    def listed(self, name: str) -> tuple[str, ...]:
        return dict(self.lists or ()).get(name, ())

    @property
    def output(self) -> str:
        """The lists as one line, as the stories print them."""
        if self.lists is None:
            return f"no readable output ({self.fault})" if self.fault else "no readable output"
        parts = [f"{name.replace('_', ' ')} [{', '.join(items)}]" for name, items in self.lists]
        shown = [p for p, (_, items) in zip(parts, self.lists, strict=True) if items]
        return "; ".join(shown) or "empty"

    @property
    def call_texts(self) -> tuple[str, ...]:
        return tuple(text for _, text in self.calls)


_WHY = {
    "failed_grow": "injected grow failure",
    "refused_resume": "injected resume refusal",
    "no_device_room": "no device room",
}
_SCHEDULER_FAULTS = ("scheduler_raised", "scheduler_hung", "malformed_output")


def call_text(call: Call) -> str:
    """A scheduler call as text: pool, method, request, arguments and result.

    >>> from peftlife.world.ledger import Args
    >>> call_text(Call(1, "scheduler", "peft", "mark_request_done", 3,
    ...                args=Args(task_id=1, pause=True)))
    'mark_request_done(3, pause=True)'
    """
    rid = "" if call.request_id is None else str(call.request_id)
    if call.component == "peft":
        given_args = given(call.args).items()
        args = "".join(f", {k}={v}" for k, v in given_args if k != "task_id")
        result = "" if call.result in (None, "ok", True) else f" → {call.result}"
        return f"{call.method}({rid}{args}){result}"
    pool = "" if call.component == "target" else f"{call.component} "
    tokens = call.facts.num_tokens
    args = "" if tokens is None else f", {tokens}"
    why = _WHY.get(str(call.facts.fault), "no room")
    result = f" → failed ({why})" if call.result is False else ""
    return f"{pool}{call.method}({rid}{args}){result}"


def observe(s: Snapshot) -> Observation:
    """The observable part of one iteration's snapshot."""
    step = s.step
    out = step.output if step else None
    faults = [e for e in (step.errors if step else ()) if e.kind in _SCHEDULER_FAULTS]
    fault = faults[0].message if faults else ""
    fault_kind = f"{faults[0].kind} {faults[0].exception}".strip() if faults else ""
    lists: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    listed: dict[int, str] = {}
    if out is not None:
        items: dict[str, list[str]] = {name: [] for name in LISTS}
        for v in out.listed:
            text = str(v.request_id)
            where = v.output_list.replace("_", " ")
            if v.output_list == "context" and v.chunk_size != v.context_remaining:
                chunk = f"chunk {v.chunk_size} of {v.context_remaining}"
                text, where = f"{text} ({chunk})", f"{where} ({chunk})"
            items[v.output_list].append(text)
            listed[v.request_id] = where
        lists = tuple((name, tuple(items[name])) for name in LISTS)
    calls = tuple(
        (c.request_id, call_text(c))
        for c in (step.calls if step else ())
        if c.caller == "scheduler"
    )
    by_request: dict[int, list[str]] = {}
    for rid, text in calls:
        if rid is not None:
            by_request.setdefault(rid, []).append(text)
    adapters = {a.task_id: a for a in s.adapters}
    rows = {
        v.request_id: RequestRow(
            v.request_id,
            v.lora_task_id,
            listed=listed.get(v.request_id, "-"),
            state=v.state.name,
            prefill=f"{v.position}/{v.context_len}",
            tokens=f"{v.num_generated}/{v.max_new_tokens}",
            target=v.target.residency.name,
            draft="-" if v.draft is None else v.draft.residency.name,
            owns="-" if v.lora_task_id is None else owned(v, adapters),
            calls=tuple(by_request.get(v.request_id, ())),
        )
        for v in s.requests
    }
    for rid, outcome in s.ended:
        rows[rid] = RequestRow(
            rid,
            None,
            listed=listed.get(rid, "-"),
            state=outcome,
            calls=tuple(by_request.get(rid, ())),
        )
    for rid in (set(listed) | set(by_request)) - set(rows):
        rows[rid] = RequestRow(
            rid, None, listed=listed.get(rid, "-"), calls=tuple(by_request.get(rid, ()))
        )
    writes = step.writes if step else ()
    errors = step.errors if step else ()
    return Observation(
        iteration=s.iteration,
        lists=lists,
        fault=fault,
        fault_kind=fault_kind,
        calls=calls,
        writes=tuple(
            sorted(f"request {w.request_id} {w.field} {w.before}→{w.after}" for w in writes)
        ),
        errors=tuple(
            sorted(
                f"{e.kind}({'' if e.request_id is None else e.request_id}) {e.exception}".strip()
                for e in errors
                if e.kind not in _SCHEDULER_FAULTS
            )
        ),
        requests=tuple(rows[rid] for rid in sorted(rows)),
        in_flight=(in_flight_line(s) or "").removeprefix("in flight: "),
    )


# ---- where two iterations differ ----

CellKind = Literal["iteration", "output", "list", "calls", "writes", "errors", "request"]
# The kinds that are about the scheduler's output: a list, or whether there was one.
OUTPUT_KINDS: frozenset[CellKind] = frozenset({"iteration", "output", "list"})


@attrs.frozen
class Cell:
    """One place where two observations of an iteration differ.

    ``kind`` is the part: ``iteration`` (one side ran no such iteration: its drain
    had ended), ``output`` (one side gave no readable output, or another fault),
    ``list`` (the output list ``name``), ``calls``, ``writes``, ``errors``, or
    ``request`` (the field ``name`` of request ``request_id``).

    >>> str(Cell("request", "owns", 2)), str(Cell("list", "recompute_paused"))
    ('request 2 owns', 'recompute_paused')
    """

    kind: CellKind
    # Quiet at their defaults: a report writes ``{"kind": "calls"}`` for an iteration-wide cell.
    name: str = attrs.field(default="", metadata={QUIET_AT_DEFAULT: True})
    request_id: int | None = attrs.field(default=None, metadata={QUIET_AT_DEFAULT: True})

    @property
    def decisive(self) -> bool:
        """Whether this cell alone makes a divergence: a request's ``listed`` and
        ``calls`` only show where a list or the calls differ, which are cells too."""
        return not (self.kind == "request" and self.name in SHARE_FIELDS)

    @property
    def about_output(self) -> bool:
        """Whether the cell is the scheduler's output (a list, or whether it gave one)."""
        return self.kind in OUTPUT_KINDS

    def __str__(self) -> str:
        if self.kind == "request":
            return f"request {self.request_id} {self.name}"
        return self.name if self.kind == "list" else self.kind


def _same(a: Iterable[str], b: Iterable[str], ordered: bool) -> bool:
    return tuple(a) == tuple(b) if ordered else Counter(a) == Counter(b)


def differences(
    a: Observation | None, b: Observation | None, ignore: Collection[str] = ()
) -> tuple[Cell, ...]:
    """The cells where two observations of one iteration differ, none if they agree."""
    if a is None or b is None:
        return () if a is b else (Cell("iteration"),)
    order = "order" not in ignore
    calls = "calls" not in ignore
    cells: list[Cell] = []
    if (a.lists is None) != (b.lists is None) or a.fault_kind != b.fault_kind:
        cells.append(Cell("output"))
    for name in LISTS:
        if not _same(a.listed(name), b.listed(name), order and name in ORDERED_LISTS):
            cells.append(Cell("list", name))
    if calls and not _same(a.call_texts, b.call_texts, order):
        cells.append(Cell("calls"))
    if calls and a.writes != b.writes:
        cells.append(Cell("writes"))
    if a.errors != b.errors:
        cells.append(Cell("errors"))
    ids = sorted({r.request_id for r in (*a.requests, *b.requests)})
    for rid in ids:
        ra, rb = a.request(rid), b.request(rid)
        shown = [*STATE_FIELDS, "listed"]
        cells += [Cell("request", f, rid) for f in shown if ra.field(f) != rb.field(f)]
        if calls and not _same(ra.calls, rb.calls, order):
            cells.append(Cell("request", "calls", rid))
    return tuple(cells)


# ---- two worlds in lockstep ----


@attrs.frozen
class Paired:
    """One iteration in both worlds: the action that ran it (None in the drain),
    what each side did (None: that side's drain had ended) and the cells that differ."""

    action_index: int | None
    a: Observation | None
    b: Observation | None
    cells: tuple[Cell, ...]

    @property
    def iteration(self) -> int:
        side = self.a or self.b
        return side.iteration if side is not None else 0

    @property
    def diverges(self) -> bool:
        return any(cell.decisive for cell in self.cells)

    def marks(self, request_id: int) -> tuple[str, ...]:
        """The fields of one request that differ."""
        return tuple(c.name for c in self.cells if c.request_id == request_id)


@attrs.frozen
class PairOutcome:
    """A trace run on two schedulers: every iteration up to the first divergence."""

    iterations: tuple[Paired, ...]
    # The first violations each side met, up to the divergence (drain included).
    violations_a: tuple[Violation, ...]
    violations_b: tuple[Violation, ...]

    @property
    def divergence(self) -> Paired | None:
        last = self.iterations[-1] if self.iterations else None
        return last if last is not None and last.diverges else None


Checker = Callable[[Snapshot], list[Violation]]


class Pair:
    """Two engines run the same actions; each iteration is compared as it happens."""

    def __init__(
        self,
        a: Engine,
        b: Engine,
        ignore: Collection[str] = (),
        check_a: Checker | None = None,
        check_b: Checker | None = None,
    ) -> None:
        self.engines = (a, b)
        self.ignore = frozenset(ignore)
        self.checks = (check_a or registry.checker(a.config), check_b or registry.checker(b.config))
        self.iterations: list[Paired] = []
        self.violations: list[tuple[Violation, ...]] = [(), ()]

    @property
    def diverged(self) -> bool:
        return bool(self.iterations) and self.iterations[-1].diverges

    def act(self, index: int, action: Action) -> bool:
        """Apply one action to both worlds; True when this iteration diverged."""
        snapshots = [apply(engine, action) for engine in self.engines]
        if snapshots[0] is None or snapshots[1] is None:
            return False
        return self._compare(index, snapshots[0], snapshots[1])

    def drain(self) -> bool:
        """Drain both worlds, then compare their iterations in order; True on a divergence."""
        results = [drain.drain(engine, checker=lambda s: []) for engine in self.engines]
        a, b = (r.snapshots for r in results)
        for k in range(max(len(a), len(b))):
            if self._compare(None, a[k] if k < len(a) else None, b[k] if k < len(b) else None):
                return True
        for side, result in enumerate(results):
            if not self.violations[side] and result.violations:
                self.violations[side] = result.violations
        return False

    def outcome(self) -> PairOutcome:
        return PairOutcome(tuple(self.iterations), *self.violations)

    def _compare(self, index: int | None, a: Snapshot | None, b: Snapshot | None) -> bool:
        observed = (None if a is None else observe(a), None if b is None else observe(b))
        for side, snapshot in enumerate((a, b)):
            if snapshot is not None:
                found = self.checks[side](snapshot)
                if found and not self.violations[side]:
                    self.violations[side] = tuple(found)
        paired = Paired(index, *observed, differences(*observed, self.ignore))
        self.iterations.append(paired)
        return paired.diverges


def replay(
    config: EngineConfig,
    actions: Iterable[Action],
    a: SchedulerFactory,
    b: SchedulerFactory,
    ignore: Collection[str] = (),
    *,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
) -> PairOutcome:
    """Run ``actions`` on A and on B, each in its own world, then drain both; stop at
    the first iteration that diverges.

    >>> from peftlife.sut.reference import ReferenceScheduler
    >>> trace = [Action("submit", prompt_len=2, max_new_tokens=1), Action("step")]
    >>> replay(EngineConfig(), trace, ReferenceScheduler, ReferenceScheduler).divergence
    """
    pair = Pair(
        Engine(config, a, schedule_deadline=schedule_deadline),
        Engine(config, b, schedule_deadline=schedule_deadline),
        ignore,
    )
    for index, action in enumerate(actions):
        if pair.act(index, action):
            break
    else:
        pair.drain()
    return pair.outcome()


# ---- the search ----


@attrs.frozen
class Diverged(Finding):
    """A finding of the paired machine: the two worlds diverged at ``paired``.

    Not a broken invariant: neither side is assumed right (each side's own
    invariants are checked and told apart, in ``PairOutcome``).
    """

    run: Run
    paired: Paired

    def __str__(self) -> str:
        cells = ", ".join(str(c) for c in self.paired.cells)
        return f"A and B diverge at iteration {self.paired.iteration}: {cells}"

    @property
    def verdict(self) -> str:
        return "diverged"


class PairedMachine(LifecycleMachine):
    """Mixed into a lifecycle machine: each action goes to a second world, driven by B.

    The machine's own engine is A's; its invariant checks (and the coverage it
    counts) go on, but a broken invariant ends nothing: only a divergence does.
    """

    other: ClassVar[SchedulerFactory]
    ignore: ClassVar[frozenset[str]] = frozenset()
    # B's SUT string, whose world settings the machine's worlds carry too.
    beside: ClassVar[tuple[str, ...]] = ()
    # Side ("A" or "B") to the invariants it broke in some example, over a whole search.
    broken: ClassVar[dict[str, set[str]]]

    def __init__(self, search: SearchContext | None = None) -> None:
        super().__init__(search)
        self.pair: Pair | None = None

    def _paired(self) -> Pair:
        if self.pair is None:
            assert self.engine is not None and self.config is not None
            deadline = self.search.deadline
            other = Engine(self.config, type(self).other, schedule_deadline=deadline)
            self.pair = Pair(self.engine, other, self.ignore, check_a=self._observe)
        return self.pair

    def _do(self, action: Action) -> None:
        pair = self._paired()
        self.actions.append(action)
        outside.action(action)
        self._label(f"rule: {action.kind}")
        if pair.act(len(self.actions) - 1, action):
            raise self._diverged(pair)

    def teardown(self) -> None:
        # As the lifecycle machine's: no drain after a divergence, nor of an aborted example.
        if self.engine is None or self.failed or self._aborted():
            return
        pair = self._paired()
        if pair.drain():
            raise self._diverged(pair)
        self._note_broken(pair)
        self._verdict("same")

    def _note_broken(self, pair: Pair) -> None:
        for side, found in zip("AB", pair.violations, strict=True):
            if found:
                self.broken.setdefault(side, set()).add(found[0].invariant)

    def _diverged(self, pair: Pair) -> Diverged:
        self._note_broken(pair)
        return self._found(Diverged(self._run(), pair.iterations[-1]))


def paired_with(
    other: SchedulerFactory, ignore: Collection[str] = (), other_spec: str = ""
) -> type[PairedMachine]:
    """The mixin that pairs a lifecycle machine with scheduler ``other``.

    ``other_spec`` names it, so that the machine's worlds carry its world settings
    too (a catalogue mutant's: ``scenarios.for_sut``): A and B share one world.
    """
    attributes: dict[str, Any] = {
        "other": staticmethod(other),
        "ignore": frozenset(ignore),
        "broken": {},
        "beside": (other_spec,) if other_spec else (),
    }
    return type("Paired", (PairedMachine,), attributes)


@attrs.frozen
class DiffSearch:
    """How a search for a divergence ended, and the invariants each side broke on the way."""

    result: SearchResult
    broken: dict[str, frozenset[str]]

    @property
    def divergence(self) -> Diverged | None:
        """The divergence the search found, if it found one (not a side that died)."""
        found = self.result.found
        return found if isinstance(found, Diverged) else None

    def broken_lines(self, a: str, b: str) -> list[str]:
        """A line per side that broke an invariant in some example, for the verdict."""
        return [
            f"{side} ({spec}) broke {', '.join(sorted(names))} in some examples; "
            f"'peftlife check --sut {spec}' tells the story"
            for side, spec in (("A", a), ("B", b))
            if (names := self.broken.get(side))
        ]


def find(
    sut_a: str | sut.Resolved,
    sut_b: str | sut.Resolved,
    scenario: scenarios.Scenario | str,
    settings: hypothesis.settings,
    *,
    ignore: Collection[str] = (),
    seed: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> DiffSearch:
    """Search traces on which A and B diverge, as ``check`` searches one scheduler;
    ``scenario`` ``all`` lets every shipped scenario take turns. A divergence is
    the result's ``found`` (a ``Diverged``; ``DiffSearch.divergence``), not yet shrunk.

    One supervised child runs the search and reads what each side broke, which
    the machine's class gathers there (``peftlife.search.outside``); a side that
    takes the process down is a ``scheduler_protocol`` failure instead. Each SUT is
    resolved here, once, unless it was already (``sut.Resolved``), and so is the
    scenario (``scenarios.Scenario``; a name or a path is read here).
    """
    a, b = sut.resolve(sut_a), sut.loaded(sut_b)
    died = died_result(a.spec)
    every = isinstance(scenario, str) and scenario == scenarios.ALL
    names = scenarios.shipped_names() if every else [scenario]
    searched = [scenarios.resolve(s) for s in names]
    return outside.supervised_search(
        lambda told: _find(a, b, searched, settings, ignore, seed, told),
        progress,
        lambda failure, examples, seconds: DiffSearch(died(failure, examples, seconds), {}),
        searched,
    )


def _find(
    sut_a: sut.Resolved,
    sut_b: sut.Resolved,
    searched: list[scenarios.Scenario],
    settings: hypothesis.settings,
    ignore: Collection[str],
    seed: int | None,
    progress: Callable[[int, int], None] | None,
) -> DiffSearch:
    mixin = paired_with(sut_b.factory, ignore, sut_b.spec)
    if len(searched) > 1:
        result = hunt(
            sut_a, settings, scenario_names=searched, seed=seed, progress=progress, mixin=mixin
        )
    else:
        result = search(
            sut_a, searched[0], settings, seed=seed, progress=progress, shrink=False, mixin=mixin
        )
    return DiffSearch(result, {side: frozenset(names) for side, names in mixin.broken.items()})


@attrs.frozen
class Shrunk:
    """A divergence made small: its world and actions, their paired replay, and the cost."""

    config: EngineConfig
    actions: tuple[Action, ...]
    outcome: PairOutcome
    shrink: shrink.Shrunk


def same_divergence(
    a: SchedulerFactory, b: SchedulerFactory, ignore: Collection[str] = ()
) -> Callable[[shrink.Trace], shrink.Verdict]:
    """ "The same divergence": A and B, replayed side by side, still diverge somewhere."""

    def still_diverges(trace: shrink.Trace) -> shrink.Verdict:
        try:
            outcome = replay(trace.config, trace.actions, a, b, ignore)
        except ValueError:
            return shrink.Verdict(False)  # a variation that is not a valid world or request
        hung = any(
            side is not None and side.fault_kind.startswith("scheduler_hung")
            for paired in outcome.iterations
            for side in (paired.a, paired.b)
        )
        return shrink.Verdict(outcome.divergence is not None, hung)

    return still_diverges


def minimized(
    divergence: Diverged,
    sut_b: str | sut.Resolved,
    ignore: Collection[str] = (),
    *,
    timeout: float | None = None,
    progress: Callable[[shrink.ShrinkProgress], None] | None = None,
    sut_a: sut.Resolved | None = None,
) -> Shrunk:
    """The shortest trace the shrinker finds on which A and B still diverge.

    ``timeout`` is the user's cap in seconds (None: counts alone end the shrink);
    ``sut_a`` is A as the front door resolved it (else the divergence's string is loaded).
    """
    run = divergence.run
    a, b = sut.loaded(sut_a or run.sut).factory, sut.loaded(sut_b).factory
    found = shrink.minimize(
        shrink.Trace(run.config, run.actions),
        same_divergence(a, b, ignore),
        admits=run.scenario.admits_case,
        timeout=timeout,
        progress=progress,
    )
    outcome = replay(found.config, found.actions, a, b, ignore)
    return Shrunk(found.config, found.actions, outcome, found)
