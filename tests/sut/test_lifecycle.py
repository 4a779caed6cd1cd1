"""docs/protocol.md, row by row: who calls what, in the correct lifecycle.

Each test builds the smallest world in which its row's transition happens
with the reference scheduler, steps it, and asserts the KV moves and the PEFT
calls the row names, reading the call ledger of the step and the ownership
sets of the snapshot. The world is checked clean (``check(snapshot) == []``)
after every step: the reference must never trip an invariant.

World sizing, from the code: a cache of ``c`` tokens holds ``ceil(c / tokens_per_block)``
device pages; a context chunk needs capacity ``position + chunk``; a generation
step needs one token more than the cache holds.
"""

from __future__ import annotations

from typing import Any

import pytest

from peftlife.checker.registry import check
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
from peftlife.world.ledger import Call
from peftlife.world.request import LlmRequestState
from peftlife.world.residency import Residency
from peftlife.world.snapshot import AdapterView, Snapshot

ACTIVE, SUSPENDED, NONE = Residency.ACTIVE, Residency.SUSPENDED, Residency.NONE


# ---- helpers ----


def make(**config: Any) -> Engine:
    # The spec's rows show the scheduler's own releases: the executor leaves them as
    # they are (upstream's PyExecutor then terminates a recompute-paused request's
    # adapter; test_engine and test_overlap show that teardown).
    config.setdefault("recompute_teardown", "scheduler_only")
    return Engine(EngineConfig(**config), ReferenceScheduler)


def step(engine: Engine) -> Snapshot:
    """One iteration; the reference world must be clean after it."""
    snap = engine.step()
    assert snap.step is not None
    assert snap.step.errors == ()
    assert check(snap, engine.config) == []
    return snap


def trace(snap: Snapshot, rid: int) -> list[tuple[str, str, str, object]]:
    """The step's calls about one request: (caller, component, method, result)."""
    assert snap.step is not None
    return [
        (c.caller, c.component, c.method, c.result) for c in snap.step.calls if c.request_id == rid
    ]


def peft_calls(snap: Snapshot, rid: int, method: str | None = None) -> list[Call]:
    assert snap.step is not None
    return [
        c
        for c in snap.step.calls
        if c.component == "peft" and c.request_id == rid and (method is None or c.method == method)
    ]


def adapter(snap: Snapshot, task: int) -> AdapterView:
    for view in snap.adapters:
        if view.task_id == task:
            return view
    raise AssertionError(f"adapter {task} not in the snapshot: {snap.adapters}")


def residency(snap: Snapshot, rid: int) -> tuple[Residency, Residency | None]:
    view = snap.request(rid)
    assert view is not None, f"request {rid} is not live"
    return view.target.residency, None if view.draft is None else view.draft.residency


def lists(snap: Snapshot) -> dict[str, tuple[int, ...]]:
    assert snap.step is not None and snap.step.output is not None
    return dict(snap.step.output.lists())


# ---- row 1: context chunk scheduled -> prepare/resize; executor registers it ----


