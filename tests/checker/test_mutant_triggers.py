"""The minimal trigger of each mutant (the catalogue of docs/invariants.md), with one runner.

Each ``Scenario`` is a small world (an ``EngineConfig``) and a list of the
search's own actions (``peftlife.search.trace.Action``: submit, step, a one-shot
fault aimed at the target pool), its submits labelled for the probes.
``run_scenario`` applies them with ``trace.apply`` on ``Engine(config, factory)``
for *any* scheduler factory, runs the checker after every step, and drains the
world at the end if nothing broke.

Every scenario names the mutant of ``peftlife.sut.mutants`` it targets. The tests
hold it to three things:

* against ``ReferenceScheduler`` it runs clean, drains clean, and really goes
  down the path that makes it interesting (its ``reached`` probes), so that a
  change to the model or the scheduler that makes it vacuous fails here;
* against its own mutant its first violation comes during the scenario (not
  the drain) and is one the catalogue accepts for that mutant;
* against its own mutant it also shows the symptoms the spec describes
  (``mutant_shows``), when the trigger goes on past the first catch.

Comments in each scenario give the expected story, step by step, against the
reference scheduler (and where the mutant differs).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import pytest

from peftlife.checker.drain import DrainResult, can_drain, drain
from peftlife.checker.invariants import Violation, ownership_follows_residency
from peftlife.checker.registry import check
from peftlife.search.trace import Action, apply
from peftlife.sut import mutants
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
from peftlife.world.ledger import Args, Facts, given
from peftlife.world.protocol import SchedulerFactory
from peftlife.world.residency import Residency
from peftlife.world.snapshot import Snapshot

# ---- actions: the search's own (peftlife.search.trace) ----

STEP = Action("step")


def submit(prompt_len: int, max_new_tokens: int, adapter: int | None = None) -> Action:
    """A request sent with its adapter's weights (so it never needs a LoRA path)."""
    return Action(
        "submit",
        lora_task_id=adapter,
        lora_weights=True,
        prompt_len=prompt_len,
        max_new_tokens=max_new_tokens,
    )


REFUSE_RESUME = Action("refuse_resume", pool="target")
FAIL_GROW = Action("fail_grow", pool="target")

# ---- what the runner observed ----


@attrs.frozen
class Observation:
    """One run of a scenario.

    ``snapshots`` holds one snapshot per scenario step (the drain's are in
    ``drain``); ``violations`` holds every violation in order, the drain's last.
    """

    scenario: str
    ids: Mapping[str, int]
    snapshots: tuple[Snapshot, ...]
    violations: tuple[Violation, ...]
    final: Snapshot
    drain: DrainResult | None
    after_drain: Snapshot | None

    @property
    def first_violation(self) -> Violation | None:
        return self.violations[0] if self.violations else None

    @property
    def first_catch(self) -> tuple[Violation, ...]:
        """Every violation of the first iteration that had any."""
        first = self.first_violation
        return tuple(v for v in self.violations if first and v.iteration == first.iteration)

    @property
    def steps(self) -> int:
        return len(self.snapshots)

    def label(self, request_id: int | None) -> str:
        for name, rid in self.ids.items():
            if rid == request_id:
                return name
        return "-" if request_id is None else str(request_id)


# ---- probes: evidence that a run went down the scenario's path ----

_ANY: object = object()


@attrs.frozen
class Called:
    """At some scenario step (or at ``step``) a manager call matching all fields was made.

    ``who`` is a request label, or None for a call on no request (``ensure_batch``);
    ``args`` and ``facts`` match on the fields they set.
    """

    method: str
    who: str | None
    component: str = "target"
    caller: str = "scheduler"
    result: object = _ANY
    args: Args = attrs.field(factory=Args)
    facts: Facts = attrs.field(factory=Facts)
    step: int | None = None

    def seen(self, obs: Observation) -> bool:
        rid = None if self.who is None else obs.ids[self.who]
        for snap in _at(obs, self.step):
            for call in snap.step.calls if snap.step else ():
                if (
                    call.method == self.method
                    and call.request_id == rid
                    and call.component == self.component
                    and call.caller == self.caller
                    and (self.result is _ANY or call.result == self.result)
                    and _matches(call.args, self.args)
                    and _matches(call.facts, self.facts)
                ):
                    return True
        return False


