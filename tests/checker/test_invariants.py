"""The checker (docs/invariants.md), invariant by invariant.

Every invariant gets a hand-built snapshot that breaks it and a near-identical
one that does not. Snapshots start from ``baseline()`` (tests/builders.py), a
small consistent world (one running request owning adapter 7, one waiting
request, one KV pool with consistent pages, both LoRA caches), and
``attrs.evolve`` breaks one thing at a time. Invariant 12 (the drain) runs real
engines.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest
from tests.builders import (
    ACTIVE,
    ADAPTER_PAGES,
    BREAKS,
    CTX,
    DONE,
    DONE_STATE,
    GEN,
    IN_USE,
    NONE,
    RUNNING_KV,
    SUSPENDED,
    SUSPENDED_KV,
    TASK,
    adapter,
    baseline,
    call,
    empty_world,
    listed,
    lora_caches,
    output,
    peft_args,
    phantom_release,
    pool,
    refused,
    running,
    scheduled,
    waiting,
    with_adapter,
    with_calls,
    with_errors,
    with_output,
    with_requests,
    with_step,
)

from peftlife.checker import registry
from peftlife.checker.drain import DrainResult, _drained_empty, can_drain, drain, drain_bound
from peftlife.checker.invariants import Subject, Violation, expected_ownership
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
from peftlife.world.kv import NO_CACHE, CacheView, PoolView
from peftlife.world.ledger import Call, Caller, Facts
from peftlife.world.output import runnable
from peftlife.world.peft import CacheEntryView
from peftlife.world.protocol import SchedulerOutput
from peftlife.world.residency import Residency
from peftlife.world.snapshot import (
    AdapterView,
    FieldWrite,
    ListedView,
    RequestView,
    Snapshot,
    StepError,
)

# The hand-built snapshots are of a simple-loop world.
WORLD = EngineConfig()


def check(s: Snapshot) -> list[Violation]:
    return registry.check(s, WORLD)


def run(name: str, s: Snapshot) -> list[Violation]:
    rule = registry.BY_NAME[name].check
    assert rule is not None
    return list(rule(s))


def assert_flags(name: str, s: Snapshot, subject: str) -> list[Violation]:
    """The invariant finds violations, all under its name, one about ``subject``."""
    found = run(name, s)
    assert found, f"{name} found nothing"
    assert {v.invariant for v in found} == {name}
    assert subject in {str(v.subject) for v in found}, [str(v) for v in found]
    assert {v.iteration for v in found} == {s.iteration}
    # check() reports them too.
    assert set(found) <= set(check(s))
    return found


def assert_clean(name: str, s: Snapshot) -> None:
    found = run(name, s)
    assert found == [], [str(v) for v in found]


def only(name: str, s: Snapshot, subject: str) -> Violation:
    found = assert_flags(name, s, subject)
    assert len(found) == 1, [str(v) for v in found]
    return found[0]


# ---- the catalogue and the baseline ----


def test_invariants_are_the_twelve_of_the_spec_in_order() -> None:
    assert list(registry.names()) == [
        "ownership_follows_residency",
        "exclusive_ownership",
        "no_phantom_owner",
        "no_duplicate_registration",
        "device_pin_follows_ownership",
        "host_pin_follows_ownership",
        "scheduled_owned_and_resident",
        "output_lists_well_formed",
        "scheduler_writes_only_its_own",
        "draft_mirrors_target",
        "pages_conserved",
        "no_scheduler_caused_fault",
        "drain_completes",
        "retiring_keeps_its_place",
        "in_flight_pin",
        "nothing_after_teardown",
        "dead_stay_dead",
        "scheduler_protocol",
    ]


@pytest.mark.parametrize("draft", [False, True], ids=["target only", "with draft"])
def test_baseline_is_clean(draft: bool) -> None:
    assert check(baseline(draft=draft)) == []


def test_baseline_without_step_record_is_clean() -> None:
    assert check(attrs.evolve(baseline(), step=None)) == []


def test_an_empty_world_is_clean() -> None:
    empty = Snapshot(0, (), (), (), (pool(holders=()),), (), None)
    assert check(empty) == []


def test_a_second_idempotent_free_is_not_a_violation() -> None:
    """Upstream frees a recompute-paused request that then finishes twice: both frees,
    and both terminations, are idempotent (py_executor.py, _handle_responses)."""
    twice = with_calls(
        baseline(),
        call("free_resources", 1, caller="recompute_teardown", component="target"),
        call("mark_request_done", 1, caller="recompute_teardown", args=peft_args(False)),
        call("free_resources", 1, caller="free_resources", component="target"),
        call("mark_request_done", 1, caller="free_resources", args=peft_args(False)),
    )
    assert run("nothing_after_teardown", twice) == []


def test_every_invariant_has_a_break() -> None:
    # The overlap executor's three are broken at their edges in tests/world/test_overlap.py.
    everywhere = {i.name for i in registry.REGISTRY if i.check and i.scope is registry.EVERY_WORLD}
    assert sorted(name for name, _, _ in BREAKS) == sorted(everywhere)


@pytest.mark.parametrize(("name", "breaking", "subject"), BREAKS, ids=[b[0] for b in BREAKS])
def test_each_invariant_can_fail_and_pass(
    name: str, breaking: Callable[[Snapshot], Snapshot], subject: str
) -> None:
    clean = baseline()
    assert_clean(name, clean)
    assert_flags(name, breaking(clean), subject)


# ---- 1. ownership follows residency ----


def test_expected_ownership_per_clause() -> None:
    assert expected_ownership(running()) == "active"
    assert expected_ownership(running(target=SUSPENDED_KV)) == "paused"
    assert expected_ownership(waiting()) == "none"
    # No clause for an unstarted request that registered before (e.g. a later chunk
    # whose registration is undone, or a request between chunks).
    assert expected_ownership(waiting(ever_registered=True)) is None
    # Nor for a started request with no KV that is not recompute-pending.
    assert expected_ownership(running(target=NO_CACHE)) is None


def test_a_started_context_request_not_run_may_still_be_paused() -> None:
    """Resumed mid-prefill but its chunk did not fit: upstream's executor registers it
    when it runs, so paused is as good as active until then; once run, active only."""
    mid_prefill = running(state=CTX, position=2, num_generated=0)
    assert expected_ownership(mid_prefill, scheduled=False) == "active or paused"
    assert expected_ownership(mid_prefill, scheduled=True) == "active"
    # A generation request resumed and not re-registered stays a finding either way.
    assert expected_ownership(running(), scheduled=False) == "active"


@pytest.mark.parametrize("started", [True, False])
@pytest.mark.parametrize("residency", [ACTIVE, SUSPENDED, NONE])
def test_expected_ownership_recompute_pending_is_not_active(
    started: bool, residency: Residency
) -> None:
    view = running(
        started=started,
        ever_registered=started,
        recompute_pending=True,
        target=attrs.evolve(RUNNING_KV, residency=residency),
    )
    # Upstream's executor terminates it; where the executor leaves the teardown to the
    # scheduler (opt-in), the scheduler must have paused it.
    assert expected_ownership(view) == "paused or none"
    assert expected_ownership(view, scheduler_tears_down=True) == "paused"


def test_started_active_must_be_active() -> None:
    s = baseline()
    assert_clean("ownership_follows_residency", s)
    for a, found in (
        (adapter(active=(), device=DONE), "none"),
        (adapter(active=(), paused=(1,), device=DONE), "paused"),
    ):
        v = only("ownership_follows_residency", with_adapter(s, a), "request 1 (adapter 7)")
        assert (v.expected, v.found) == ("active (started, KV active)", found)


def test_started_active_with_no_adapter_view_at_all() -> None:
    v = only(
        "ownership_follows_residency",
        attrs.evolve(baseline(), adapters=()),
        "request 1 (adapter 7)",
    )
    assert v.found == "none"


def test_started_suspended_must_be_paused() -> None:
    suspended = with_requests(baseline(), running(target=SUSPENDED_KV), waiting())
    v = only("ownership_follows_residency", suspended, "request 1 (adapter 7)")
    assert (v.expected, v.found) == ("paused (started, KV suspended)", "active")
    fixed = with_adapter(suspended, adapter(active=(), paused=(1,), device=DONE))
    assert_clean("ownership_follows_residency", fixed)
    assert check(attrs.evolve(fixed, step=None, pools=(pool(holders=((1, 0, 2),)),))) == []


def test_owned_both_is_reported_as_both() -> None:
    v = only(
        "ownership_follows_residency",
        with_adapter(baseline(), adapter(active=(1,), paused=(1,))),
        "request 1 (adapter 7)",
    )
    assert v.found == "both"


def recompute_pending_world(view: RequestView, a: AdapterView) -> Snapshot:
    return with_adapter(with_requests(baseline(), view, waiting()), a)


def _scheduler_tears_down(s: Snapshot) -> Snapshot:
    assert s.step is not None
    return attrs.evolve(s, step=attrs.evolve(s.step, scheduler_tears_down=True))


def test_recompute_pending_after_a_recompute_pause_is_not_active() -> None:
    # The realistic case: KV freed, rewound to a first chunk (so unstarted), registered before.
    view = running(state=CTX, position=0, started=False, recompute_pending=True, target=NO_CACHE)
    paused = adapter(active=(), paused=(1,), device=DONE)
    terminated = adapter(active=(), device=DONE)
    assert_clean("ownership_follows_residency", recompute_pending_world(view, paused))
    # Upstream's executor terminates the ownership: nothing is what it leaves.
    assert_clean("ownership_follows_residency", recompute_pending_world(view, terminated))
    v = only(
        "ownership_follows_residency",
        recompute_pending_world(view, adapter()),
        "request 1 (adapter 7)",
    )
    assert (v.expected, v.found) == ("paused or none (recompute-pending)", "active")
    # Where the scheduler owns the teardown, a terminate loses the host pin it must keep.
    v = only(
        "ownership_follows_residency",
        _scheduler_tears_down(recompute_pending_world(view, terminated)),
        "request 1 (adapter 7)",
    )
    assert (v.expected, v.found) == ("paused (recompute-pending)", "none")


@pytest.mark.parametrize("kv", [RUNNING_KV, NO_CACHE], ids=["ACTIVE", "NONE"])
def test_recompute_pending_clause_wins_over_started(kv: CacheView) -> None:
    view = running(recompute_pending=True, target=kv)
    v = only(
        "ownership_follows_residency",
        recompute_pending_world(view, adapter()),
        "request 1 (adapter 7)",
    )
    assert (v.expected, v.found) == ("paused or none (recompute-pending)", "active")
    paused = adapter(active=(), paused=(1,), device=DONE)
    assert_clean("ownership_follows_residency", recompute_pending_world(view, paused))


@pytest.mark.parametrize("where", ["active", "paused"])
def test_unstarted_never_registered_owns_nothing(where: str) -> None:
    owners = {"active": (1,), "paused": ()}
    if where == "active":
        owners["active"] = (1, 2)
    else:
        owners["paused"] = (2,)
    s = with_adapter(baseline(), adapter(**owners))  # type: ignore[arg-type]
    v = only("ownership_follows_residency", s, "request 2 (adapter 7)")
    assert (v.expected, v.found) == ("none (unstarted, KV none)", where)


@pytest.mark.parametrize("owners", [{"active": (1, 2)}, {"paused": (2,)}], ids=["active", "paused"])
def test_no_expectation_for_unstarted_but_registered(owners: dict[str, tuple[int, ...]]) -> None:
    s = with_adapter(
        with_requests(baseline(), running(), waiting(ever_registered=True)),
        adapter(**{"active": (1,), **owners}),  # type: ignore[arg-type]
    )
    assert_clean("ownership_follows_residency", s)


def test_unstarted_recompute_pending_is_not_held_to_none() -> None:
    # Never-registered plus recompute-pending: the pending clause applies, not "none".
    view = waiting(recompute_pending=True)
    s = with_adapter(with_requests(baseline(), running(), view), adapter(active=(1,), paused=(2,)))
    assert_clean("ownership_follows_residency", s)


def test_requests_without_adapter_are_ignored() -> None:
    s = with_requests(
        baseline(),
        running(),
        waiting(),
        running(3, lora_task_id=None),
        running(4, lora_task_id=None, target=SUSPENDED_KV),
        waiting(5, lora_task_id=None, recompute_pending=True),
    )
    assert_clean("ownership_follows_residency", s)
    # The same requests with an adapter they do not own are reported (the
    # recompute-pending one where the scheduler owns its teardown).
    with_adapters = _scheduler_tears_down(
        with_requests(
            s,
            *(attrs.evolve(v, lora_task_id=TASK) if v.request_id > 2 else v for v in s.requests),
        )
    )
    found = run("ownership_follows_residency", with_adapters)
    assert {str(v.subject) for v in found} == {
        "request 3 (adapter 7)",
        "request 4 (adapter 7)",
        "request 5 (adapter 7)",
    }


def test_ownership_is_per_adapter() -> None:
    # Request 1 is in active of adapter 8, not of its own adapter 7.
    s = attrs.evolve(
        baseline(),
        adapters=(adapter(active=(), device=DONE), adapter(task_id=8, active=(1,))),
    )
    v = only("ownership_follows_residency", s, "request 1 (adapter 7)")
    assert v.found == "none"


# ---- 2. exclusive ownership ----


def test_exclusive_ownership() -> None:
    s = with_adapter(baseline(), adapter(active=(1,), paused=(1,)))
    v = only("exclusive_ownership", s, "adapter 7")
    assert "request 1" in v.expected
    assert v.found == "in both"
    assert_clean("exclusive_ownership", with_adapter(baseline(), adapter(active=(1,), paused=(2,))))


def test_exclusive_ownership_one_violation_per_request() -> None:
    s = with_adapter(
        with_requests(baseline(), running(), running(2)),
        adapter(active=(1, 2), paused=(1, 2)),
    )
    found = assert_flags("exclusive_ownership", s, "adapter 7")
    assert [v.expected for v in found] == [
        "request 1 in at most one of active and paused",
        "request 2 in at most one of active and paused",
    ]


# ---- 3. no phantom owner ----


@pytest.mark.parametrize("where", ["active", "paused"])
def test_phantom_owner_not_live(where: str) -> None:
    owners = {"active": (1,), "paused": ()}
    owners[where] = (*owners[where], 99)
    v = only("no_phantom_owner", with_adapter(baseline(), adapter(**owners)), "adapter 7")  # type: ignore[arg-type]
    assert v.found == "request 99, a request that is no longer live"
    assert v.expected == f"{where} to hold only live, registered requests"


def test_phantom_owner_live_but_never_registered() -> None:
    s = with_adapter(baseline(), adapter(active=(1,), paused=(2,)))
    v = only("no_phantom_owner", s, "adapter 7")
    assert v.found == "request 2, a request that never registered"
    registered = with_requests(s, running(), waiting(ever_registered=True))
    assert_clean("no_phantom_owner", registered)


def test_phantom_release_with_pause() -> None:
    s = with_calls(baseline(), phantom_release())
    v = only("no_phantom_owner", s, "request 2 (adapter 7)")
    assert "by the scheduler" in v.found


@pytest.mark.parametrize(
    "harmless",
    [
        phantom_release(was_active=True),
        phantom_release(was_paused=True),  # releasing a paused request again is harmless
        call(
            "mark_request_done",
            2,
            args=peft_args(pause=False),
            was_active=False,
            was_paused=False,
        ),
    ],
    ids=["was active", "was paused", "no pause"],
)
def test_release_that_is_not_a_phantom(harmless: Call) -> None:
    assert_clean("no_phantom_owner", with_calls(baseline(), harmless))


def test_phantom_release_is_flagged_whoever_makes_it() -> None:
    s = with_calls(baseline(), attrs.evolve(phantom_release(), caller="free_resources"))
    v = only("no_phantom_owner", s, "request 2 (adapter 7)")
    assert "by the free_resources" in v.found


# ---- 4. no duplicate registration ----


def registration(caller: Caller, already_active: bool, rid: int = 1, **facts: object) -> Call:
    detail: dict[str, object] = dict(
        already_active=already_active, was_paused=False, registered_before=True, started=True
    )
    detail.update(facts)
    return call("add_request_peft", rid, caller=caller, args=peft_args(), result="ok", **detail)


def kv_call(method: str, before: str, after: str, result: object = True, **kw: object) -> Call:
    return call(
        method,
        1,
        component=kw.pop("component", "target"),
        result=result,  # type: ignore[arg-type]
        before=Residency(before),
        after=Residency(after),
        **kw,
    )


RESUMED = kv_call("try_allocate_generation", "suspended", "active")


def test_scheduler_registering_an_active_request_is_flagged() -> None:
    s = with_calls(baseline(), RESUMED, registration("scheduler", already_active=True))
    v = only("no_duplicate_registration", s, "request 1 (adapter 7)")
    assert v.found == "the scheduler registered it again while it was in active"


@pytest.mark.parametrize(
    "allowed",
    [
        (registration("prepare_resources", True),),
        (RESUMED, registration("scheduler", False)),
        # A failed grow leaves the resumed cache ACTIVE; the retry succeeds.
        (
            kv_call("try_allocate_generation", "suspended", "active", result=False),
            kv_call("try_allocate_generation", "active", "active"),
            registration("scheduler", False),
        ),
    ],
    ids=["executor per-chunk registration", "scheduler resume", "resume then retry"],
)
def test_allowed_registrations(allowed: tuple[Call, ...]) -> None:
    assert_clean("no_duplicate_registration", with_calls(baseline(), *allowed))


@pytest.mark.parametrize(
    ("calls", "pending", "found"),
    [
        (
            (registration("scheduler", False, started=False),),
            (),
            "the scheduler registered a request that has not started (the executor's to do)",
        ),
        (
            (RESUMED, registration("scheduler", False)),
            (1,),
            "the scheduler registered a recompute-pending request "
            "(the executor registers it when its first chunk runs again)",
        ),
        (
            (
                kv_call("free_resources", "active", "none", None, had_cache=True, started=True),
                registration("scheduler", False),
            ),
            (),
            "the scheduler registered a recompute-pending request "
            "(the executor registers it when its first chunk runs again)",
        ),
        (
            (registration("scheduler", False),),
            (),
            "the scheduler registered a request it did not resume in this pass",
        ),
        (
            (
                kv_call("try_allocate_generation", "suspended", "active", result=False),
                registration("scheduler", False),
            ),
            (),
            "the scheduler registered it before its allocation succeeded",
        ),
        (
            (
                RESUMED,
                kv_call("revert_allocate_generation", "active", "active", None),
                registration("scheduler", False),
            ),
            (),
            "the scheduler registered it before its allocation succeeded",
        ),
        (
            (RESUMED, registration("scheduler", False), registration("scheduler", False)),
            (),
            "the scheduler registered it a second time in one pass",
        ),
    ],
    ids=[
        "first chunk",
        "recompute-pending before the pass",
        "freed for recompute in this pass",
        "not resumed",
        "allocation failed",
        "allocation reverted",
        "twice",
    ],
)
def test_registration_by_the_scheduler_is_only_on_resume(
    calls: tuple[Call, ...], pending: tuple[int, ...], found: str
) -> None:
    s = with_step(baseline(), calls=calls, recompute_pending_before=frozenset(pending))
    v = only("no_duplicate_registration", s, "request 1 (adapter 7)")
    assert v.found == found


def test_registration_with_a_draft_pool_waits_for_the_draft_allocation() -> None:
    s = baseline(draft=True)
    early = with_calls(s, RESUMED, registration("scheduler", False))
    v = only("no_duplicate_registration", early, "request 1 (adapter 7)")
    assert v.found == "the scheduler registered it before its allocation succeeded"
    draft_ok = kv_call("try_allocate_generation", "suspended", "active", component="draft")
    assert_clean(
        "no_duplicate_registration",
        with_calls(s, RESUMED, draft_ok, registration("scheduler", False)),
    )


# ---- 5. device pin follows ownership ----


@pytest.mark.parametrize(("device", "word"), [(DONE, "done"), (None, "absent")])
def test_active_owner_but_device_not_in_use(device: CacheEntryView | None, word: str) -> None:
    v = only(
        "device_pin_follows_ownership",
        with_adapter(baseline(), adapter(device=device)),
        "adapter 7",
    )
    assert v.expected == "in use on the device"
    assert v.found == f"device entry {word} with active owners [1]"


def test_device_in_use_without_active_owner() -> None:
    s = with_adapter(baseline(), adapter(active=(), paused=(1,), device=IN_USE))
    v = only("device_pin_follows_ownership", s, "adapter 7")
    assert v.expected == "not in use on the device (no owner)"
    assert v.found == "device entry in use with active owners []"
    for device in (DONE, None):
        ok = with_adapter(baseline(), adapter(active=(), paused=(1,), device=device))
        assert_clean("device_pin_follows_ownership", ok)


# ---- 6. host pin follows ownership ----


@pytest.mark.parametrize(("host", "word"), [(DONE, "done"), (None, "absent")])
@pytest.mark.parametrize(
    "owners", [{"active": (1,)}, {"active": (), "paused": (1,)}], ids=["active", "paused"]
)
def test_owner_but_host_not_in_use(
    host: CacheEntryView | None, word: str, owners: dict[str, tuple[int, ...]]
) -> None:
    s = with_adapter(baseline(), adapter(host=host, device=DONE, **owners))  # type: ignore[arg-type]
    v = only("host_pin_follows_ownership", s, "adapter 7")
    assert v.found.startswith(f"host entry {word} with active ")
    assert_clean(
        "host_pin_follows_ownership",
        with_adapter(baseline(), adapter(host=IN_USE, device=DONE, **owners)),  # type: ignore[arg-type]
    )


def test_no_owner_needs_no_host_pin() -> None:
    for host in (DONE, None, IN_USE):
        s = with_adapter(baseline(), adapter(active=(), host=host, device=DONE))
        assert_clean("host_pin_follows_ownership", s)


# ---- 7. scheduled implies owned and resident ----


def test_scheduled_not_owned() -> None:
    s = with_step(baseline(), after_prepare=(scheduled(owned_active=False),))
    v = only("scheduled_owned_and_resident", s, "scheduled request 1 (adapter 7)")
    assert (v.expected, v.found) == ("in active after prepare_resources", "not in active")


def test_scheduled_without_adapter_needs_no_ownership() -> None:
    s = with_step(baseline(), after_prepare=(scheduled(lora_task_id=None, owned_active=False),))
    assert_clean("scheduled_owned_and_resident", s)


def test_scheduled_ownership_not_judged_without_a_peft_manager() -> None:
    s = attrs.evolve(
        with_step(baseline(), after_prepare=(scheduled(owned_active=False),)),
        adapters=(),
        lora_caches=(),
    )
    assert_clean("scheduled_owned_and_resident", s)


@pytest.mark.parametrize("kv", [SUSPENDED_KV, NO_CACHE], ids=["suspended", "none"])
def test_scheduled_target_not_active(kv: CacheView) -> None:
    s = with_step(baseline(), after_prepare=(scheduled(target=kv),))
    v = only("scheduled_owned_and_resident", s, "scheduled request 1")
    assert (v.expected, v.found) == ("target KV active", f"target KV {kv.residency.value}")


def test_scheduled_capacity_too_small() -> None:
    s = with_step(baseline(), after_prepare=(scheduled(tokens_needed=6),))
    v = only("scheduled_owned_and_resident", s, "scheduled request 1")
    assert (v.expected, v.found) == ("target KV capacity of at least 6 tokens", "capacity 5")
    exact = with_step(baseline(), after_prepare=(scheduled(tokens_needed=5),))
    assert_clean("scheduled_owned_and_resident", exact)


def test_scheduled_draft_not_active_or_too_small() -> None:
    s = baseline(draft=True)
    assert_clean("scheduled_owned_and_resident", s)
    v = only(
        "scheduled_owned_and_resident",
        with_step(s, after_prepare=(scheduled(draft=SUSPENDED_KV),)),
        "scheduled request 1",
    )
    assert (v.expected, v.found) == ("draft KV active", "draft KV suspended")
    small = attrs.evolve(RUNNING_KV, capacity=4)
    v = only(
        "scheduled_owned_and_resident",
        with_step(s, after_prepare=(scheduled(draft=small),)),
        "scheduled request 1",
    )
    assert v.expected == "draft KV capacity of at least 5 tokens"


# ---- 8. output lists ----


def context_world(*views: ListedView) -> Snapshot:
    """Request 2 is listed for its first chunk of 6 tokens as well as request 1 generating."""
    return with_output(baseline(), listed(1, "generation"), *views)


def test_well_formed_lists_pass() -> None:
    s = with_requests(baseline(), running(), waiting(), running(3, target=SUSPENDED_KV))
    s = with_output(
        s,
        listed(1, "generation"),
        listed(2, "context", chunk_size=4),
        listed(3, "paused"),
        listed(4, "recompute_paused"),
    )
    assert_clean("output_lists_well_formed", s)


def test_no_output_no_verdict() -> None:
    assert_clean("output_lists_well_formed", with_step(baseline(), output=None))


@pytest.mark.parametrize(
    ("first", "second"),
    [("generation", "paused"), ("generation", "generation"), ("paused", "recompute_paused")],
)
def test_request_listed_twice(first: str, second: str) -> None:
    s = with_output(baseline(), listed(1, first), listed(1, second))
    found = assert_flags("output_lists_well_formed", s, "request 1")
    assert [v.found for v in found if v.expected == "at most one place in the output"] == [
        f"in {first} and {second}"
    ]


@pytest.mark.parametrize(
    "changes",
    [
        {"live": False, "schedulable": False},
        {"schedulable": False, "state": DONE_STATE},
    ],
    ids=["not live", "not schedulable"],
)
def test_listed_request_not_live_or_schedulable(changes: dict[str, object]) -> None:
    s = with_output(baseline(), listed(1, "generation", **changes))
    v = only("output_lists_well_formed", s, "request 1")
    assert v.expected == "only live, schedulable requests in generation"


@pytest.mark.parametrize(
    "changes",
    [
        {"chunk_size": 0},
        {"chunk_size": 7},
        {"chunk_size": -1},
        {"state": GEN},
    ],
    ids=["zero chunk", "chunk past the prompt", "negative chunk", "not CONTEXT_INIT"],
)
def test_context_request_out_of_range(changes: dict[str, object]) -> None:
    v = only(
        "output_lists_well_formed", context_world(listed(2, "context", **changes)), "request 2"
    )
    assert v.expected == "a context request with 0 < context_chunk_size <= 6"
    assert_clean("output_lists_well_formed", context_world(listed(2, "context", chunk_size=6)))
    assert_clean("output_lists_well_formed", context_world(listed(2, "context", chunk_size=1)))


def test_generation_request_in_wrong_state() -> None:
    s = with_output(baseline(), listed(1, "generation", state=CTX))
    v = only("output_lists_well_formed", s, "request 1")
    assert (v.expected, v.found) == (
        "generation requests in GENERATION_IN_PROGRESS",
        "CONTEXT_INIT",
    )


def test_paused_unstarted() -> None:
    s = with_output(baseline(), listed(1, "generation"), listed(2, "paused", started=False))
    v = only("output_lists_well_formed", s, "request 2")
    assert v.expected == "paused requests started with KV not active"
    assert v.found == "unstarted, KV suspended"


def test_paused_still_active() -> None:
    s = with_output(baseline(), listed(1, "paused", target=ACTIVE))
    v = only("output_lists_well_formed", s, "request 1")
    assert v.found == "started, KV active"
    # The spec asks only for "not ACTIVE": SUSPENDED and NONE both pass.
    for kv in (SUSPENDED, NONE):
        assert_clean(
            "output_lists_well_formed", with_output(baseline(), listed(1, "paused", target=kv))
        )


@pytest.mark.parametrize(
    ("target", "draft", "found"),
    [
        (SUSPENDED, None, "target suspended, draft -"),
        (ACTIVE, None, "target active, draft -"),
        (NONE, ACTIVE, "target none, draft active"),
        (NONE, SUSPENDED, "target none, draft suspended"),
    ],
)
def test_recompute_paused_with_kv(target: Residency, draft: Residency | None, found: str) -> None:
    s = with_output(baseline(), listed(1, "recompute_paused", target=target, draft=draft))
    v = only("output_lists_well_formed", s, "request 1")
    assert (v.expected, v.found) == ("recompute-paused requests with no KV in any pool", found)


def test_recompute_paused_with_no_kv_anywhere_passes() -> None:
    for draft in (None, NONE):
        s = with_output(baseline(), listed(1, "recompute_paused", draft=draft))
        assert_clean("output_lists_well_formed", s)


def scheduler_free(**changes: object) -> Call:
    freed = call(
        "free_resources",
        1,
        component="target",
        had_cache=True,
        was_active=True,
        started=True,
    )
    return attrs.evolve(freed, **changes)


def test_started_request_freed_but_not_listed_as_recompute_paused() -> None:
    s = with_calls(with_output(baseline()), scheduler_free())
    v = only("output_lists_well_formed", s, "request 1")
    assert v.found == "freed but not listed"
    listed_too = with_calls(
        with_output(baseline(), listed(1, "recompute_paused")), scheduler_free()
    )
    assert_clean("output_lists_well_formed", listed_too)


@pytest.mark.parametrize(
    "freed",
    [
        scheduler_free(facts=Facts(had_cache=True, was_active=True, started=False)),
        scheduler_free(caller="free_resources"),
        scheduler_free(component="draft"),
        scheduler_free(method="suspend_request"),
    ],
    ids=["unstarted", "freed by the executor", "draft pool", "suspended, not freed"],
)
def test_frees_that_need_no_recompute_listing(freed: Call) -> None:
    assert_clean("output_lists_well_formed", with_calls(with_output(baseline()), freed))


def budgeted(
    *views: ListedView, batch: int = 8, tokens: int = 64, chunking: bool = True
) -> Snapshot:
    record = attrs.evolve(
        output(*views), max_batch_size=batch, max_num_tokens=tokens, chunking=chunking
    )
    return with_step(baseline(), output=record)


def test_the_batch_keeps_max_batch_size() -> None:
    views = (listed(1, "generation"), listed(2, "context", chunk_size=1))
    assert_clean("output_lists_well_formed", budgeted(*views, batch=2))
    v = only("output_lists_well_formed", budgeted(*views, batch=1), "the batch")
    assert (v.expected, v.found) == ("at most max_batch_size = 1 requests", "2 requests")


def test_the_batch_keeps_max_num_tokens() -> None:
    # A generation request counts one token, a context request its chunk.
    views = (listed(1, "generation"), listed(2, "context", chunk_size=4))
    assert_clean("output_lists_well_formed", budgeted(*views, tokens=5))
    v = only("output_lists_well_formed", budgeted(*views, tokens=4), "the batch")
    assert (v.expected, v.found) == ("at most max_num_tokens = 4 tokens", "5 tokens")


def test_without_chunking_a_context_runs_whole() -> None:
    whole = listed(2, "context", chunk_size=6)
    assert_clean("output_lists_well_formed", budgeted(whole, chunking=False))
    v = only(
        "output_lists_well_formed",
        budgeted(listed(2, "context", chunk_size=4), chunking=False),
        "request 2",
    )
    assert (v.expected, v.found) == (
        "with chunking off, the whole remaining context (6)",
        "a chunk of 4",
    )


@pytest.mark.parametrize(
    ("before", "flagged"),
    [
        ({"started_before": False, "cache_before": False}, True),
        ({"started_before": False, "cache_before": True}, False),
        ({"started_before": True, "cache_before": False}, False),
    ],
)
def test_recompute_paused_must_have_started_or_held_a_cache(
    before: dict[str, bool], flagged: bool
) -> None:
    s = with_output(baseline(), listed(1, "recompute_paused", **before))
    if flagged:
        v = only("output_lists_well_formed", s, "request 1")
        assert v.found == "one that was neither"
    else:
        assert_clean("output_lists_well_formed", s)


@pytest.mark.parametrize(
    ("views", "runs"),
    [
        ((listed(1, "generation"), listed(1, "generation")), False),
        ((listed(1, "generation", live=False),), False),
        ((listed(2, "context", chunk_size=0),), False),
        ((listed(2, "context", state=GEN),), False),
        ((listed(1, "generation", state=CTX),), False),
        ((listed(1, "paused", target=ACTIVE),), True),
        ((listed(1, "recompute_paused", target=SUSPENDED),), True),
        ((listed(1, "generation"), listed(2, "context", chunk_size=1)), True),
    ],
    ids=[
        "twice",
        "not live",
        "empty chunk",
        "context state",
        "generation state",
        "paused active",
        "recompute-paused with KV",
        "over budget",
    ],
)
def test_the_engine_refuses_only_a_batch_it_cannot_run(
    views: tuple[ListedView, ...], runs: bool
) -> None:
    """Every flaw is a violation of invariant 8; the engine still runs a batch whose
    flaws leave each request runnable (world/output.py holds the rules for both)."""
    record = attrs.evolve(output(*views), max_batch_size=1)
    assert runnable(record) is runs
    assert run("output_lists_well_formed", with_step(baseline(), output=record))


# ---- 8b. the scheduler writes only what is its own ----


def test_a_write_names_the_field_the_request_and_both_values() -> None:
    s = with_step(
        baseline(), writes=(FieldWrite(2, "state", "CONTEXT_INIT", "GENERATION_COMPLETE"),)
    )
    v = only("scheduler_writes_only_its_own", s, "request 2")
    assert v.found == "the scheduler changed state from CONTEXT_INIT to GENERATION_COMPLETE"


# ---- 9. draft mirrors target ----


@pytest.mark.parametrize("draft", [SUSPENDED_KV, NO_CACHE], ids=["draft suspended", "draft freed"])
def test_draft_differs_from_target(draft: CacheView) -> None:
    s = baseline(draft=True)
    assert_clean("draft_mirrors_target", s)
    broken = with_requests(s, running(draft=draft), waiting(draft=NO_CACHE))
    v = only("draft_mirrors_target", broken, "request 1 (adapter 7)")
    assert (v.expected, v.found) == (
        "draft KV active, as the target",
        f"draft KV {draft.residency.value}",
    )


def test_draft_judged_by_residency_alone() -> None:
    # Different capacities or pages in the two pools are fine.
    s = with_requests(
        baseline(draft=True), running(draft=attrs.evolve(RUNNING_KV, capacity=8)), waiting()
    )
    assert_clean("draft_mirrors_target", s)


def test_no_draft_pool_nothing_to_mirror() -> None:
    s = with_requests(baseline(), running(draft=None), running(3, lora_task_id=None, draft=None))
    assert_clean("draft_mirrors_target", s)
    broken = with_requests(baseline(), running(3, lora_task_id=None, draft=NO_CACHE))
    only("draft_mirrors_target", broken, "request 3 (no adapter)")


# ---- 10. pages conserved ----


@pytest.mark.parametrize(
    ("tier", "changes"),
    [
        ("device", {"device_free": 7}),
        ("device", {"device_free": 5}),
        ("host", {"host_free": 3}),
        ("host", {"host_capacity": 5}),
    ],
)
def test_free_plus_held_mismatch(tier: str, changes: dict[str, int]) -> None:
    s = attrs.evolve(baseline(), pools=(attrs.evolve(pool(), **changes),))
    v = only("pages_conserved", s, f"target pool, {tier} tier")
    assert v.expected.startswith("free + held = ")


def test_negative_free_is_flagged_even_if_it_adds_up() -> None:
    over = PoolView("target", 8, -2, 4, 4, ((1, 10, 0),))
    s = attrs.evolve(baseline(), pools=(over,))
    v = only("pages_conserved", s, "target pool, device tier")
    assert v.found == "-2 free + 10 held"


def test_mismatch_in_the_draft_pool() -> None:
    s = baseline(draft=True)
    broken = attrs.evolve(s, pools=(pool(), attrs.evolve(pool("draft"), host_free=0)))
    only("pages_conserved", broken, "draft pool, host tier")


def test_holder_not_live() -> None:
    s = attrs.evolve(baseline(), pools=(pool(holders=((1, 2, 0), (99, 1, 2))),))
    v = only("pages_conserved", s, "target pool")
    assert v.found == "request 99 holds 1 device and 2 host pages"
    # The same pages held by a live request are fine.
    alive = with_requests(s, running(), waiting(), running(99, target=SUSPENDED_KV))
    assert_clean("pages_conserved", alive)


@pytest.mark.parametrize("name", ["device", "host"])
def test_lora_cache_mismatch(name: str) -> None:
    caches = tuple(attrs.evolve(c, free=c.free + 1) if c.name == name else c for c in lora_caches())
    s = attrs.evolve(baseline(), lora_caches=caches)
    v = only("pages_conserved", s, f"{name} LoRA cache")
    held = ADAPTER_PAGES
    assert v.found == f"{caches[0 if name == 'device' else 1].free} free + {held} held"


def test_lora_cache_counts_done_entries_as_held() -> None:
    s = attrs.evolve(baseline(), lora_caches=lora_caches(DONE))
    assert_clean("pages_conserved", s)


# ---- 11. no scheduler-caused fault ----


@pytest.mark.parametrize("exception", ["LoraCacheFullException", "PeftTaskNotCachedException"])
def test_ensure_batch_failure_is_flagged(exception: str) -> None:
    err = StepError("ensure_batch_failed", f"ensure_batch raised {exception}", exception=exception)
    v = only("no_scheduler_caused_fault", with_errors(baseline(), err), "the batch")
    assert v.found == f"ensure_batch raised {exception}"


@pytest.mark.parametrize("caller", ["scheduler", "prepare_resources"])
def test_not_cached_for_a_registered_request_is_flagged(caller: Caller) -> None:
    # Judged from the ledger: flagged even when the scheduler caught the exception.
    s = with_calls(baseline(), refused("not_cached", True, caller))
    v = only("no_scheduler_caused_fault", s, "request 2")
    assert v.found.startswith(
        f"add_request_peft(2) by the {caller.replace('_', ' ')} raised PeftTaskNotCachedException"
    )


@pytest.mark.parametrize(
    "refusal",
    [refused("not_cached", False), refused("host_full", True), refused("host_full", False)],
    ids=["not cached, never registered", "host full, registered", "host full, new"],
)
def test_allowed_failures(refusal: Call) -> None:
    assert_clean("no_scheduler_caused_fault", with_calls(baseline(), refusal))
    other = StepError("scheduler_raised", "schedule_request raised ValueError: x")
    assert_clean("no_scheduler_caused_fault", with_errors(baseline(), other))


# ---- the scheduler protocol ----


@pytest.mark.parametrize("kind", ["scheduler_raised", "scheduler_hung", "malformed_output"])
def test_scheduler_protocol_errors(kind: str) -> None:
    s = with_errors(baseline(), StepError(kind, f"what happened: {kind}"))
    v = only("scheduler_protocol", s, "the scheduler")
    assert v.found == f"what happened: {kind}"


@pytest.mark.parametrize("kind", ["ensure_batch_failed", "add_request_peft_failed"])
def test_engine_faults_are_not_protocol_errors(kind: str) -> None:
    assert_clean("scheduler_protocol", with_errors(baseline(), StepError(kind, "x")))


# ---- check() ----


def test_check_reports_the_steps_faults_first_then_spec_order() -> None:
    s = with_errors(
        with_adapter(baseline(), adapter(active=(1,), paused=(1,))),
        StepError("scheduler_hung", "late"),
    )
    names = [v.invariant for v in check(s)]
    # A fault the engine met explains the broken state after it, so it leads.
    assert names[0] == "scheduler_protocol"
    assert names[1:] == sorted(names[1:], key=registry.names().index)
    assert {"exclusive_ownership", "ownership_follows_residency", "scheduler_protocol"} <= set(
        names
    )


# ---- Violation ----


def test_violation_str() -> None:
    v = Violation(
        "pages_conserved", Subject(lead="target pool, device tier"), "free + held = 8", "7 + 2", 12
    )
    assert str(v) == (
        "pages_conserved: target pool, device tier at iteration 12: "
        "expected free + held = 8, found 7 + 2"
    )


def test_violation_iteration_defaults_to_zero() -> None:
    assert (
        str(Violation("x", Subject(lead="y"), "a", "b"))
        == "x: y at iteration 0: expected a, found b"
    )


def test_violations_carry_the_snapshot_iteration() -> None:
    s = attrs.evolve(with_adapter(baseline(), adapter(active=(1,), paused=(1,))), iteration=41)
    assert {v.iteration for v in check(s)} == {41}


# ---- 12. the drain ----


class NeverSchedules:
    """A scheduler that lists nothing, ever."""

    def __init__(self, env: object) -> None:
        pass

    def schedule_request(self, active_requests: object, inflight: object) -> SchedulerOutput:
        return SchedulerOutput()


class StatelessNeverSchedules(NeverSchedules):
    keeps_no_state_between_passes = True


def reference_engine() -> Engine:
    engine = Engine(EngineConfig(adapter_pages=((1, 2), (2, 2))), ReferenceScheduler)
    engine.submit(lora_task_id=1, lora_weights=True, prompt_len=4, max_new_tokens=3)
    engine.submit(lora_task_id=2, lora_weights=True, prompt_len=6, max_new_tokens=2)
    engine.submit(prompt_len=5, max_new_tokens=2)
    return engine


def test_drain_bound_counts_remaining_prompt_and_output_tokens() -> None:
    engine = reference_engine()
    # (4 + 3) + (6 + 2) + (5 + 2) = 22 tokens left.
    assert drain_bound(engine) == 50 + 4 * 22
    engine.step()  # every prompt prefilled, one token generated each
    assert drain_bound(engine) == 50 + 4 * (2 + 1 + 1)


def test_drain_bound_of_an_empty_engine() -> None:
    assert drain_bound(Engine(EngineConfig(), ReferenceScheduler)) == 50


def test_reference_engine_drains_clean() -> None:
    engine = reference_engine()
    result = drain(engine)
    assert isinstance(result, DrainResult)
    assert result.violations == ()
    assert result.bound == 138
    assert 0 < result.iterations == len(result.snapshots) <= result.bound
    assert engine.live_requests == []
    end = engine.snapshot()
    assert check(end) == []
    assert all(not a.active and not a.paused for a in end.adapters)
    assert all(a.device is None or not a.device.in_use for a in end.adapters)
    assert all(a.host is None or not a.host.in_use for a in end.adapters)
    assert all(p.holders == () and p.device_free == p.device_capacity for p in end.pools)
    assert all(p.host_free == p.host_capacity for p in end.pools)


def test_drain_of_a_partly_run_engine() -> None:
    engine = reference_engine()
    engine.step()
    result = drain(engine)
    assert result.violations == ()
    assert result.bound == 66
    assert engine.live_requests == []


def test_drain_stops_at_the_first_violating_step() -> None:
    engine = reference_engine()
    flag = Violation("test", Subject(lead="the world"), "nothing", "something")
    result = drain(engine, checker=lambda s: [flag])
    assert result.iterations == 1
    assert result.violations == (flag,)
    assert engine.live_requests != []


def test_stateless_scheduler_that_never_schedules_stops_upstreams_executor() -> None:
    # Every pass of the repeated world stalls: upstream's count only grows, so its
    # scheduler raises and the executor stops.
    engine = Engine(EngineConfig(), StatelessNeverSchedules)
    engine.submit(prompt_len=1, max_new_tokens=1)
    result = drain(engine)
    assert result.iterations == 2  # the second world repeats the first
    (v,) = result.violations
    assert (v.invariant, str(v.subject)) == ("drain_completes", "requests [1]")
    assert v.found.startswith(
        "the executor stops: V2 scheduler deadlock after 1000 stalled passes "
        "(the world repeated exactly after 2 drain iterations"
    )
    assert v.expected == "every request finished or failed"


class StatelessSuspendsEveryPass(NeverSchedules):
    """Lists every request as paused, every pass: progress in upstream's count."""

    keeps_no_state_between_passes = True

    def schedule_request(self, active_requests: object, inflight: object) -> SchedulerOutput:
        return SchedulerOutput(paused_requests=list(active_requests))  # type: ignore[call-overload]