def test_row1_context_chunk_scheduled_prepares_resizes_and_executor_registers() -> None:
    """Row "context chunk scheduled": the scheduler prepares and resizes the cache in
    both pools for each chunk; prepare_resources registers the request every chunk."""
    engine = make(
        device_pages=8,
        draft_device_pages=8,
        tokens_per_block=4,
        enable_chunked_context=True,
        chunk_unit_size=4,
        max_num_tokens=4,
        adapter_pages=((1, 1),),
    )
    rid = engine.submit(prompt_len=8, max_new_tokens=3, lora_task_id=1, lora_weights=True)

    first = step(engine)
    assert lists(first)["context"] == (rid,)
    assert trace(first, rid) == [
        ("scheduler", "target", "prepare_context", True),
        ("scheduler", "draft", "prepare_context", True),
        ("scheduler", "target", "resize_context", True),
        ("scheduler", "draft", "resize_context", True),
        ("prepare_resources", "peft", "add_request_peft", "ok"),
    ]
    assert [c.facts.capacity for c in first.step.calls if c.method == "resize_context"] == [4, 4]
    assert first.step.calls[0].facts.created is True
    (reg,) = peft_calls(first, rid)
    assert reg.facts.already_active is False and reg.facts.was_paused is False
    view = first.request(rid)
    assert view is not None and view.position == 4 and view.started
    assert view.target.capacity == 4 and view.target.device_pages == 1
    assert adapter(first, 1).active == frozenset({rid}) and adapter(first, 1).paused == frozenset()

    # The second (last) chunk: the cache exists, so prepare_context creates nothing.
    second = step(engine)
    assert lists(second)["context"] == (rid,)
    assert [t[:3] for t in trace(second, rid)] == [
        ("scheduler", "target", "prepare_context"),
        ("scheduler", "draft", "prepare_context"),
        ("scheduler", "target", "resize_context"),
        ("scheduler", "draft", "resize_context"),
        ("prepare_resources", "peft", "add_request_peft"),
    ]
    assert second.step.calls[0].facts.created is None
    assert [c.facts.capacity for c in second.step.calls if c.method == "resize_context"] == [8, 8]
    (again,) = peft_calls(second, rid)
    assert again.caller == "prepare_resources" and again.facts.already_active is True
    view = second.request(rid)
    assert view is not None and view.state is LlmRequestState.GENERATION_IN_PROGRESS
    assert view.target.device_pages == 2 and view.draft is not None and view.draft.device_pages == 2
    assert adapter(second, 1).active == frozenset({rid})


# ---- row 2: started request suspended (victim or self) -> mark_request_done(pause=True) ----


@pytest.mark.parametrize("host_pages", [0, 1], ids=["no_lower_tier", "lower_tier"])
def test_row2_self_eviction_suspends_and_releases_with_pause(host_pages: int) -> None:
    """Row "started request suspended (self)": a lone generation request that cannot
    grow suspends itself and releases its adapter with pause."""
    # One device page holds the 4-token prompt; the first generated token needs a second.
    engine = make(
        device_pages=1, host_pages=host_pages, tokens_per_block=4, adapter_pages=((1, 1),)
    )
    rid = engine.submit(prompt_len=4, max_new_tokens=3, lora_task_id=1, lora_weights=True)
    first = step(engine)
    assert first.request(rid).state is LlmRequestState.GENERATION_IN_PROGRESS

    snap = step(engine)
    assert lists(snap) == {
        "context": (),
        "generation": (),
        "paused": (rid,),
        "recompute_paused": (),
    }
    assert trace(snap, rid) == [
        ("scheduler", "target", "try_allocate_generation", False),
        ("scheduler", "target", "suspend_request", None),
        ("scheduler", "peft", "mark_request_done", None),
    ]
    (release,) = peft_calls(snap, rid)
    assert release.args.pause is True and release.facts.was_active is True
    suspend = next(c for c in snap.step.calls if c.method == "suspend_request")
    assert suspend.facts.moved_to_host is bool(host_pages)
    view = snap.request(rid)
    assert view is not None and view.target.residency is SUSPENDED
    assert (view.target.device_pages, view.target.host_pages) == ((0, 1) if host_pages else (1, 0))
    a = adapter(snap, 1)
    assert a.active == frozenset() and a.paused == frozenset({rid})
    # The device copy became evictable; the host copy stays pinned for the comeback.
    assert a.device is not None and not a.device.in_use
    assert a.host is not None and a.host.in_use