def _matches(found: Args | Facts, wanted: Args | Facts) -> bool:
    return all(getattr(found, name) == value for name, value in given(wanted).items())


@attrs.frozen
class Errored:
    """The engine met this error (a ``StepError``) for the request."""

    kind: str
    who: str
    exception: str
    step: int | None = None

    def seen(self, obs: Observation) -> bool:
        rid = obs.ids[self.who]
        return any(
            err.kind == self.kind and err.request_id == rid and err.exception == self.exception
            for snap in _at(obs, self.step)
            for err in (snap.step.errors if snap.step else ())
        )


@attrs.frozen
class Idle:
    """The request is live and in none of the scheduler's output lists; with ``owning``,
    it is also started, target KV ACTIVE, and in ``active`` of its adapter."""

    who: str
    owning: bool = False
    step: int | None = None

    def seen(self, obs: Observation) -> bool:
        rid = obs.ids[self.who]
        for snap in _at(obs, self.step):
            view = snap.request(rid)
            out = snap.step.output if snap.step else None
            if view is None or out is None:
                continue
            if any(rid in ids for _, ids in out.lists()):
                continue
            if not self.owning:
                return True
            owners = {a.task_id: a.active for a in snap.adapters}
            if (
                view.started
                and view.target.residency is Residency.ACTIVE
                and rid in owners.get(view.lora_task_id, frozenset())
            ):
                return True
        return False


Probe = Called | Errored | Idle


def _at(obs: Observation, step: int | None) -> tuple[Snapshot, ...]:
    return obs.snapshots if step is None else (obs.snapshots[step - 1],)


# ---- the scenario and its runner ----


@attrs.frozen
class Scenario:
    name: str  # the mutant it targets
    description: str
    config: EngineConfig
    # The submits' labels, in order: the probes name requests by them, and request
    # ids count submits from 1.
    labels: tuple[str, ...]
    actions: tuple[Action, ...]
    # Evidence, against the reference, that the scenario reached its interesting path.
    reached: tuple[Probe, ...]
    # Invariants the target mutant must show somewhere during the scenario.
    mutant_shows: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        submits = sum(a.kind == "submit" for a in self.actions)
        assert len(self.labels) == submits, f"{self.name}: one label per submit"

    def submissions(self) -> list[Action]:
        return [a for a in self.actions if a.kind == "submit"]


def run_scenario(scenario: Scenario, factory: SchedulerFactory) -> Observation:
    """Play the scenario on ``Engine(config, factory)``, checking after every step (on
    past the first violation, for the symptoms that follow); drain at the end if no
    violation occurred."""
    engine = Engine(scenario.config, factory)
    snapshots: list[Snapshot] = []
    violations: list[Violation] = []
    for action in scenario.actions:
        snapshot = apply(engine, action)
        if snapshot is not None:
            snapshots.append(snapshot)
            violations.extend(check(snapshot, engine.config))
    final = engine.snapshot()
    drained = None
    after_drain = None
    if not violations:
        drained = drain(engine)
        violations.extend(drained.violations)
        after_drain = engine.snapshot()
    return Observation(
        scenario=scenario.name,
        ids={label: rid for rid, label in enumerate(scenario.labels, start=1)},
        snapshots=tuple(snapshots),
        violations=tuple(violations),
        final=final,
        drain=drained,
        after_drain=after_drain,
    )


# ---- the nine scenarios ----

# Adapter task ids.
X, Y = 1, 2


# A generates alone; a failed grow (and no one after it to evict) self-evicts it.
# Shared by the suspend-side scenarios, each with its own LoRA caches.
_SELF_EVICT = (
    submit(4, 3, adapter=X),  # A
    STEP,  # 1: A prefills (1 page), registers X, emits token 1
    FAIL_GROW,
    STEP,  # 2: A's grow fails, no victim after it: self-evicted, pages to the host tier
)

