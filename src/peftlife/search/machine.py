"""The runner: a Hypothesis state machine that drives any scheduler through lifecycles.

``lifecycle_machine(sut, scenario)`` builds a ``RuleBasedStateMachine`` whose
world is drawn from the scenario, whose rules submit, step, cancel and inject
faults, and which checks every invariant after every executor iteration and
drains the world at teardown (invariant 12). A finding raises
``LifecycleFailure``, which carries the violations and the run's history for
the reports.

    TestMine = lifecycle_machine("mypkg.sched:factory").TestCase
"""

from __future__ import annotations

import itertools
import secrets
import sys
import time
import unittest
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any, ClassVar

import attrs
import hypothesis
from hypothesis import Phase, event
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

from peftlife import sut
from peftlife.checker import drain, invariants
from peftlife.checker.invariants import Violation
from peftlife.search import observe, profiles, scenarios, session, shrink
from peftlife.search.scenarios import Scenario
from peftlife.search.trace import Action, apply, checked_replay
from peftlife.world.config import EngineConfig
from peftlife.world.engine import DEFAULT_SCHEDULE_DEADLINE, Engine
from peftlife.world.protocol import SchedulerFactory
from peftlife.world.snapshot import Snapshot

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
# The witnesses only the overlap executor can reach: a search that never ran it
# (no overlap rule fired) is not told it missed them.
OVERLAP_LABELS = COVERAGE_LABELS[-4:]


@attrs.frozen
class Run:
    """What one example did: the SUT, the scenario, the world and the actions."""

    sut: str
    scenario: str
    config: EngineConfig
    actions: tuple[Action, ...]


class LifecycleFailure(AssertionError):
    """A finding: the violations seen, and the run that led to them."""

    def __init__(self, violations: list[Violation], run: Run) -> None:
        self.violations = violations
        self.run = run
        # Set once the trace shrinker has made this finding as small as it can,
        # with what the shrink cost and whether it stopped at a bound.
        self.shrunk = False
        self.shrink: shrink.Shrunk | None = None
        # Whether the scheduler missed its deadline: its replays then each wait it out.
        self.hung = False
        first = violations[0]
        more = f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""
        super().__init__(f"[{first.invariant}] {first}{more}")

    @property
    def invariant(self) -> str:
        return self.violations[0].invariant