def test_a_repeated_world_whose_passes_suspend_is_a_silent_livelock() -> None:
    engine = Engine(EngineConfig(), StatelessSuspendsEveryPass)
    engine.submit(prompt_len=1, max_new_tokens=1)
    # Only the drain judges: the output itself breaks invariant 6.
    (v,) = drain(engine, checker=lambda s: []).violations
    assert v.found.startswith("livelock: the world repeated exactly after")
    assert "the executor spins silently" in v.found


def test_stateful_scheduler_that_never_schedules_stalls_on_to_upstreams_count() -> None:
    engine = Engine(EngineConfig(), NeverSchedules)
    engine.submit(prompt_len=1, max_new_tokens=1)
    bound = drain_bound(engine)
    assert bound == 58
    result = drain(engine)
    assert result.iterations == bound == result.bound
    assert len(result.snapshots) == bound + 1  # and the last pass past the bound
    (v,) = result.violations
    assert (v.invariant, str(v.subject)) == ("drain_completes", "requests [1]")
    assert v.found == (
        "the executor stops: V2 scheduler deadlock after 1000 stalled passes "
        "(still live after 1000 iterations)"
    )


class RaisesUpstreamsDeadlock(NeverSchedules):
    """Stalls, then raises upstream's error on its third pass, as its detector would."""

    def __init__(self, env: object) -> None:
        self.passes = 0

    def schedule_request(self, active_requests: object, inflight: object) -> SchedulerOutput:
        self.passes += 1
        if self.passes == 3:
            raise RuntimeError("V2 scheduler deadlock: 1 generation and 0 context request(s)")
        return SchedulerOutput()