def test_row2_victim_eviction_suspends_both_pools_and_releases_with_pause() -> None:
    """Row "started request suspended (victim)": the first generation request cannot
    grow; the later one is suspended in both pools (pages to the lower tier) and
    released with pause; the first then grows."""
    engine = make(
        device_pages=2,
        host_pages=2,
        draft_device_pages=2,
        draft_host_pages=2,
        tokens_per_block=4,
        adapter_pages=((1, 1), (2, 1)),
    )
    a = engine.submit(prompt_len=4, max_new_tokens=5, lora_task_id=1, lora_weights=True)
    b = engine.submit(prompt_len=4, max_new_tokens=5, lora_task_id=2, lora_weights=True)
    first = step(engine)
    assert lists(first)["context"] == (a, b)

    snap = step(engine)
    assert lists(snap) == {
        "context": (),
        "generation": (a,),
        "paused": (b,),
        "recompute_paused": (),
    }
    assert trace(snap, a) == [
        ("scheduler", "target", "try_allocate_generation", False),
        ("scheduler", "target", "try_allocate_generation", True),
        ("scheduler", "draft", "try_allocate_generation", True),
    ]
    assert trace(snap, b) == [
        ("scheduler", "target", "suspend_request", None),
        ("scheduler", "draft", "suspend_request", None),
        ("scheduler", "peft", "mark_request_done", None),
    ]
    # The victim is evicted between the failed and the retried allocation of A.
    methods = [(c.request_id, c.method) for c in snap.step.calls if c.caller == "scheduler"]
    failed = methods.index((a, "try_allocate_generation"))
    suspended = methods.index((b, "suspend_request"))
    retried = len(methods) - 1 - methods[::-1].index((a, "try_allocate_generation"))
    assert failed < suspended < retried
    (release,) = peft_calls(snap, b)
    assert release.args.pause is True and release.facts.was_active is True
    assert residency(snap, b) == (SUSPENDED, SUSPENDED)
    vb = snap.request(b)
    assert vb is not None and (vb.target.device_pages, vb.target.host_pages) == (0, 1)
    assert vb.draft is not None and (vb.draft.device_pages, vb.draft.host_pages) == (0, 1)
    assert residency(snap, a) == (ACTIVE, ACTIVE)
    assert adapter(snap, 2).active == frozenset() and adapter(snap, 2).paused == frozenset({b})
    assert adapter(snap, 1).active == frozenset({a})


def test_row2_later_context_chunk_suspended_in_phase2_releases_with_pause() -> None:
    """Row "started request suspended", through the phase-2 shared suspend helper: a
    later chunk that cannot grow, with nothing to preempt, is suspended and released
    with pause, and listed in paused_requests."""
    engine = make(
        device_pages=4,
        tokens_per_block=4,
        enable_chunked_context=True,
        chunk_unit_size=4,
        max_num_tokens=8,
        adapter_pages=((1, 1),),
    )
    rid = engine.submit(prompt_len=16, max_new_tokens=1, lora_task_id=1, lora_weights=True)
    step(engine)  # first chunk of 8
    engine.kv_cache_manager.fail_next_grows()
    snap = step(engine)
    assert lists(snap)["paused"] == (rid,) and lists(snap)["context"] == ()
    assert trace(snap, rid) == [
        ("scheduler", "target", "prepare_context", True),
        ("scheduler", "target", "resize_context", False),
        ("scheduler", "target", "suspend_request", None),
        ("scheduler", "peft", "mark_request_done", None),
    ]
    assert snap.step.faults[0].facts.fault == "failed_grow"
    (release,) = peft_calls(snap, rid)
    assert release.args.pause is True
    assert residency(snap, rid) == (SUSPENDED, None)
    assert adapter(snap, 1).paused == frozenset({rid}) and adapter(snap, 1).active == frozenset()


# ---- row 3: unstarted first chunk suspended (draft cannot grow) -> nothing in PEFT ----


def _assert_first_chunk_suspended_then_freed(snap: Snapshot, rid: int) -> None:
    assert trace(snap, rid) == [
        ("scheduler", "target", "prepare_context", True),
        ("scheduler", "draft", "prepare_context", True),
        ("scheduler", "target", "resize_context", True),
        ("scheduler", "draft", "resize_context", False),
        # the target growth undone (upstream's revert)
        ("scheduler", "target", "revert_allocate_context", True),
        ("scheduler", "target", "suspend_request", None),
        ("scheduler", "draft", "suspend_request", None),
        ("scheduler", "target", "free_resources", None),
        ("scheduler", "draft", "free_resources", None),
    ]
    resizes = [c.facts.num_tokens for c in snap.step.calls if c.method == "resize_context"]
    assert resizes == [8, 8]
    (revert,) = [c for c in snap.step.calls if c.method == "revert_allocate_context"]
    assert revert.facts.capacity == 0
    assert peft_calls(snap, rid) == []  # it owns nothing, so it releases nothing
    assert lists(snap) == {"context": (), "generation": (), "paused": (), "recompute_paused": ()}
    assert residency(snap, rid) == (NONE, NONE)
    view = snap.request(rid)
    assert view is not None and view.position == 0 and not view.started
    assert all(rid not in a.active | a.paused for a in snap.adapters)
    assert all(not pool.holders for pool in snap.pools)