# Two context requests, R1 (no adapter) before R2 (adapter X), in a pool with no
# lower tier, one chunk of 4 tokens per pass, 2 tokens per page, 4 pages. The executor
# leaves the recompute teardown to the scheduler (the opt-in rule these mutants break:
# upstream's executor terminates the ownership itself, and R2, sent with weights only,
# could then not come back once R3's adapter evicts X from the host cache).
_PREEMPT_WORLD = EngineConfig(
    recompute_teardown="scheduler_only",
    device_pages=4,
    host_pages=0,
    tokens_per_block=2,
    lora_device_pages=1,
    lora_host_pages=1,
    adapter_pages=((X, 1), (Y, 1)),
    max_num_tokens=4,
    enable_chunked_context=True,
    chunk_unit_size=4,
)
_PREEMPT = (
    FAIL_GROW,
    STEP,  # 1: R1's first chunk fails (freed, rewound); R2 takes chunk 4 (2 pages), owns X
    STEP,  # 2: R1 takes chunk 4 (2 pages, pool full); no token left for R2
    STEP,  # 3: R1's last chunk cannot grow, no lower tier: R2 (ACTIVE) is preempted
)
# R2 (X) is preempted while ACTIVE at step 3 and leaves recompute-paused.
_R2_PREEMPTED = (
    submit(5, 1),  # R1
    submit(6, 1, adapter=X),  # R2
    *_PREEMPT,  # 3: R1 finishes; R2 is recompute-paused, in paused[X]
)
_PREEMPTED = (
    Called("resize_context", "R1", result=False, facts=Facts(fault="failed_grow"), step=1),
    Called("resize_context", "R1", result=False, facts=Facts(fault="no_device_room"), step=3),
    Called("free_resources", "R2", facts=Facts(was_active=True, started=True), step=3),
    Called("mark_request_done", "R2", component="peft", args=Args(pause=True), step=3),
)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="no_release_on_suspend",
        description=(
            "Device LoRA cache fits one adapter. A (X) generates and is self-evicted; its "
            "resume is refused, so B (Y) is admitted: X must be done on device for Y to load."
        ),
        config=EngineConfig(
            device_pages=4,
            host_pages=4,
            lora_device_pages=1,
            lora_host_pages=2,
            adapter_pages=((X, 1), (Y, 1)),
        ),
        labels=("A", "B"),
        actions=(
            *_SELF_EVICT,
            submit(4, 1, adapter=Y),  # B
            REFUSE_RESUME,
            STEP,  # 3: A's resume refused; B admitted, Y evicts the done X on device
        ),
        reached=(
            Called("suspend_request", "A", facts=Facts(moved_to_host=True), step=2),
            Called("mark_request_done", "A", component="peft", args=Args(pause=True), step=2),
            Called("try_allocate_generation", "A", facts=Facts(fault="refused_resume"), step=3),
            Called(
                "ensure_batch",
                None,
                component="peft",
                caller="prepare_resources",
                result="ok",
                args=Args(tasks=(Y,)),
                step=3,
            ),
        ),
        # Mutant: A stays in active[X] while suspended (step 2); ensure_batch finds no
        # done entry for Y (step 3).
        mutant_shows=("ownership_follows_residency", "no_scheduler_caused_fault"),
    ),
    Scenario(
        name="no_reregister_on_resume",
        description=(
            "C and A both hold X. C's grow fails and A is evicted as its victim; A then "
            "resumes and runs while C finishes: A must be back in active[X], or X is "
            "marked done on device while A uses it."
        ),
        config=EngineConfig(
            device_pages=4, host_pages=4, lora_device_pages=1, adapter_pages=((X, 1),)
        ),
        labels=("C", "A"),
        actions=(
            submit(4, 3, adapter=X),  # C
            submit(4, 3, adapter=X),  # A
            STEP,  # 1: C and A prefill (1 page each), both own X, emit token 1
            FAIL_GROW,
            STEP,  # 2: C's grow fails: A, after it, is the victim (suspended); C goes on
            STEP,  # 3: A resumes and re-registers; C finishes, X stays in use for A
        ),
        reached=(
            Called("try_allocate_generation", "C", facts=Facts(fault="failed_grow"), step=2),
            Called("suspend_request", "A", facts=Facts(moved_to_host=True), step=2),
            Called(
                "add_request_peft",
                "A",
                component="peft",
                result="ok",
                facts=Facts(was_paused=True),
                step=3,
            ),
            Called(
                "mark_request_done",
                "C",
                component="peft",
                caller="free_resources",
                args=Args(pause=False),
                facts=Facts(released_device=False),
                step=3,
            ),
        ),
        # Mutant: A runs from paused[X]; C's completion marks X done on device.
        mutant_shows=("ownership_follows_residency", "scheduled_owned_and_resident"),
    ),
    Scenario(
        name="recompute_pause_keeps_ownership",
        description=(
            "Phase-2 preemption with no lower tier: R1's later chunk cannot grow, so R2, "
            "started and ACTIVE, has its KV freed; it must move to paused[X]."
        ),
        config=_PREEMPT_WORLD,
        labels=("R1", "R2"),
        actions=_R2_PREEMPTED,
        reached=_PREEMPTED,
        mutant_shows=("ownership_follows_residency",),
    ),
    Scenario(
        name="recompute_pause_terminates",
        description=(
            "As above, then R3 (Y) asks for the one-adapter host LoRA cache while R2 waits "
            "to prefill again with no weights: X must stay pinned, so R3 fails, and R2 "
            "re-registers from the host cache."
        ),
        config=_PREEMPT_WORLD,
        labels=("R1", "R2", "R3"),
        actions=(
            submit(5, 3),  # R1
            submit(6, 1, adapter=X),  # R2
            *_PREEMPT,  # 3: R1 emits token 1; R2 recompute-paused, in paused[X]
            submit(2, 1, adapter=Y),  # R3
            STEP,  # 4: R1 uses 1 token, R2's chunk (0) is skipped; R3's X-pinned host: fails
            STEP,  # 5: R1 finishes; still no chunk for R2
            STEP,  # 6: R2 prefills again and re-registers X from the host cache
        ),
        reached=(
            *_PREEMPTED,
            Errored("add_request_peft_failed", "R3", "LoraCacheFullException", step=4),
            Called(
                "add_request_peft",
                "R2",
                component="peft",
                caller="prepare_resources",
                result="ok",
                facts=Facts(registered_before=True, was_paused=True),
                step=6,
            ),
        ),
        # Mutant: X unpinned at step 3, evicted from host by Y at step 4, and R2's
        # re-registration raises "not found in cache" at step 6.
        mutant_shows=("ownership_follows_residency", "no_scheduler_caused_fault"),
    ),
    Scenario(
        name="phantom_pause_unstarted",
        description=(
            "The draft pool (2 pages) holds R0's page, so R1's first chunk (X, 2 pages) fits "
            "the target but not the draft: R1 is suspended through the shared helper and "
            "freed, owning nothing; it must not enter paused[X]."
        ),
        config=EngineConfig(
            device_pages=4, draft_device_pages=2, lora_device_pages=1, adapter_pages=((X, 1),)
        ),
        labels=("R0", "R1"),
        actions=(
            submit(4, 1),  # R0
            submit(5, 1, adapter=X),  # R1
            STEP,  # 1: R0 runs and finishes; R1's draft grow fails: suspended, freed, skipped
        ),
        reached=(
            Called("resize_context", "R1", result=True, step=1),
            Called("resize_context", "R1", component="draft", result=False, step=1),
            Called("suspend_request", "R1", step=1),
            Called("free_resources", "R1", facts=Facts(started=False), step=1),
            Idle("R1", step=1),
        ),
        mutant_shows=(
            "ownership_follows_residency",
            "no_phantom_owner",
            "host_pin_follows_ownership",
        ),
    ),
    Scenario(
        name="register_before_allocation",
        description=(
            "A (X) generates and is self-evicted; its next resume is refused, so it stays "
            "suspended and must stay in paused[X], not re-enter active[X]."
        ),
        config=EngineConfig(
            device_pages=4, host_pages=4, lora_device_pages=1, adapter_pages=((X, 1),)
        ),
        labels=("A",),
        actions=(
            *_SELF_EVICT,
            REFUSE_RESUME,
            STEP,  # 3: A's resume is refused: still suspended, not registered
        ),
        reached=(
            Called("suspend_request", "A", step=2),
            Called("try_allocate_generation", "A", facts=Facts(fault="refused_resume"), step=3),
            Idle("A", step=3),
        ),
        mutant_shows=("ownership_follows_residency", "device_pin_follows_ownership"),
    ),
    Scenario(
        name="pause_flag_dropped",
        description=(
            "Host LoRA cache fits one adapter. A (X) is self-evicted; while it waits "
            "(resume refused) B (Y) asks for the host cache: X must stay pinned, so B fails."
        ),
        config=EngineConfig(
            device_pages=4,
            host_pages=4,
            lora_device_pages=1,
            lora_host_pages=1,
            adapter_pages=((X, 1), (Y, 1)),
        ),
        labels=("A", "B"),
        actions=(
            *_SELF_EVICT,
            submit(4, 1, adapter=Y),  # B
            REFUSE_RESUME,
            STEP,  # 3: A waits; B's adapter does not fit the pinned host cache: B fails
        ),
        reached=(
            Called("suspend_request", "A", step=2),
            Called("mark_request_done", "A", component="peft", args=Args(pause=True), step=2),
            Errored("add_request_peft_failed", "B", "LoraCacheFullException", step=3),
        ),
        mutant_shows=("ownership_follows_residency",),
    ),
    Scenario(
        name="draft_not_suspended",
        description="A (X) with a draft pool is self-evicted: both pools must suspend it.",
        config=EngineConfig(
            device_pages=4, draft_device_pages=4, lora_device_pages=1, adapter_pages=((X, 1),)
        ),
        labels=("A",),
        actions=(
            *_SELF_EVICT,
            STEP,  # 3: A resumes in both pools and goes on
        ),
        reached=(
            Called("suspend_request", "A", step=2),
            Called("suspend_request", "A", component="draft", step=2),
            Called("try_allocate_generation", "A", component="draft", result=True, step=3),
        ),
        mutant_shows=("draft_mirrors_target",),
    ),
    Scenario(
        name="budget_ignores_unscheduled_owners",
        description=(
            "Device LoRA cache fits one adapter. O (X) is started mid-prefill but its next "
            "chunk finds no token left after G's, so it is skipped while X stays in use on "
            "device; B (Y) must not be admitted past the PEFT budget."
        ),
        config=EngineConfig(
            device_pages=8,
            lora_device_pages=1,
            lora_host_pages=2,
            adapter_pages=((X, 1), (Y, 1)),
            max_num_tokens=4,
            enable_chunked_context=True,
            chunk_unit_size=4,
        ),
        labels=("G", "O", "B"),
        actions=(
            submit(1, 2),  # G
            submit(8, 1, adapter=X),  # O
            FAIL_GROW,
            STEP,  # 1: G's first chunk fails (rewound); O takes chunk 4, owns X on device
            submit(2, 1, adapter=Y),  # B
            STEP,  # 2: G takes 1 token; O's chunk is 0: skipped; B's Y exceeds the budget
        ),
        reached=(
            Called("resize_context", "G", result=False, facts=Facts(fault="failed_grow"), step=1),
            Idle("O", owning=True, step=2),
            Idle("B", step=2),
        ),
        mutant_shows=("no_scheduler_caused_fault",),
    ),
    Scenario(
        name="recompute_pause_reregisters",
        description=(
            "The preemption above: R2, started and ACTIVE, has its KV freed and is released "
            "with pause; it stays recompute-pending until the executor registers its first "
            "chunk again, whatever the scheduler calls in between."
        ),
        config=_PREEMPT_WORLD,
        labels=("R1", "R2"),
        actions=_R2_PREEMPTED,  # the mutant registers R2 again at step 3
        reached=_PREEMPTED,
        mutant_shows=("ownership_follows_residency", "no_duplicate_registration"),
    ),
    Scenario(
        name="token_budget_ignored",
        description=(
            "A budget of 4 tokens and two prompts of 3: the first runs whole, the second "
            "gets the one token left (a chunk of 1), never its whole prompt."
        ),
        config=EngineConfig(max_num_tokens=4, enable_chunked_context=True, chunk_unit_size=1),
        labels=("A", "B"),
        actions=(
            submit(3, 1),  # A
            submit(3, 1),  # B
            STEP,  # 1: A runs whole (3 tokens), B a chunk of 1; the mutant runs both whole
        ),
        reached=(
            Called("resize_context", "A", facts=Facts(capacity=3), step=1),
            Called("resize_context", "B", facts=Facts(capacity=1), step=1),
        ),
        mutant_shows=("output_lists_well_formed",),
    ),
    Scenario(
        name="finishes_by_writing_tokens",
        description=(
            "A generates three tokens; only the executor moves its token count, so it "
            "finishes at the third step, not when a scheduler says so."
        ),
        config=EngineConfig(),
        labels=("A",),
        actions=(
            submit(2, 3),  # A
            STEP,  # 1: A prefills and emits token 1
            STEP,  # 2: A emits token 2; the mutant sets it to 2 before the executor runs
        ),
        reached=(Called("try_allocate_generation", "A", result=True, step=2),),
        mutant_shows=("scheduler_writes_only_its_own",),
    ),
)