def test_upstreams_own_deadlock_error_is_the_drains_finding() -> None:
    engine = Engine(EngineConfig(), RaisesUpstreamsDeadlock)
    engine.submit(prompt_len=1, max_new_tokens=1)
    result = drain(engine)
    assert result.iterations == 3
    (v,) = result.violations
    assert v.invariant == "drain_completes"
    assert v.found.startswith(
        "the executor stops: V2 scheduler deadlock after 1000 stalled passes "
        "(schedule_request raised RuntimeError: V2 scheduler deadlock: 1 generation"
    )


def test_can_drain() -> None:
    base = EngineConfig(adapter_pages=((1, 2),))
    assert can_drain(base, [(1, 4, 3), (None, 5, 2)])
    assert can_drain(base, [])
    # 60 + 5 tokens need 17 pages of 4; the device has 16.
    assert not can_drain(base, [(None, 60, 5)])
    assert can_drain(base, [(None, 60, 4)])
    # The draft pool must fit it too.
    assert not can_drain(attrs.evolve(base, draft_device_pages=2), [(None, 8, 2)])
    # The device LoRA cache must hold the largest adapter.
    assert not can_drain(attrs.evolve(base, adapter_pages=((1, 5),)), [])
    # Without chunking the longest context must fit max_num_tokens.
    assert not can_drain(attrs.evolve(base, max_num_tokens=8), [(None, 6, 4)])
    assert can_drain(attrs.evolve(base, max_num_tokens=8), [(None, 6, 3)])
    assert can_drain(
        attrs.evolve(base, max_num_tokens=8, enable_chunked_context=True), [(None, 6, 4)]
    )
    # Without recompute pause the lower tier must take every cache.
    no_recompute = attrs.evolve(base, enable_recompute_pause=False, host_pages=4)
    assert can_drain(no_recompute, [(None, 4, 4), (None, 4, 4)])
    assert not can_drain(no_recompute, [(None, 4, 4), (None, 4, 5)])