def test_row3_unstarted_first_chunk_draft_too_small_is_freed_without_peft_calls() -> None:
    """Row "unstarted (first-chunk) request suspended (draft cannot grow)": the draft
    pool cannot hold the chunk; suspend then free; no PEFT call at all."""
    engine = make(device_pages=4, draft_device_pages=1, tokens_per_block=4, adapter_pages=((1, 1),))
    rid = engine.submit(prompt_len=8, max_new_tokens=2, lora_task_id=1, lora_weights=True)
    snap = step(engine)
    _assert_first_chunk_suspended_then_freed(snap, rid)
    assert snap.adapters == ()


def test_row3_unstarted_first_chunk_draft_grow_fault_then_admitted_next_step() -> None:
    """Row "unstarted request suspended (draft cannot grow)", by a one-shot draft
    fault: freed without PEFT calls, then admitted and registered the next step."""
    engine = make(device_pages=4, draft_device_pages=4, tokens_per_block=4, adapter_pages=((1, 1),))
    rid = engine.submit(prompt_len=8, max_new_tokens=2, lora_task_id=1, lora_weights=True)
    engine.draft_kv_cache_manager.fail_next_grows()
    snap = step(engine)
    _assert_first_chunk_suspended_then_freed(snap, rid)
    assert snap.step.faults[0].component == "draft"

    again = step(engine)
    assert lists(again)["context"] == (rid,)
    (reg,) = peft_calls(again, rid)
    assert reg.caller == "prepare_resources" and reg.facts.registered_before is False
    assert residency(again, rid) == (ACTIVE, ACTIVE)
    assert adapter(again, 1).active == frozenset({rid})


# ---- row 4: suspended generation request resumes, allocation succeeds -> register once ----


def _victim_world() -> tuple[Engine, int, int]:
    """A (adapter 1) evicts B (adapter 2) at step 2 and finishes; B waits on the host tier."""
    engine = make(
        device_pages=2,
        host_pages=2,
        draft_device_pages=2,
        draft_host_pages=2,
        tokens_per_block=4,
        adapter_pages=((1, 1), (2, 1)),
    )
    a = engine.submit(prompt_len=4, max_new_tokens=2, lora_task_id=1, lora_weights=True)
    b = engine.submit(prompt_len=4, max_new_tokens=3, lora_task_id=2, lora_weights=True)
    step(engine)
    snap = step(engine)
    assert lists(snap)["paused"] == (b,)
    assert snap.ended == ((a, "finished"),)
    assert residency(snap, b) == (SUSPENDED, SUSPENDED)
    assert adapter(snap, 2).paused == frozenset({b})
    return engine, a, b


def test_row4_suspended_generation_request_resumes_and_registers_once_after_success() -> None:
    """Row "suspended generation request resumes and its allocation succeeds": resume
    and grow in both pools, then add_request_peft once, by the scheduler, after."""
    engine, _, b = _victim_world()
    snap = step(engine)
    assert lists(snap) == {"context": (), "generation": (b,), "paused": (), "recompute_paused": ()}
    assert trace(snap, b) == [
        ("scheduler", "target", "try_allocate_generation", True),
        ("scheduler", "draft", "try_allocate_generation", True),
        ("scheduler", "peft", "add_request_peft", "ok"),
    ]
    (reg,) = peft_calls(snap, b)
    assert reg.facts.was_paused is True and reg.facts.already_active is False
    view = snap.request(b)
    assert view is not None and residency(snap, b) == (ACTIVE, ACTIVE)
    assert (view.target.device_pages, view.target.host_pages, view.target.capacity) == (2, 0, 5)
    a = adapter(snap, 2)
    assert a.active == frozenset({b}) and a.paused == frozenset()
    assert a.device is not None and a.device.in_use


# ---- row 5: resumes but the allocation then fails -> no registration, stays paused ----


def _assert_resumed_then_resuspended_unregistered(snap: Snapshot, rid: int, task: int) -> None:
    assert lists(snap)["paused"] == (rid,)
    assert rid not in lists(snap)["generation"]
    assert peft_calls(snap, rid) == []  # neither a registration nor a second release
    assert residency(snap, rid)[0] is SUSPENDED
    a = adapter(snap, task)
    assert rid in a.paused and rid not in a.active


