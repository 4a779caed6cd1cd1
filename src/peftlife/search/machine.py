"""The state machine: a Hypothesis ``RuleBasedStateMachine`` that drives any scheduler.

``machine_class(sut, scenario)`` builds the machine whose world is drawn from
the scenario, whose rules are the scenario's letters of the alphabet
(``peftlife.search.actions``: submit, step, cancel, the faults, ...), and which
checks every invariant after every executor iteration and drains the world at
teardown (invariant 12). A finding raises ``LifecycleFailure``
(``peftlife.search.failure``). What one search shares, its examples' tally
(``SearchStats``) included, is one ``SearchContext`` given to every machine it
builds (``for_search``). Running it is ``peftlife.search.hunt``'s job.
"""

from __future__ import annotations

import inspect
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, ClassVar, TypeVar

import attrs
from hypothesis import event
from hypothesis.errors import StopTest, UnsatisfiedAssumption
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from peftlife import sut
from peftlife.checker import drain, registry
from peftlife.checker.invariants import Violation
from peftlife.search import actions, compat, outside, scenarios, shrink
from peftlife.search.failure import Finding, LifecycleFailure, Run
from peftlife.search.scenarios import Scenario
from peftlife.search.trace import Action, apply
from peftlife.world.config import EngineConfig
from peftlife.world.engine import DEFAULT_SCHEDULE_DEADLINE, Engine
from peftlife.world.protocol import SchedulerFactory
from peftlife.world.snapshot import Snapshot

# A finding of one example: a violation, or (for diff) a divergence.
F = TypeVar("F", bound=Finding)

# The paths a useful search must reach; the coverage test asserts each occurs.
COVERAGE_LABELS = (
    "victim eviction",
    "self eviction",
    "recompute pause",
    "recompute pause of an active request",
    "resume after suspension",
    "refused resume",
    "device LoRA eviction",
    "completion after suspension",
    "retiring request",
    "in-flight skip",
    "end-of-sequence in flight",
    "held batch",
)
# What each witness needs of the world: a search whose worlds never had it is not
# told it missed the witness (an overlap-only path in a simple-loop scenario, an
# in-flight skip where the scheduler is told nothing in flight).
_OVERLAP = "world: overlap executor"
_TOLD_IN_FLIGHT = "world: in-flight ids told"
_HOLDS = "world: batches held"
_RECOMPUTE = "world: recompute pause"
_NEEDS = {
    "recompute pause": _RECOMPUTE,
    "recompute pause of an active request": _RECOMPUTE,
    "retiring request": _OVERLAP,
    "in-flight skip": _TOLD_IN_FLIGHT,
    "end-of-sequence in flight": _OVERLAP,
    "held batch": _HOLDS,
}


def world_labels(config: EngineConfig) -> tuple[str, ...]:
    """The features of one example's world that some witness needs."""
    return tuple(
        label
        for label, present in (
            (_OVERLAP, config.overlap),
            (_TOLD_IN_FLIGHT, config.in_flight_told),
            (_RECOMPUTE, config.enable_recompute_pause),
            (_HOLDS, config.holds_batches),
        )
        if present
    )


def unreached(coverage: Mapping[str, int]) -> tuple[str, ...]:
    """The witnesses a search with this coverage never reached, in the order listed,
    leaving out those its worlds could not reach.

    >>> unreached({"world: overlap executor": 3, **dict.fromkeys(COVERAGE_LABELS[:-4], 1)})
    ('retiring request', 'end-of-sequence in flight')
    """
    return tuple(
        label
        for label in COVERAGE_LABELS
        if not coverage.get(label) and (label not in _NEEDS or coverage.get(_NEEDS[label]))
    )