def test_a_request_too_big_for_the_device_does_not_bind_the_drain() -> None:
    config = EngineConfig(device_pages=2)
    assert not can_drain(config, [(None, 10, 2)])
    engine = Engine(config, ReferenceScheduler)
    engine.submit(prompt_len=10, max_new_tokens=2)
    result = drain(engine)
    assert result.violations == ()
    assert result.iterations == result.bound == 50 + 4 * 12
    assert len(engine.live_requests) == 1


def test_no_livelock_verdict_where_the_drain_does_not_bind() -> None:
    config = EngineConfig(device_pages=2)
    engine = Engine(config, StatelessNeverSchedules)
    engine.submit(prompt_len=10, max_new_tokens=2)
    result = drain(engine)
    assert result.violations == ()
    assert result.iterations == result.bound


def test_drain_clears_faults() -> None:
    engine = reference_engine()
    engine.kv_cache_manager.refuse_next_resumes(3)
    engine.kv_cache_manager.fail_next_grows(3)
    result = drain(engine)
    assert engine.kv_cache_manager.pending_faults == (0, 0)
    assert result.violations == ()


def test_drained_world_is_empty() -> None:
    assert list(_drained_empty(empty_world())) == []


@pytest.mark.parametrize(
    ("changes", "subject"),
    [
        ({"adapters": (adapter(active=(), paused=(1,), device=DONE, host=DONE),)}, "adapter 7"),
        ({"adapters": (adapter(active=(1,), device=DONE, host=DONE),)}, "adapter 7"),
        ({"adapters": (adapter(active=(), device=IN_USE, host=DONE),)}, "adapter 7"),
        ({"adapters": (adapter(active=(), device=DONE, host=IN_USE),)}, "adapter 7"),
        ({"pools": (pool(holders=((1, 0, 0),)),)}, "target pool"),
        ({"pools": (attrs.evolve(pool(holders=()), device_free=7),)}, "target pool"),
    ],
    ids=["paused owner", "active owner", "device in use", "host in use", "holder", "pages held"],
)
def test_drained_world_with_something_left(changes: dict[str, object], subject: str) -> None:
    found = list(_drained_empty(empty_world(**changes)))
    assert found
    assert {v.invariant for v in found} == {"drain_completes"}
    assert subject in {str(v.subject) for v in found}