def test_row5_resume_then_failed_grow_is_suspended_again_without_registration() -> None:
    """Row "suspended request resumes but its allocation then fails": the target
    resumes (pages back from the host), the grow fails, the ladder suspends it again
    (pages back down); no add_request_peft; it stays paused."""
    engine, _, b = _victim_world()
    engine.kv_cache_manager.fail_next_grows()
    snap = step(engine)
    assert trace(snap, b) == [
        ("scheduler", "target", "try_allocate_generation", False),
        ("scheduler", "target", "suspend_request", None),
        ("scheduler", "draft", "suspend_request", None),
    ]
    alloc, suspend = (c for c in snap.step.calls if c.request_id == b and c.component == "target")
    assert alloc.facts.fault == "failed_grow"  # it resumed, then the grow failed
    assert suspend.facts.moved_to_host is True  # so the cache was ACTIVE again
    _assert_resumed_then_resuspended_unregistered(snap, b, 2)
    assert residency(snap, b) == (SUSPENDED, SUSPENDED)

    # With the fault gone it resumes and registers, once.
    after = step(engine)
    assert [c.method for c in peft_calls(after, b)] == ["add_request_peft"]
    assert adapter(after, 2).active == frozenset({b})


def test_row5_resume_then_no_room_to_grow_resuspended_by_self_eviction() -> None:
    """Row "resumes but its allocation then fails", under plain pressure: a lone
    request self-evicted to the host tier resumes next step, still cannot grow, and
    is suspended again without a registration or a second release."""
    engine = make(device_pages=1, host_pages=1, tokens_per_block=4, adapter_pages=((1, 1),))
    rid = engine.submit(prompt_len=4, max_new_tokens=3, lora_task_id=1, lora_weights=True)
    step(engine)
    evicted = step(engine)
    assert [c.args.pause for c in peft_calls(evicted, rid)] == [True]

    snap = step(engine)
    assert trace(snap, rid) == [
        ("scheduler", "target", "try_allocate_generation", False),
        ("scheduler", "target", "suspend_request", None),
    ]
    alloc, suspend = (c for c in snap.step.calls if c.request_id == rid)
    assert alloc.facts.fault == "no_device_room"
    assert suspend.facts.moved_to_host is True
    _assert_resumed_then_resuspended_unregistered(snap, rid, 1)


def test_row5_draft_refuses_resume_target_reverted_and_resuspended() -> None:
    """Row "resumes but its allocation then fails", in the draft pool: the target
    resumes and grows, the draft refuses its resume, the target growth is reverted
    and both are suspended; no registration."""
    engine, _, b = _victim_world()
    engine.draft_kv_cache_manager.refuse_next_resumes()
    snap = step(engine)
    assert trace(snap, b) == [
        ("scheduler", "target", "try_allocate_generation", True),
        ("scheduler", "draft", "try_allocate_generation", False),
        ("scheduler", "target", "revert_allocate_generation", None),
        ("scheduler", "target", "suspend_request", None),
        ("scheduler", "draft", "suspend_request", None),
    ]
    assert snap.step.faults[0].facts.fault == "refused_resume"
    _assert_resumed_then_resuspended_unregistered(snap, b, 2)
    assert residency(snap, b) == (SUSPENDED, SUSPENDED)
    view = snap.request(b)
    assert view is not None and view.target.capacity == 4  # the growth was reverted


def test_row5_refused_resume_registers_nothing_and_stays_suspended() -> None:
    """Row "resumes but its allocation then fails", when the resume itself is
    refused: the cache stays SUSPENDED, nothing registers, it stays paused."""
    engine, _, b = _victim_world()
    engine.kv_cache_manager.refuse_next_resumes()
    snap = step(engine)
    assert trace(snap, b) == [("scheduler", "target", "try_allocate_generation", False)]
    assert snap.step.faults[0].facts.fault == "refused_resume"
    assert lists(snap) == {"context": (), "generation": (), "paused": (), "recompute_paused": ()}
    assert peft_calls(snap, b) == []
    assert residency(snap, b) == (SUSPENDED, SUSPENDED)
    assert adapter(snap, 2).paused == frozenset({b}) and adapter(snap, 2).active == frozenset()