def unreached(coverage: Mapping[str, int]) -> tuple[str, ...]:
    """The witnesses a search with this coverage never reached, in the order listed."""
    overlap = coverage.get("rule: eos") or coverage.get("rule: hold_batch")
    return tuple(
        label
        for label in COVERAGE_LABELS
        if not coverage.get(label) and (overlap or label not in OVERLAP_LABELS)
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
    if step is None or not step.overlap:
        return set()
    labels = set()
    if any(v.state.name == "GENERATION_TO_COMPLETE" for v in snapshot.requests):
        labels.add("retiring request")
    if step.held:
        labels.add("held batch")
    if step.in_flight_told and step.output is not None:
        # A request the scheduler would have run had it not been on the device.
        listed = {v.request_id for v in step.output.listed}
        if any(rid not in listed for rid in step.in_flight if snapshot.request(rid)):
            labels.add("in-flight skip")
    if any(outcome == "finished" and rid in step.eos for rid, outcome in snapshot.ended):
        labels.add("end-of-sequence in flight")
    return labels


class LifecycleMachine(RuleBasedStateMachine):
    """Base of the generated machines; ``lifecycle_machine`` fills the class variables."""

    sut_spec: ClassVar[str] = "reference"
    scenario: ClassVar[Scenario]
    # The scenario as it was named (a shipped name or a .toml path), for a retargeted run.
    scenario_spec: ClassVar[str] = "default"
    factory: ClassVar[SchedulerFactory]
    # Shared by every example of this class, for the coverage test and the gate.
    coverage: ClassVar[Counter[str]]
    examples: ClassVar[int]
    # Told (examples so far, iterations so far) as each example starts, for progress displays.
    progress: ClassVar[Callable[[int, int], None] | None] = None
    iterations: ClassVar[int] = 0
    examples_to_first_failure: ClassVar[int] = 0
    # The first finding of this search, kept even when Hypothesis drops its example
    # (one it had already marked invalid) or reports a later one instead.
    first_failure: ClassVar[LifecycleFailure | None] = None
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
        self.failed = False
        self.checked = 0
        self.hung = False

    def _failure(self, violations: list[Violation]) -> LifecycleFailure:
        assert self.config is not None
        self.failed = True
        cls = type(self)
        cls.examples_to_first_failure = cls.examples_to_first_failure or cls.examples
        run = Run(self.sut_spec, self.scenario.name, self.config, tuple(self.actions))
        self._verdict(violations[0].invariant)
        failure = LifecycleFailure(violations, run)
        failure.hung = self.hung
        cls.first_failure = cls.first_failure or failure
        return failure

    def _verdict(self, verdict: str) -> None:
        """The example's own features for observability records (see ``observe``)."""
        event("sut", self.sut_spec)
        event("scenario", self.scenario.name)
        event("iterations checked", self.checked)
        event("verdict", verdict)

    def _label(self, label: str) -> None:
        event(label)
        type(self).coverage[label] += 1

    def _do(self, action: Action) -> None:
        assert self.engine is not None
        self.actions.append(action)
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
        type(self).iterations += 1
        self.checked += 1
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
        return invariants.check(snapshot)

    @classmethod
    def _to_test_case(cls) -> Any:  # type: ignore[override]  # upstream wraps it in a cache
        """The ``TestCase`` of this machine: it runs as ``peftlife check`` does."""
        return _test_case(cls)

    def teardown(self) -> None:
        # Hypothesis tears down after a failing rule too: a drain then would
        # replace the first finding with a later one. It also tears down an example
        # it has aborted (out of choices, or a rejected draw): that trace is not a
        # lifecycle, and a violation its drain found would be dropped unreported.
        if self.engine is None or self.failed or sys.exc_info()[1] is not None:
            return
        # Every example ends with the drain; a replay runs it again after the actions.
        result = drain.drain(self.engine, checker=self._observe)
        if result.violations:
            raise self._failure(list(result.violations))
        self._verdict("held")


@cache
def lifecycle_machine(sut_spec: str = "reference", scenario: str = "default") -> type[Any]:
    """The state machine class for one SUT and one scenario.

    >>> lifecycle_machine("mutant:draft_not_suspended", "draft-pool").__name__
    'Lifecycle[mutant:draft_not_suspended @ draft-pool]'
    """
    # A miswired SUT is refused here, before any example, at every door.
    factory = sut.wired(sut_spec)
    s = scenarios.load(scenario)

    # What one submit draws: adapter index, weights sent, prompt and output lengths.
    adapter, weights = s.adapter_choice(), s.carries_weights()
    prompt_len = s.prompt_len.strategy(at_least=1)
    max_new_tokens = s.max_new_tokens.strategy(at_least=1)

    # Every rule is valid in every state (no precondition, no bundle to draw from),
    # so Hypothesis never rejects an example for an unlucky choice of rules.
    class Machine(LifecycleMachine):
        # Every example opens with a request. Swarm testing drops a random subset of
        # the rules from each example; without this, the half of the examples that
        # lost ``submit`` had nothing to schedule and spent the budget for nothing.
        @initialize(
            config=s.worlds(),
            adapter=adapter,
            weights=weights,
            prompt_len=prompt_len,
            max_new_tokens=max_new_tokens,
        )
        def build_world(
            self,
            config: EngineConfig,
            adapter: int,
            weights: bool,
            prompt_len: int,
            max_new_tokens: int,
        ) -> None:
            self.config = config
            self.engine = Engine(config, factory, schedule_deadline=self.schedule_deadline)
            cls = type(self)
            cls.examples += 1
            if cls.progress is not None:
                cls.progress(cls.examples, cls.iterations)
            self.submit(adapter, weights, prompt_len, max_new_tokens)

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
            self._do(Action("submit", None, task, weights, prompt_len, max_new_tokens))

        @rule(steps=s.steps_per_rule.strategy(at_least=1))
        def step(self, steps: int) -> None:
            for _ in range(steps):
                self._do(Action("step"))

        if s.cancel:

            @rule(back=st.integers(min_value=0, max_value=7))
            def cancel(self, back: int) -> None:
                # Counted back from the latest request (ids are 1, 2, ... in order of
                # submission); before any submit there is nothing to cancel.
                if self.submitted:
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

        if s.executor == "overlap":

            @rule(member=st.integers(min_value=0, max_value=7))
            def eos(self, member: int) -> None:
                # One of the members the next read-back gives a token; none, nothing.
                assert self.engine is not None
                emitting = self.engine.emitting_ids
                if emitting:
                    self._do(Action("eos", request_id=emitting[member % len(emitting)]))

            @rule()
            def hold_batch(self) -> None:
                self._do(Action("hold_batch"))

    Machine.__name__ = Machine.__qualname__ = f"Lifecycle[{sut_spec} @ {s.name}]"
    Machine.sut_spec = sut_spec
    Machine.scenario = s
    Machine.scenario_spec = scenario
    Machine.factory = factory
    Machine.coverage = Counter()
    Machine.examples = 0
    return Machine


@attrs.frozen
class SearchResult:
    """How one search of one SUT in one scenario ended."""

    sut: str
    scenario: str
    failure: LifecycleFailure | None
    # Examples run in all, and how many it took to meet the first failure.
    examples: int
    examples_to_find: int
    seconds: float
    coverage: Counter[str]
    # Executor iterations run in all, drains included.
    iterations: int = 0

    @property
    def held(self) -> bool:
        return self.failure is None

    @property
    def unreached(self) -> tuple[str, ...]:
        """The witnesses (``COVERAGE_LABELS``) this search never reached.

        A run that held without reaching them proved little about those paths.
        """
        return unreached(self.coverage)


def search(
    sut_spec: str,
    scenario: str,
    settings: hypothesis.settings,
    *,
    shrink: bool = True,
    seed: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
    shrink_timeout: float | None = shrink.DEFAULT_TIMEOUT,
    shrink_progress: Callable[[shrink.ShrinkProgress], None] | None = None,
    mixin: type | None = None,
) -> SearchResult:
    """Run the machine for one SUT and scenario; a finding is returned, not raised.

    Hypothesis searches without its own shrink phase; with ``shrink`` the first
    failing example is then minimized over its trace (``peftlife.search.shrink``), which
    takes well under a second where Hypothesis's shrink re-runs whole examples
    for a minute. ``seed`` replaces the profile's randomness with a fixed seed;
    ``schedule_deadline`` is how long one call of the scheduler may take;
    ``shrink_timeout`` and ``shrink_progress`` go to ``minimized``. ``mixin``, a
    class put before the machine in its bases, changes what an example does with
    its actions (``peftlife.search.diff`` runs them on two schedulers).
    Anything but a ``LifecycleFailure`` is a bug of the harness and propagates.
    """
    with _stable_constants(), _digests_once():
        result = _search(sut_spec, scenario, settings, seed, progress, schedule_deadline, mixin)
    if shrink and result.failure is not None:
        smaller = minimized(
            result.failure, schedule_deadline, timeout=shrink_timeout, progress=shrink_progress
        )
        result = attrs.evolve(result, failure=smaller)
    return result


def _search(
    sut_spec: str,
    scenario: str,
    settings: hypothesis.settings,
    seed: int | None,
    progress: Callable[[int, int], None] | None,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
    mixin: type | None = None,
) -> SearchResult:
    base = lifecycle_machine(sut_spec, scenario)
    # A fresh subclass per search: its own counters, its own seed.
    machine: Any = type(
        base.__name__,
        (base,) if mixin is None else (mixin, base),
        {
            "coverage": Counter(),
            "examples": 0,
            "iterations": 0,
            "examples_to_first_failure": 0,
            "first_failure": None,
            "progress": None if progress is None else staticmethod(progress),
            "schedule_deadline": schedule_deadline,
            "own_search": True,
        },
    )
    run_settings = hypothesis.settings(
        settings,
        phases=[p for p in settings.phases if p is not Phase.shrink],
        report_multiple_bugs=False,
        derandomize=settings.derandomize and seed is None,
    )
    if seed is not None:
        machine = hypothesis.seed(seed)(machine)
    failure = None
    start = time.perf_counter()
    try:
        with observe.recording(observe.path_from_env(), sut_spec, scenario):
            run_state_machine_as_test(machine, settings=run_settings)
    except LifecycleFailure as found:
        failure = found
    except unittest.SkipTest:
        # Hypothesis's word for "ran nothing": a replay of saved examples found none.
        if Phase.generate in run_settings.phases:
            raise
    # The first finding wins: Hypothesis may have dropped it (its example was already
    # aborted when the drain found it) or report another after it.
    failure = machine.first_failure or failure
    return SearchResult(
        sut_spec,
        scenario,
        failure,
        machine.examples,
        machine.examples_to_first_failure,
        time.perf_counter() - start,
        machine.coverage,
        machine.iterations,
    )


# Examples per slice of a hunt. Below ten, Hypothesis skips its opening phase of
# deliberately small examples (a tenth of a run's budget), which never build the
# pressure most defects need; every example of a short slice is drawn at full size.
SLICE = 9


def hunt(
    sut_spec: str,
    settings: hypothesis.settings,
    *,
    scenario_names: Sequence[str] | None = None,
    seed: int | None = None,
    shrink: bool = False,
    progress: Callable[[int, int], None] | None = None,
    mixin: type | None = None,
) -> SearchResult:
    """Search several scenarios (every shipped one by default) at once, until one fails.

    The scenarios take turns, ``SLICE`` examples each, every slice with its own
    seed derived from ``seed`` (0 under a derandomized profile), so a defect only
    one scenario reaches is found after a few rounds instead of after every
    scenario before it in the list has spent its whole budget. Each scenario
    still gets the profile's ``max_examples`` when nothing fails, so a hunt
    covers as much as searching each scenario in turn. Before any slice, every
    scenario replays the failures its example database holds (a campaign's, or an
    earlier run's), so a saved finding is met first wherever its scenario sits in
    the list. The result names the scenario that caught the failure;
    ``examples``, ``examples_to_find`` and ``iterations`` count every scenario's,
    and ``coverage`` adds up every slice's. ``mixin`` is as in ``search``.

    >>> from peftlife.search import profiles
    >>> hunt("mutant:no_release_on_suspend", profiles.get("ci")).held
    False
    """
    names = list(scenario_names or scenarios.shipped_names())
    base = seed if seed is not None else (0 if settings.derandomize else secrets.randbits(32))
    spent = dict.fromkeys(names, 0)
    coverage: Counter[str] = Counter()
    done = SearchResult(sut_spec, ",".join(names), None, 0, 0, 0.0, coverage)
    start = time.perf_counter()

    def tick(slice_examples: int, slice_iterations: int) -> None:
        if progress is not None:
            progress(done.examples + slice_examples, done.iterations + slice_iterations)

    def run(name: str, part: hypothesis.settings, seed_of: int | None) -> SearchResult:
        """One slice, added to what ran before it."""
        nonlocal done
        result = _search(sut_spec, name, part, seed_of, tick, mixin=mixin)
        coverage.update(result.coverage)
        spent[name] += result.examples
        done = SearchResult(
            sut_spec,
            name if result.failure else done.scenario,
            result.failure,
            done.examples + result.examples,
            done.examples + (result.examples_to_find if result.failure else result.examples),
            time.perf_counter() - start,
            coverage,
            done.iterations + result.iterations,
        )
        return result

    with _stable_constants(), _digests_once():
        if settings.database is not None and Phase.reuse in settings.phases:
            saved_only = hypothesis.settings(settings, phases=[Phase.explicit, Phase.reuse])
            for name in names:
                if run(name, saved_only, None).failure is not None:
                    return _shrunk(done, shrink)
        for turn in itertools.count():
            open_names = [n for n in names if spent[n] < settings.max_examples]
            if not open_names:
                break
            for name in open_names:
                budget = min(SLICE, settings.max_examples - spent[name])
                part = hypothesis.settings(settings, max_examples=budget)
                result = run(name, part, _slice_seed(base, name, turn))
                if result.failure is not None:
                    return _shrunk(done, shrink)
                # A slice that ran nothing (every draw rejected) must still end the turns.
                spent[name] += result.examples == 0 and budget
    return attrs.evolve(done, scenario=",".join(names), seconds=time.perf_counter() - start)


def _shrunk(result: SearchResult, shrink: bool) -> SearchResult:
    if not shrink or result.failure is None:
        return result
    return attrs.evolve(result, failure=minimized(result.failure))


def _slice_seed(base: int, scenario: str, turn: int) -> int:
    """A seed per slice, the same on every platform and in every process."""
    return zlib.crc32(f"{base}/{scenario}/{turn}".encode())


@contextmanager
def _digests_once() -> Iterator[None]:
    """Compute Hypothesis's source digest of a machine once, not on every run.

    Each run of a state machine hashes the source of the machine class and of
    its own runner, parsing whole modules, which costs more than a short slice
    of examples. Within a search the digest of the same code never changes, so
    it is cached for the duration. Like ``_stable_constants`` this touches
    Hypothesis internals and degrades to doing nothing if they move.
    """
    try:
        from hypothesis import core, stateful
        from hypothesis.internal.reflection import function_digest
    except ImportError:
        yield
        return
    if not (hasattr(core, "function_digest") and hasattr(stateful, "function_digest")):
        yield
        return
    saved = (core.function_digest, stateful.function_digest)
    memo: dict[tuple[object, ...], bytes] = {}

    def digest(fn: Any) -> bytes:
        key = (
            getattr(fn, "__module__", None),
            getattr(fn, "__qualname__", None),
            getattr(fn, "__code__", None),
            getattr(fn, "_hypothesis_internal_add_digest", None),
        )
        if key not in memo:
            memo[key] = function_digest(fn)
        return memo[key]

    core.function_digest = stateful.function_digest = digest
    try:
        yield
    finally:
        core.function_digest, stateful.function_digest = saved


@cache
def _test_case(machine: type[LifecycleMachine]) -> type[unittest.TestCase]:
    """A unittest case that searches ``machine`` as the command line does.

    No Hypothesis shrink phase, peftlife's own shrinker, one failure (the first
    invariant): ``search`` does all three. The session's options (the pytest
    plugin's ``--peftlife-*``) retarget the SUT, the scenario and the profile;
    a ``settings`` set on the case by hand is used instead of the profile.
    """

    class LifecycleTestCase(unittest.TestCase):
        settings: ClassVar[hypothesis.settings | None] = None

        def runTest(self) -> None:
            options = session.current()
            result = session_search(
                options.sut or machine.sut_spec,
                options.scenario or machine.scenario_spec,
                self.settings,
            )
            if result.failure is not None:
                raise result.failure

    LifecycleTestCase.__name__ = f"{machine.__name__}.TestCase"
    LifecycleTestCase.__qualname__ = LifecycleTestCase.__name__
    return LifecycleTestCase


def session_search(
    sut_spec: str,
    scenario: str,
    settings: hypothesis.settings | None = None,
    *,
    seed: int | None = None,
) -> SearchResult:
    """Search under the session's options (``peftlife.search.session``), shrink included.

    Their profile applies unless ``settings`` are given; their example database,
    shrink cap and shrink progress always do. Every pytest door (a machine's
    ``TestCase``, the ``peftlife_search`` fixture) searches through here, so they
    share findings.
    """
    options = session.current()
    profile = settings or profiles.get(options.profile or profiles.default_name())
    return search(
        sut_spec,
        scenario,
        profiles.for_search(profile, database=options.database),
        seed=seed,
        shrink_timeout=options.shrink_timeout,
        shrink_progress=options.shrink_progress,
    )


@contextmanager
def _stable_constants() -> Iterator[None]:
    """Search as if no local module had been imported.

    Hypothesis mixes constants mined from every loaded local module into its
    draws, so the same seed would search differently depending on what the
    front door happened to import (the command line loads other modules than
    pytest does). Pinning that pool to empty for the search keeps one seed, one
    scenario and one SUT to one trace. It touches Hypothesis internals, so if
    they move this degrades to doing nothing rather than failing.
    """
    try:
        from hypothesis.internal.conjecture import providers as p

        saved = (p._local_constants, p._sys_modules_len, set(p._seen_modules))
        empty = type(p._local_constants)()
        cache = p.CONSTANTS_CACHE.cache
    except (ImportError, AttributeError):
        yield
        return
    p._local_constants = empty
    p._seen_modules.update(id(m) for m in list(sys.modules.values()))
    p._sys_modules_len = len(sys.modules)
    cache.clear()
    try:
        yield
    finally:
        p._local_constants, p._sys_modules_len = saved[0], saved[1]
        p._seen_modules.clear()
        p._seen_modules.update(saved[2])
        cache.clear()


def minimized(
    failure: LifecycleFailure,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
    *,
    timeout: float | None = shrink.DEFAULT_TIMEOUT,
    progress: Callable[[shrink.ShrinkProgress], None] | None = None,
) -> LifecycleFailure:
    """The same finding on the smallest world and action list the shrinker finds.

    ``timeout`` caps the shrink (None or 0: no cap); ``progress`` is told as it goes.
    """
    if failure.shrunk:
        return failure
    run = failure.run
    factory = sut.load(run.sut)
    shrunk = shrink.minimize(
        run.config,
        run.actions,
        factory,
        failure.invariant,
        schedule_deadline,
        hung=failure.hung,
        timeout=timeout,
        progress=progress,
    )
    outcome = checked_replay(
        shrunk.config, shrunk.actions, factory, schedule_deadline=schedule_deadline
    )
    if not outcome.violations:  # cannot happen for a deterministic SUT; keep the original
        return failure
    smaller = Run(run.sut, run.scenario, shrunk.config, shrunk.actions)
    result = LifecycleFailure(list(outcome.violations), smaller)
    result.shrunk = True
    result.shrink = shrunk
    return result