BY_NAME = {s.name: s for s in SCENARIOS}
IDS = [s.name for s in SCENARIOS]


def _describe(obs: Observation) -> str:
    """A readable trace of a run, for assertion messages."""
    lines = []
    for snap in obs.snapshots:
        out = snap.step.output if snap.step else None
        lists = (
            "no output"
            if out is None
            else ", ".join(f"{k}={[obs.label(r) for r in ids]}" for k, ids in out.lists() if ids)
        )
        owners = "; ".join(
            f"{a.task_id}: active {[obs.label(r) for r in sorted(a.active)]}"
            f" paused {[obs.label(r) for r in sorted(a.paused)]}"
            for a in snap.adapters
        )
        lines.append(f"step {snap.iteration}: {lists} | {owners}")
    lines.extend(str(v) for v in obs.violations[:5])
    return "\n".join(lines)


# ---- the tests ----


def test_one_scenario_per_mutant() -> None:
    # The overlap executor's mutants have their triggers in tests/world/test_overlap.py.
    simple = [m for m in mutants.CATALOGUE if not m.overlap]
    assert len(SCENARIOS) == len(BY_NAME) == len(simple)
    assert set(BY_NAME) == {m.name for m in simple}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
def test_reference_runs_clean_and_drains(scenario: Scenario) -> None:
    requests = [(s.lora_task_id, s.prompt_len, s.max_new_tokens) for s in scenario.submissions()]
    assert can_drain(scenario.config, requests), "the drain bound must bind in this world"
    obs = run_scenario(scenario, ReferenceScheduler)
    assert obs.violations == (), _describe(obs)
    assert list(ownership_follows_residency(obs.final)) == []
    assert obs.drain is not None and obs.after_drain is not None
    assert obs.after_drain.requests == (), "every request must finish or fail in the drain"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
def test_reference_reaches_the_trigger(scenario: Scenario) -> None:
    obs = run_scenario(scenario, ReferenceScheduler)
    missed = [probe for probe in scenario.reached if not probe.seen(obs)]
    assert missed == [], _describe(obs)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
def test_mutant_is_caught(scenario: Scenario) -> None:
    obs = run_scenario(scenario, mutants.BY_NAME[scenario.name].scheduler)
    first = obs.first_violation
    assert first is not None, _describe(obs)
    assert first.iteration <= obs.steps, f"caught only by the drain: {first}"
    # The first catch is the first violating iteration; within it, the order is only
    # the checker's listing order, so any of its violations may be the acceptable one.
    caught = {v.invariant for v in obs.first_catch}
    assert caught & set(mutants.BY_NAME[scenario.name].acceptable), _describe(obs)
    shown = {v.invariant for v in obs.violations}
    assert set(scenario.mutant_shows) <= shown, _describe(obs)


def test_runs_are_deterministic() -> None:
    for scenario in SCENARIOS:
        first = run_scenario(scenario, ReferenceScheduler)
        second = run_scenario(scenario, ReferenceScheduler)
        assert first.snapshots == second.snapshots
        assert first.drain == second.drain