# ---- row 6: recompute pause / preemption of an ACTIVE started request ----


def _preemption_world() -> tuple[Engine, int, int, Snapshot]:
    """No lower tier, chunked. A (adapter 1) is suspended mid-prefill by a fault;
    B (adapter 2) takes its first chunk; then A resumes and cannot grow, so the
    phase-2 ladder preempts B, which is ACTIVE."""
    engine = make(
        device_pages=4,
        tokens_per_block=4,
        enable_chunked_context=True,
        chunk_unit_size=4,
        max_num_tokens=8,
        adapter_pages=((1, 1), (2, 1)),
    )
    a = engine.submit(prompt_len=16, max_new_tokens=1, lora_task_id=1, lora_weights=True)
    b = engine.submit(prompt_len=12, max_new_tokens=2, lora_task_id=2, lora_weights=True)
    step(engine)  # A: chunk 8 (2 pages); B gets no tokens
    engine.kv_cache_manager.fail_next_grows()
    second = step(engine)  # A suspended (keeps its 2 pages); B: chunk 8 (2 pages)
    assert lists(second) == {
        "context": (b,),
        "generation": (),
        "paused": (a,),
        "recompute_paused": (),
    }
    assert residency(second, b) == (ACTIVE, None) and second.request(b).started
    assert second.pools[0].device_free == 0
    snap = step(engine)
    return engine, a, b, snap


def test_row6_preemption_of_active_started_request_frees_kv_and_releases_with_pause() -> None:
    """Row "recompute pause or preemption of a started request that is ACTIVE": its KV
    is freed and it is released with pause; the device copy becomes evictable, the
    host copy stays pinned."""
    _, a, b, snap = _preemption_world()
    assert lists(snap) == {
        "context": (a,),
        "generation": (),
        "paused": (),
        "recompute_paused": (b,),
    }
    assert trace(snap, b) == [
        ("scheduler", "target", "free_resources", None),
        ("scheduler", "peft", "mark_request_done", None),
    ]
    free = next(c for c in snap.step.calls if c.request_id == b and c.method == "free_resources")
    assert free.facts.was_active is True and free.facts.started is True
    (release,) = peft_calls(snap, b)
    assert release.args.pause is True and release.facts.was_active is True
    assert release.facts.released_device is True and release.facts.released_host is False
    # A's resize failed, B was preempted, A's resize was retried and succeeded.
    a_resizes = [
        c.result for c in snap.step.calls if c.request_id == a and c.method == "resize_context"
    ]
    assert a_resizes == [False, True]
    ad = adapter(snap, 2)
    assert ad.active == frozenset() and ad.paused == frozenset({b})
    assert ad.device is not None and not ad.device.in_use
    assert ad.host is not None and ad.host.in_use
    view = snap.request(b)
    assert view is not None and view.target.residency is NONE and view.recompute_pending
    assert view.state is LlmRequestState.CONTEXT_INIT and view.position == 0
    # A finished its prefill and, with max_new_tokens=1, completed this step.
    assert snap.ended == ((a, "finished"),)


# ---- row 7: recompute pause / preemption of a request already suspended ----


def test_row7_recompute_pause_of_request_suspended_this_pass_releases_only_once() -> None:
    """Row "recompute pause of a request already suspended": with no lower tier the
    victim's suspension frees nothing; the ladder then recompute-pauses it, freeing
    its KV with no second release; it moves from paused to recompute-paused."""
    engine = make(device_pages=2, tokens_per_block=4, adapter_pages=((1, 1), (2, 1)))
    a = engine.submit(prompt_len=4, max_new_tokens=5, lora_task_id=1, lora_weights=True)
    b = engine.submit(prompt_len=4, max_new_tokens=5, lora_task_id=2, lora_weights=True)
    step(engine)
    snap = step(engine)
    assert lists(snap) == {
        "context": (),
        "generation": (a,),
        "paused": (),
        "recompute_paused": (b,),
    }
    assert trace(snap, b) == [
        ("scheduler", "target", "suspend_request", None),
        ("scheduler", "peft", "mark_request_done", None),
        ("scheduler", "target", "free_resources", None),
    ]
    free = next(c for c in snap.step.calls if c.request_id == b and c.method == "free_resources")
    assert free.facts.was_active is False
    assert [c.args.pause for c in peft_calls(snap, b)] == [True]
    assert [c.result for c in snap.step.calls if c.request_id == a] == [False, False, True]
    assert adapter(snap, 2).paused == frozenset({b}) and adapter(snap, 2).active == frozenset()
    view = snap.request(b)
    assert view is not None and view.recompute_pending and view.target.residency is NONE


