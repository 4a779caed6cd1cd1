"""The state machine: a Hypothesis ``RuleBasedStateMachine`` that drives any scheduler.

``machine_class(sut, scenario)`` builds the machine whose world is drawn from
the scenario, whose rules submit, step, cancel and inject faults, and which
checks every invariant after every executor iteration and drains the world at
teardown (invariant 12). A finding raises ``LifecycleFailure``
(``peftlife.search.failure``). What the examples of one search did is tallied
on the class, in one ``SearchStats``. Running it is ``peftlife.search.hunt``'s
job.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, ClassVar, TypeVar

import attrs
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.errors import StopTest, UnsatisfiedAssumption
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from peftlife import sut
from peftlife.checker import drain, registry
from peftlife.checker.invariants import Violation
from peftlife.search import outside, scenarios, shrink
from peftlife.search.failure import Finding, LifecycleFailure, Run
from peftlife.search.scenarios import Scenario
from peftlife.search.trace import Action, ActionKind, apply
from peftlife.world.config import EngineConfig
from peftlife.world.engine import DEFAULT_SCHEDULE_DEADLINE, Engine
from peftlife.world.protocol import SchedulerFactory
from peftlife.world.snapshot import Snapshot

# The fewest requests an example opens with (three contend for a device that
# holds about one), and the most moves (iterations, armed faults) that follow.
OPENING_REQUESTS = 3
OPENING_MOVES = 8
# The most requests one example cancels. A cancel relieves the pressure defects need:
# with the rule drawn as often as the others, most examples cancelled every request
# they had before a pool was ever full (bench/detection.py measured a fifth of the
# catches there).
MAX_CANCELS = 2

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


class LifecycleMachine(RuleBasedStateMachine):
    """Base of the generated machines; ``machine_class`` fills the class variables."""

    sut_spec: ClassVar[str] = "reference"
    scenario: ClassVar[Scenario]
    # The scenario as it was named (a shipped name or a .toml path), for a retargeted run.
    scenario_spec: ClassVar[str] = "default"
    factory: ClassVar[SchedulerFactory]
    # Shared by every example of this class: a search gives its subclass fresh ones.
    stats: ClassVar[SearchStats]
    # Told (examples so far, iterations so far) as each example starts, for progress displays.
    progress: ClassVar[Callable[[int, int], None] | None] = None
    # Seconds the scheduler's code may take per call before it is a hang.
    schedule_deadline: ClassVar[float | None] = DEFAULT_SCHEDULE_DEADLINE
    # True on the fresh subclass each ``search`` makes, whose class state dies with it.
    own_search: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self.engine: Engine | None = None
        self.config: EngineConfig | None = None
        self.actions: list[Action] = []
        self.suspended: set[int] = set()
        self.submitted = 0
        self.cancelled = 0
        self.failed = False
        self.checked = 0
        self.hung = False

    def _failure(self, violations: list[Violation]) -> LifecycleFailure:
        failure = LifecycleFailure(violations, self._run())
        failure.hung = self.hung
        return self._found(failure)

    def _run(self) -> Run:
        """This example's world and actions so far."""
        assert self.config is not None
        return Run(self.sut_spec, self.scenario.name, self.config, tuple(self.actions))

    def _found(self, failure: F) -> F:
        """Count a finding of this example: it ends the example, and the first of a
        search is kept even if Hypothesis drops or replaces its example."""
        self.failed = True
        stats = type(self).stats
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
        event("sut", self.sut_spec)
        event("scenario", self.scenario.name)
        event("iterations checked", self.checked)
        event("verdict", verdict)

    def _label(self, label: str) -> None:
        event(label)
        type(self).stats.coverage[label] += 1

    def _do(self, action: Action) -> None:
        assert self.engine is not None
        self.actions.append(action)
        outside.action(action)
        self._label(f"rule: {action.kind}")
        snapshot = apply(self.engine, action)
        if snapshot is not None and (violations := self._observe(snapshot)):
            raise self._failure(violations)

    def _pool(self, pool: str) -> str:
        """Record the pool a fault really lands in: the target when there is no draft."""
        assert self.engine is not None
        return pool if self.engine.draft_kv_cache_manager is not None else "target"

    def _observe(self, snapshot: Snapshot) -> list[Violation]:
        """Count the paths one iteration took, then check it."""
        type(self).stats.iterations += 1
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
            self.hung = True
            cls = type(self)
            if cls.own_search:
                # Hypothesis replays a failing example before it reports it: once the
                # scheduler has hung, this search's later engines wait a short deadline.
                cls.schedule_deadline = min(shrink.HUNG_DEADLINE, cls.schedule_deadline or 1.0)
        assert self.engine is not None
        return registry.check(snapshot, self.engine.config)

    def teardown(self) -> None:
        # Hypothesis tears down after a failing rule too: a drain then would
        # replace the first finding with a later one.
        if self.engine is None or self.failed or self._aborted():
            return
        # Every example ends with the drain; a replay runs it again after the actions.
        result = drain.drain(self.engine, checker=self._observe)
        if result.violations:
            raise self._failure(list(result.violations))
        self._verdict("held")