def path_labels(snapshot: Snapshot) -> set[str]:
    """The interesting scheduler paths one iteration took, read from its calls."""
    labels: set[str] = set()
    last_failed: int | None = None
    for call in snapshot.step.calls if snapshot.step else ():
        if call.component == "target" and call.caller == "scheduler":
            if call.method in ("try_allocate_generation", "resize_context") and not call.result:
                last_failed = call.request_id
            elif call.method == "suspend_request" and last_failed is not None:
                labels.add("self eviction" if call.request_id == last_failed else "victim eviction")
            elif call.frees_started_request:
                labels.add("recompute pause")
                if call.facts.was_active:
                    labels.add("recompute pause of an active request")
        if call.facts.fault == "refused_resume":
            labels.add("refused resume")
        if (
            call.method == "add_request_peft"
            and call.caller == "scheduler"
            and call.facts.was_paused
        ):
            labels.add("resume after suspension")
        if call.method == "ensure_batch" and call.facts.evicted:
            labels.add("device LoRA eviction")
    return labels | _overlap_labels(snapshot)


def _overlap_labels(snapshot: Snapshot) -> set[str]:
    step = snapshot.step
    overlap = None if step is None else step.overlap
    if step is None or overlap is None:
        return set()
    labels = set()
    if overlap.retiring:  # the pass met a request whose last token was on the device
        labels.add("retiring request")
    if overlap.held:
        labels.add("held batch")
    if overlap.in_flight_told and step.output is not None:
        # A request the scheduler would have run had it not been on the device.
        listed = {v.request_id for v in step.output.listed}
        if any(rid not in listed for rid in snapshot.live_ids.intersection(overlap.in_flight)):
            labels.add("in-flight skip")
    if any(outcome == "finished" and rid in overlap.eos for rid, outcome in snapshot.ended):
        labels.add("end-of-sequence in flight")
    return labels


@attrs.define
class SearchStats:
    """What the examples of one search did, added up as they run."""

    coverage: Counter[str] = attrs.Factory(Counter)
    examples: int = 0
    # Executor iterations, drains included.
    iterations: int = 0
    examples_to_first_failure: int = 0
    # The first finding, kept even when Hypothesis drops its example (one it had
    # already marked invalid) or reports a later one instead.
    first_failure: Finding | None = None
    # Whether the scheduler has hung in some example: Hypothesis replays a failing
    # example before it reports it, so the search's later engines wait a short deadline.
    hung: bool = False


@attrs.frozen
class SearchContext:
    """What every example of one search shares, given to each machine it builds: the
    SUT and scenario, the tally, whom to tell of progress, and the scheduler's deadline."""

    sut_spec: str
    scenario: Scenario
    # The scenario as it was given, before the SUT's world settings: what its findings
    # name (their shrink puts the SUT's settings back), and what a retargeted run searches.
    given: Scenario
    factory: SchedulerFactory
    stats: SearchStats = attrs.Factory(SearchStats)
    # Told (examples so far, iterations so far) as each example starts, for progress displays.
    progress: Callable[[int, int], None] | None = None
    # Seconds the scheduler's code may take per call before it is a hang.
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE

    @classmethod
    def of(cls, machine: type[LifecycleMachine], **search: Any) -> SearchContext:
        """A search of ``machine``'s SUT and scenario; ``search`` sets the other fields."""
        return cls(machine.sut_spec, machine.scenario, machine.given, machine.factory, **search)

    @property
    def deadline(self) -> float | None:
        """The deadline of the next engine: short once the scheduler has hung."""
        if self.stats.hung:
            return min(shrink.HUNG_DEADLINE, self.schedule_deadline or 1.0)
        return self.schedule_deadline