def test_row7_recompute_pause_of_request_suspended_in_an_earlier_step_calls_no_peft() -> None:
    """Row "recompute pause of a request already suspended (already paused)", across
    steps: B was suspended (and released) steps before; recompute-pausing it now
    frees its KV and makes no PEFT call at all."""
    engine = make(device_pages=3, tokens_per_block=2, adapter_pages=((1, 1), (2, 1)))
    a = engine.submit(prompt_len=2, max_new_tokens=10, lora_task_id=1, lora_weights=True)
    b = engine.submit(prompt_len=2, max_new_tokens=10, lora_task_id=2, lora_weights=True)
    step(engine)  # both prefill: one page each, one page free
    engine.kv_cache_manager.fail_next_grows()
    evicted = step(engine)  # A's grow fails once; B is the victim; A then takes the free page
    assert lists(evicted)["paused"] == (b,)
    assert [c.args.pause for c in peft_calls(evicted, b)] == [True]
    resuspended = step(engine)  # B resumes but cannot grow: suspended again (row 5)
    assert lists(resuspended)["paused"] == (b,) and peft_calls(resuspended, b) == []

    snap = step(engine)  # A needs its third page: B, suspended, is recompute-paused
    assert lists(snap) == {
        "context": (),
        "generation": (a,),
        "paused": (),
        "recompute_paused": (b,),
    }
    assert trace(snap, b) == [("scheduler", "target", "free_resources", None)]
    assert peft_calls(snap, b) == []
    free = next(c for c in snap.step.calls if c.request_id == b)
    assert free.facts.was_active is False and free.facts.had_cache is True
    assert adapter(snap, 2).paused == frozenset({b}) and adapter(snap, 2).active == frozenset()
    ad = adapter(snap, 2)
    assert ad.host is not None and ad.host.in_use
    view = snap.request(b)
    assert view is not None and view.recompute_pending and residency(snap, b) == (NONE, None)


def test_row7_phase2_preemption_of_request_suspended_earlier_this_pass() -> None:
    """Row "preemption of a request already suspended": phase 1 suspends C as a victim
    (released with pause); phase 2 then preempts C, which still holds device pages
    (no lower tier), for X's later chunk: no second release, and C leaves
    paused_requests for recompute_paused_requests."""
    engine = make(
        device_pages=5,
        tokens_per_block=2,
        enable_chunked_context=True,
        chunk_unit_size=4,
        max_num_tokens=8,
        adapter_pages=((1, 1), (2, 1), (3, 1)),
    )
    g = engine.submit(prompt_len=1, max_new_tokens=10, lora_task_id=1, lora_weights=True)
    x = engine.submit(prompt_len=12, max_new_tokens=2, lora_task_id=2, lora_weights=True)
    c = engine.submit(prompt_len=3, max_new_tokens=5, lora_task_id=3, lora_weights=True)
    first = step(engine)  # G: 1 token; X: a 4-token chunk; C: its whole 3-token prompt
    assert lists(first)["context"] == (g, x, c)
    assert first.pools[0].device_free == 0
    assert first.request(x).position == 4 and first.request(c).num_generated == 1

    engine.kv_cache_manager.fail_next_grows()
    snap = step(engine)
    assert lists(snap) == {
        "context": (x,),
        "generation": (g,),
        "paused": (),
        "recompute_paused": (c,),
    }
    assert trace(snap, c) == [
        ("scheduler", "target", "suspend_request", None),
        ("scheduler", "peft", "mark_request_done", None),
        ("scheduler", "target", "free_resources", None),
    ]
    assert [call.args.pause for call in peft_calls(snap, c)] == [True]
    x_resizes = [
        call.result
        for call in snap.step.calls
        if call.request_id == x and call.method == "resize_context"
    ]
    assert x_resizes == [False, True]
    ad = adapter(snap, 3)
    assert ad.paused == frozenset({c}) and ad.active == frozenset()
    view = snap.request(c)
    assert view is not None and view.recompute_pending and view.target.residency is NONE