@cache
def machine_class(sut_spec: str = "reference", scenario: str = "default") -> type[Any]:
    """The state machine class for one SUT and one scenario.

    ``peftlife.search.hunt`` runs it; ``lifecycle_machine`` there gives it a ``TestCase``.

    >>> machine_class("mutant:draft_not_suspended", "draft-pool").__name__
    'Lifecycle[mutant:draft_not_suspended @ draft-pool]'
    """
    # A miswired SUT is refused here, before any example, at every door.
    factory = sut.wired(sut_spec)
    # Under the world settings the SUT carries (a catalogue mutant's defect lives there).
    s = scenarios.for_sut(scenarios.load(scenario), sut_spec)

    # What one submit draws: adapter index, weights sent, prompt and output lengths.
    adapter, weights = s.adapter_choice(), s.carries_weights()
    prompt_len = s.prompt_len.strategy(at_least=1)
    max_new_tokens = s.max_new_tokens.strategy(at_least=1)
    # What an opening move may be: an iteration, or a fault the scenario arms, aimed
    # at any pool it has (a fault in the draft alone is what splits the two pools).
    faults: list[ActionKind] = [k for k in ("fail_grow", "refuse_resume") if getattr(s, k)]
    opening_move = st.one_of(
        st.just(Action("step")),
        *(st.builds(Action, st.just(kind), pool=s.fault_pools()) for kind in faults),
    )

    # Every rule is valid in every state (no precondition, no bundle to draw from),
    # so Hypothesis never rejects an example for an unlucky choice of rules.
    class Machine(LifecycleMachine):
        # Every example opens by filling the device: a burst of submits, then a few
        # moves (an executor iteration or an armed fault) before the rules take turns.
        # Drawn one rule at a time, most examples spread their requests out and let
        # cancels relieve the pressure first: the suspensions, recompute pauses and
        # evictions where lifecycle defects live came in a few examples in a hundred
        # (bench/detection.py measures it). And an example whose swarm draw dropped
        # ``submit`` still has requests to schedule.
        @initialize(
            config=s.worlds(),
            burst=st.lists(
                st.tuples(adapter, weights, prompt_len, max_new_tokens),
                min_size=min(OPENING_REQUESTS, s.max_requests),
                max_size=s.max_requests,
            ),
            moves=st.lists(opening_move, min_size=2, max_size=OPENING_MOVES),
        )
        def build_world(
            self,
            config: EngineConfig,
            burst: list[tuple[int, bool, int, int]],
            moves: list[Action],
        ) -> None:
            self.config = config
            outside.begin(self.sut_spec, s.name, config)
            self.engine = Engine(config, factory, schedule_deadline=self.schedule_deadline)
            for label in world_labels(config):
                self._label(label)
            cls = type(self)
            cls.stats.examples += 1
            if cls.progress is not None:
                cls.progress(cls.stats.examples, cls.stats.iterations)
            for request in burst:
                self.submit(*request)
            for move in moves:
                self._do(attrs.evolve(move, pool=self._pool(move.pool)))

        @rule(
            adapter=adapter, weights=weights, prompt_len=prompt_len, max_new_tokens=max_new_tokens
        )
        def submit(self, adapter: int, weights: bool, prompt_len: int, max_new_tokens: int) -> None:
            assert self.engine is not None
            if self.submitted >= s.max_requests:
                # Past the scenario's cap a submit runs the executor once instead.
                self._do(Action("step"))
                return
            ids = self.engine.adapter_ids
            # Adapter indices wrap onto the adapters this world has; 0 is none.
            task = None if adapter == 0 else ids[(adapter - 1) % len(ids)]
            self.submitted += 1
            path = s.lora_path == "always" and task is not None
            self._do(
                Action("submit", None, task, weights, prompt_len, max_new_tokens, lora_path=path)
            )

        @rule(steps=s.steps_per_rule.strategy(at_least=1))
        def step(self, steps: int) -> None:
            for _ in range(steps):
                self._do(Action("step"))

        if s.cancel:

            @rule(back=st.integers(min_value=0, max_value=7))
            def cancel(self, back: int) -> None:
                # Counted back from the latest request (ids are 1, 2, ... in order of
                # submission); before any submit there is nothing to cancel.
                if self.cancelled >= MAX_CANCELS:
                    # Past the cap a cancel runs the executor once instead.
                    self._do(Action("step"))
                elif self.submitted:
                    self.cancelled += 1
                    request = self.submitted - back % self.submitted
                    self._do(Action("cancel", request_id=request))

        if s.refuse_resume:

            @rule(pool=s.fault_pools())
            def refuse_resume(self, pool: str) -> None:
                self._do(Action("refuse_resume", pool=self._pool(pool)))

        if s.fail_grow:

            @rule(pool=s.fault_pools())
            def fail_grow(self, pool: str) -> None:
                self._do(Action("fail_grow", pool=self._pool(pool)))

        if s.overlap:

            @rule(member=st.integers(min_value=0, max_value=7))
            def eos(self, member: int) -> None:
                # One of the members the next read-back gives a token; none, nothing.
                assert self.engine is not None
                emitting = self.engine.emitting_ids
                if emitting:
                    self._do(Action("eos", request_id=emitting[member % len(emitting)]))

            if s.holds_batches:
                # Only a world with a reason to hold (attention DP, batch waiting, the
                # context KV cap) holds: on a single rank upstream always queues.
                @rule()
                def hold_batch(self) -> None:
                    self._do(Action("hold_batch"))

    Machine.__name__ = Machine.__qualname__ = f"Lifecycle[{sut_spec} @ {s.name}]"
    Machine.sut_spec = sut_spec
    Machine.scenario = s
    Machine.scenario_spec = scenario
    Machine.factory = factory
    Machine.stats = SearchStats()
    return Machine