def test_drained_world_not_judged_while_requests_live() -> None:
    world = empty_world(
        requests=(running(),),
        adapters=(adapter(active=(1,)),),
        pools=(pool(),),
    )
    assert list(_drained_empty(world)) == []


def _lora_history(order: tuple[int, int]) -> Snapshot:
    """Adapters 1 and 2 each used by one request, in ``order``; both done at the end."""
    engine = Engine(
        EngineConfig(lora_device_pages=2, lora_host_pages=2, adapter_pages=((1, 1), (2, 1))),
        ReferenceScheduler,
    )
    for task in order:
        engine.submit(prompt_len=2, max_new_tokens=1, lora_task_id=task, lora_weights=True)
        engine.step()
    return engine.snapshot()


def test_the_livelock_fingerprint_covers_the_lora_eviction_order() -> None:
    one, other = _lora_history((1, 2)), _lora_history((2, 1))
    # Same entries, both done: only the order of eviction tells the worlds apart.
    assert [c.entries for c in one.lora_caches] == [c.entries for c in other.lora_caches]
    assert [c.eviction_order for c in one.lora_caches] == [(1, 2), (1, 2)]
    assert [c.eviction_order for c in other.lora_caches] == [(2, 1), (2, 1)]
    assert one.world() != other.world()