class LifecycleMachine(RuleBasedStateMachine):
    """Base of the generated machines: ``machine_class`` makes one per SUT and scenario,
    whose rules are the scenario's letters (``peftlife.search.actions``)."""

    # What the class is for: set where ``machine_class`` makes it, never changed.
    sut_spec: ClassVar[str] = "reference"
    scenario: ClassVar[Scenario]
    given: ClassVar[Scenario]
    factory: ClassVar[SchedulerFactory]

    def __init__(self, search: SearchContext | None = None) -> None:
        super().__init__()
        # Every example may draw every letter of its scenario (no Hypothesis swarm).
        compat.every_rule_enabled(self)
        # Built with no search (Hypothesis calling the class itself), an example
        # tallies for itself.
        self.search = search if search is not None else SearchContext.of(type(self))
        self.engine: Engine | None = None
        self.config: EngineConfig | None = None
        # The world's checks, looked up once when it is built.
        self.check: Callable[[Snapshot], list[Violation]] | None = None
        self.actions: list[Action] = []
        self.suspended: set[int] = set()
        self.failed = False
        self.checked = 0
        self.hung = False
        # The labels this example has told Hypothesis of: an event is a key of the
        # example's events, so telling one again changes nothing but costs a call.
        self.told: set[str] = set()

    def build_world(
        self,
        config: EngineConfig,
        burst: list[tuple[int, bool, int, int]],
        moves: list[Action],
    ) -> None:
        """The opening (``actions.OPENING``): the world, a burst of submits, a few moves."""
        search = self.search
        self.config = config
        outside.begin(search.sut_spec, search.given, config)
        self.engine = Engine(config, search.factory, schedule_deadline=search.deadline)
        self.check = registry.checker(self.engine.config)
        for label in world_labels(config):
            self._label(label)
        search.stats.examples += 1
        if search.progress is not None:
            search.progress(search.stats.examples, search.stats.iterations)
        for request in burst:
            self._act(actions.SUBMIT, request)
        for move in moves:
            self._do(attrs.evolve(move, pool=actions.landing(self.engine, move.pool)))

    def _act(self, letter: actions.Letter, drawn: Any) -> None:
        """Apply what one letter's drawn arguments (in declared order) stand for."""
        assert self.engine is not None
        for action in letter.drawn(self.search.scenario, self.engine, self.actions, *drawn):
            self._do(action)

    def _failure(self, violations: list[Violation]) -> LifecycleFailure:
        return self._found(LifecycleFailure(violations, self._run(), hung=self.hung))

    def _run(self) -> Run:
        """This example's world and actions so far."""
        assert self.config is not None
        search = self.search
        return Run(search.sut_spec, search.given, self.config, tuple(self.actions))

    def _found(self, failure: F) -> F:
        """Count a finding of this example: it ends the example, and the first of a
        search is kept even if Hypothesis drops or replaces its example."""
        self.failed = True
        stats = self.search.stats
        stats.examples_to_first_failure = stats.examples_to_first_failure or stats.examples
        stats.first_failure = stats.first_failure or failure
        self._verdict(failure.verdict)
        return failure

    @staticmethod
    def _aborted() -> bool:
        """Whether Hypothesis is tearing down an example it aborted (out of choices,
        or a rejected draw): that trace is not a lifecycle, and a violation its drain
        found would be dropped unreported. Only Hypothesis's own aborts count: a
        search started inside some caller's exception handler still drains."""
        return isinstance(sys.exc_info()[1], StopTest | UnsatisfiedAssumption)

    def _verdict(self, verdict: str) -> None:
        """The example's own features for observability records (see ``observe``)."""
        event("sut", self.search.sut_spec)
        event("scenario", self.search.scenario.name)
        event("iterations checked", self.checked)
        event("verdict", verdict)

    def _label(self, label: str) -> None:
        if label not in self.told:
            self.told.add(label)
            event(label)
        self.search.stats.coverage[label] += 1

    def _do(self, action: Action) -> None:
        assert self.engine is not None
        self.actions.append(action)
        outside.action(action)
        self._label(f"rule: {action.kind}")
        snapshot = apply(self.engine, action)
        if snapshot is not None and (violations := self._observe(snapshot)):
            raise self._failure(violations)

    def _observe(self, snapshot: Snapshot) -> list[Violation]:
        """Count the paths one iteration took, then check it."""
        self.search.stats.iterations += 1
        self.checked += 1
        outside.iteration(snapshot.iteration)
        for label in path_labels(snapshot):
            self._label(label)
        for call in snapshot.step.calls if snapshot.step else ():
            if call.method == "suspend_request" and call.component == "target":
                self.suspended.add(call.request_id or 0)
        for rid, outcome in snapshot.ended:
            if outcome == "finished" and rid in self.suspended:
                self._label("completion after suspension")
        errors = snapshot.step.errors if snapshot.step else ()
        if any(e.kind == "scheduler_hung" for e in errors):
            self.hung = self.search.stats.hung = True
        assert self.check is not None
        return self.check(snapshot)

    def teardown(self) -> None:
        # Hypothesis tears down after a failing rule too: a drain then would
        # replace the first finding with a later one.
        if self.engine is None or self.failed:
            return
        if self._aborted():
            # Hypothesis gave up on it mid-draw (an overrun): no example of the search.
            self.search.stats.examples -= 1
            return
        # Every example ends with the drain; a replay runs it again after the actions.
        result = drain.drain(self.engine, checker=self._observe)
        if result.violations:
            raise self._failure(list(result.violations))
        self._verdict("held")