# ---- row 8: a recompute-paused request's first chunk scheduled again ----


def test_row8_recompute_paused_request_first_chunk_again_executor_registers_it() -> None:
    """Row "a recompute-paused request's first chunk scheduled again": prepare (create)
    and resize; prepare_resources registers it; it leaves paused, enters active."""
    engine, _, b, _ = _preemption_world()
    snap = step(engine)
    assert lists(snap) == {"context": (b,), "generation": (), "paused": (), "recompute_paused": ()}
    assert trace(snap, b) == [
        ("scheduler", "target", "prepare_context", True),
        ("scheduler", "target", "resize_context", True),
        ("prepare_resources", "peft", "add_request_peft", "ok"),
    ]
    prepare, resize = (c for c in snap.step.calls if c.request_id == b and c.component == "target")
    assert prepare.facts.created is True and resize.facts.capacity == 8
    (reg,) = peft_calls(snap, b)
    assert reg.facts.was_paused is True and reg.facts.registered_before is True
    ad = adapter(snap, 2)
    assert ad.active == frozenset({b}) and ad.paused == frozenset()
    assert ad.device is not None and ad.device.in_use
    view = snap.request(b)
    assert view is not None and not view.recompute_pending and view.position == 8


# ---- row 9: completion or cancellation -> freed everywhere; free_resources terminates ----


def test_row9_completion_frees_every_pool_and_terminates() -> None:
    """Row "completion": freed in every pool by the executor's free_resources, which
    releases the adapter with pause false; both LoRA entries become done."""
    engine = make(
        device_pages=4,
        host_pages=4,
        draft_device_pages=4,
        draft_host_pages=4,
        tokens_per_block=4,
        adapter_pages=((1, 1),),
    )
    rid = engine.submit(prompt_len=4, max_new_tokens=2, lora_task_id=1, lora_weights=True)
    step(engine)
    snap = step(engine)
    assert snap.ended == ((rid, "finished"),)
    assert trace(snap, rid)[-3:] == [
        ("free_resources", "target", "free_resources", None),
        ("free_resources", "draft", "free_resources", None),
        ("free_resources", "peft", "mark_request_done", None),
    ]
    (done,) = peft_calls(snap, rid)
    assert done.args.pause is False and done.facts.was_active is True
    assert snap.request(rid) is None
    assert all(not p.holders and p.device_free == p.device_capacity for p in snap.pools)
    ad = adapter(snap, 1)
    assert ad.active == frozenset() and ad.paused == frozenset()
    assert ad.device is not None and not ad.device.in_use
    assert ad.host is not None and not ad.host.in_use


def test_row9_cancellation_of_paused_request_frees_host_pages_and_terminates() -> None:
    """Row "cancellation": a request suspended to the host tier (paused) is cancelled;
    next step the executor frees it on every tier and pool and releases it with
    pause false, so it leaves paused and the host copy becomes done."""
    engine, _, b = _victim_world()
    assert engine.cancel(b)
    snap = step(engine)
    assert snap.ended == ((b, "cancelled"),)
    assert trace(snap, b) == [
        ("free_resources", "target", "free_resources", None),
        ("free_resources", "draft", "free_resources", None),
        ("free_resources", "peft", "mark_request_done", None),
    ]
    frees = [c for c in snap.step.calls if c.method == "free_resources"]
    assert all(c.facts.had_cache is True and c.facts.was_active is False for c in frees)
    (done,) = peft_calls(snap, b)
    assert done.args.pause is False and done.facts.was_paused is True
    assert done.facts.released_host is True
    assert snap.step.output is not None and snap.step.output.listed == ()
    for pool in snap.pools:
        assert pool.holders == ()
        assert (pool.device_free, pool.host_free) == (pool.device_capacity, pool.host_capacity)
    ad = adapter(snap, 2)
    assert ad.active == frozenset() and ad.paused == frozenset()
    assert ad.host is not None and not ad.host.in_use