# ---- the registry: where each invariant applies ----


def test_a_world_runs_the_checks_of_the_rules_it_holds_in_priority_order() -> None:
    simple = [i.name for i in registry.checks(WORLD)]
    overlap = [i.name for i in registry.checks(EngineConfig(executor="overlap"))]
    assert simple[:3] == [
        "scheduler_protocol",
        "no_scheduler_caused_fault",
        "output_lists_well_formed",
    ]
    assert overlap[:3] == simple[:3]
    only_overlap = {"retiring_keeps_its_place", "in_flight_pin", "dead_stay_dead"}
    assert set(overlap) - set(simple) == only_overlap
    assert "drain_completes" not in overlap  # it steps an engine: the drain runs it


def test_a_rule_a_world_could_break_but_does_not_check_is_not_checked_here() -> None:
    told_nothing = EngineConfig(executor="overlap", inflight_ids="empty")
    pin = registry.BY_NAME["in_flight_pin"]
    assert pin.status(told_nothing) == "not checked here"
    assert pin.status(WORLD) == "does not apply"
    assert pin.status(attrs.evolve(told_nothing, in_flight_pin="always")) == "checked"
    assert registry.not_checked(told_nothing) == (pin,)
    assert registry.not_checked(WORLD) == ()
    assert pin not in registry.checks(told_nothing)


def test_every_record_says_what_it_means_and_where_it_comes_from() -> None:
    for invariant in registry.REGISTRY:
        assert invariant.meaning.endswith("."), invariant.name
        assert invariant.sources, invariant.name
    numbers = [i.number for i in registry.REGISTRY if i.number]
    assert numbers == [*map(str, range(1, 9)), "8b", *map(str, range(9, 17))]