M = TypeVar("M", bound=LifecycleMachine)


def for_search(machine: type[M], search: SearchContext) -> type[M]:
    """``machine`` as one search runs it: Hypothesis builds every example with ``search``.

    Hypothesis calls what it runs with no argument, so the context is bound in a
    subclass rather than a closure: Hypothesis keys a search (its example
    database, a derandomized seed) on that callable's name and signature, which
    stay the machine's, so a search draws the same examples whatever it is given.
    """

    def __init__(self: M) -> None:
        machine.__init__(self, search)

    return type(
        machine.__name__, (machine,), {"__init__": __init__, "__qualname__": machine.__qualname__}
    )


def _rule(letter: actions.Letter) -> Callable[..., None]:
    """The body of the rule named after ``letter``: its arguments keep their names."""
    names = [a.name for a in letter.arguments]

    def act(self: LifecycleMachine, **drawn: Any) -> None:
        self._act(letter, [drawn[n] for n in names])

    act.__name__ = act.__qualname__ = letter.name
    keyword = inspect.Parameter.KEYWORD_ONLY
    act.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(n, keyword) for n in names]
    )
    return act


@cache
def machine_class(
    sut_spec: str | sut.Resolved = "reference",
    scenario: Scenario | str = "default",
    beside: tuple[str, ...] = (),
) -> type[Any]:
    """The state machine class for one SUT and one scenario.

    ``peftlife.search.hunt`` runs it; ``lifecycle_machine`` there gives it a ``TestCase``.
    A SUT resolved at the front door (``sut.Resolved``) is used as it is, and so is a
    scenario it read (``scenarios.Scenario``; a name or a path is read here). ``beside``
    names SUTs run beside it on the same actions (``peftlife diff``'s B), whose world
    settings its worlds carry too.

    >>> machine_class("mutant:draft_not_suspended", "draft-pool").__name__
    'Lifecycle[mutant:draft_not_suspended @ draft-pool]'
    """
    # A miswired SUT is refused here, before any example, at every door.
    resolved = sut.resolve(sut_spec)
    sut_spec, factory = resolved.spec, resolved.factory
    # Under the world settings the SUT carries (a catalogue mutant's defect lives there).
    given = scenarios.resolve(scenario)
    s = scenarios.for_sut(given, sut_spec, *beside)
    name = f"Lifecycle[{sut_spec} @ {s.name}]"
    body: dict[str, Any] = {
        "__qualname__": name,
        "sut_spec": sut_spec,
        "scenario": s,
        "given": given,
        "factory": staticmethod(factory),
        # Every example opens by filling the device (``actions.OPENING``).
        # (Strategies by name: mypy cannot see that none is named ``target``.)
        actions.OPENING_RULE: initialize(**actions.OPENING.arguments(s))(  # type: ignore[call-overload]
            LifecycleMachine.build_world
        ),
    }
    # Every rule is valid in every state (no precondition, no bundle to draw from),
    # so Hypothesis never rejects an example for an unlucky choice of rules.
    for letter in actions.enabled(s):
        body[letter.name] = rule(**letter.strategies(s))(_rule(letter))  # type: ignore[call-overload]
    return type(name, (LifecycleMachine,), body)
