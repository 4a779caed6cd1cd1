"""Example tests for the PEFT manager and its LoRA caches (docs/invariants.md, ownership).

Each test names, in its name or docstring, the ``updateTaskState`` rule, the
"Public calls" row, or the edge case of section 5 it covers. Adapter task ids
used throughout: ``X`` (2 pages), ``Y`` (2 pages), ``Z`` (3 pages), ``W``
(3 pages), ``S`` (1 page).
"""

from __future__ import annotations

import pytest

from peftlife.world.ledger import Call, CallLedger, given
from peftlife.world.peft import (
    CacheEntryView,
    LoraCache,
    LoraCacheFullException,
    PeftCacheManager,
    PeftTaskNotCachedException,
)
from peftlife.world.request import Request

X, Y, Z, W, S = 7, 8, 9, 10, 11
PAGES = {X: 2, Y: 2, Z: 3, W: 3, S: 1}


def make_peft(
    device_pages: int = 4, host_pages: int = 8, ledger: CallLedger | None = None
) -> PeftCacheManager:
    return PeftCacheManager(
        device_pages=device_pages, host_pages=host_pages, adapter_pages=PAGES, ledger=ledger
    )


def make_req(request_id: int, task: int | None = X, weights: bool = True) -> Request:
    return Request(request_id, task, weights, prompt_len=4, max_new_tokens=2)


def peft_calls(peft: PeftCacheManager, method: str) -> list[Call]:
    return [c for c in peft.ledger.calls if c.method == method]


def detail(call: Call) -> dict[str, object]:
    return given(call.facts)


# ---------------------------------------------------------------------------
# updateTaskState: the C++ ownership rule
# ---------------------------------------------------------------------------


def test_update_register_inserts_into_active() -> None:
    """updateTaskState register (terminate false): r goes into active[t], not paused[t]."""
    peft = make_peft()
    assert peft.update_task_state(X, 1, terminate=False) == (False, False)
    assert peft.active_requests(X) == frozenset({1})
    assert peft.paused_requests(X) == frozenset()


def test_update_register_of_paused_request_is_a_resume() -> None:
    """updateTaskState register: a paused r is removed from paused[t] (paused -> active)."""
    peft = make_peft()
    peft.update_task_state(X, 1, terminate=False)
    peft.update_task_state(X, 1, terminate=True, pause=True)
    assert peft.paused_requests(X) == frozenset({1})
    peft.update_task_state(X, 1, terminate=False)
    assert peft.active_requests(X) == frozenset({1})
    assert peft.paused_requests(X) == frozenset()


def test_update_release_with_pause_moves_active_to_paused() -> None:
    """updateTaskState release with pause: r leaves active[t] and enters paused[t]."""
    peft = make_peft()
    peft.update_task_state(X, 1, terminate=False)
    peft.update_task_state(X, 2, terminate=False)
    peft.update_task_state(X, 1, terminate=True, pause=True)
    assert peft.active_requests(X) == frozenset({2})
    assert peft.paused_requests(X) == frozenset({1})


def test_update_release_with_pause_of_never_registered_request_makes_a_phantom() -> None:
    """updateTaskState release with pause inserts r into paused[t] even if never active."""
    peft = make_peft()
    peft.update_task_state(X, 5, terminate=True, pause=True)
    assert peft.active_requests(X) == frozenset()
    assert peft.paused_requests(X) == frozenset({5})
    assert 5 not in peft.ever_registered


def test_update_release_without_pause_removes_from_active() -> None:
    """updateTaskState release without pause: r leaves active[t] and is not put in paused[t]."""
    peft = make_peft()
    peft.update_task_state(X, 1, terminate=False)
    peft.update_task_state(X, 2, terminate=False)
    peft.update_task_state(X, 1, terminate=True, pause=False)
    assert peft.active_requests(X) == frozenset({2})
    assert peft.paused_requests(X) == frozenset()


def test_update_release_without_pause_removes_from_paused() -> None:
    """updateTaskState release without pause: a paused r is removed from paused[t]."""
    peft = make_peft()
    peft.update_task_state(X, 1, terminate=False)
    peft.update_task_state(X, 2, terminate=True, pause=True)  # phantom keeps paused non-empty
    peft.update_task_state(X, 3, terminate=True, pause=True)
    peft.update_task_state(X, 3, terminate=True, pause=False)
    assert peft.active_requests(X) == frozenset({1})
    assert peft.paused_requests(X) == frozenset({2})


def test_update_device_copy_done_only_when_active_empties() -> None:
    """updateTaskState: the device copy is marked done when active[t] becomes empty."""
    peft = make_peft()
    peft.host_cache.claim(X, 2)
    peft.device_cache.claim(X, 2)
    peft.update_task_state(X, 1, terminate=False)
    peft.update_task_state(X, 2, terminate=False)

    assert peft.update_task_state(X, 1, terminate=True) == (False, False)
    assert peft.device_cache.is_in_use(X) is True
    assert peft.host_cache.is_in_use(X) is True

    assert peft.update_task_state(X, 2, terminate=True) == (True, True)
    assert peft.device_cache.entry(X) == CacheEntryView(pages=2, in_use=False)
    assert peft.host_cache.entry(X) == CacheEntryView(pages=2, in_use=False)


def test_update_host_copy_done_only_when_active_and_paused_both_empty() -> None:
    """updateTaskState: the host copy is marked done only if paused[t] is empty too."""
    peft = make_peft()
    peft.host_cache.claim(X, 2)
    peft.device_cache.claim(X, 2)
    peft.update_task_state(X, 1, terminate=False)

    # Paused: active empties (device done) but paused holds 1 (host stays pinned).
    assert peft.update_task_state(X, 1, terminate=True, pause=True) == (True, False)
    assert peft.device_cache.is_in_use(X) is False
    assert peft.host_cache.is_in_use(X) is True

    # Terminated: paused empties too, so the host copy is now done.
    assert peft.update_task_state(X, 1, terminate=True, pause=False) == (False, True)
    assert peft.host_cache.is_in_use(X) is False


def test_update_phantom_release_pins_host_copy() -> None:
    """updateTaskState: a phantom in paused[t] keeps the host copy in use (host not done)."""
    peft = make_peft()
    peft.host_cache.claim(X, 2)
    peft.device_cache.claim(X, 2)
    peft.update_task_state(X, 1, terminate=False)
    peft.update_task_state(X, 9, terminate=True, pause=True)  # phantom
    assert peft.update_task_state(X, 1, terminate=True, pause=False) == (True, False)
    assert peft.host_cache.is_in_use(X) is True
    assert peft.device_cache.is_in_use(X) is False


def test_update_sets_not_counters_register_twice_release_once() -> None:
    """Sets, not counters: registering twice then releasing once empties active[t]."""
    peft = make_peft()
    peft.host_cache.claim(X, 2)
    peft.device_cache.claim(X, 2)
    peft.update_task_state(X, 1, terminate=False)
    peft.update_task_state(X, 1, terminate=False)
    assert peft.active_requests(X) == frozenset({1})
    assert peft.update_task_state(X, 1, terminate=True) == (True, True)
    assert peft.active_requests(X) == frozenset()
    assert peft.device_cache.is_in_use(X) is False


def test_update_sets_not_counters_pause_twice_resume_once() -> None:
    """Sets, not counters: two pause releases then one register leaves paused[t] empty."""
    peft = make_peft()
    peft.update_task_state(X, 1, terminate=True, pause=True)
    peft.update_task_state(X, 1, terminate=True, pause=True)
    peft.update_task_state(X, 1, terminate=False)
    assert peft.paused_requests(X) == frozenset()
    assert peft.active_requests(X) == frozenset({1})


def test_update_empty_sets_leave_no_trace_in_task_ids() -> None:
    """updateTaskState: once both sets of t are empty (and t is uncached), t is not listed."""
    peft = make_peft()
    peft.update_task_state(X, 1, terminate=False)
    peft.update_task_state(Y, 2, terminate=True, pause=True)
    assert peft.task_ids() == [X, Y]
    peft.update_task_state(X, 1, terminate=True)
    peft.update_task_state(Y, 2, terminate=True)
    assert peft.task_ids() == []


# ---------------------------------------------------------------------------
# Public call: add_request_peft
# ---------------------------------------------------------------------------


def test_add_request_peft_no_adapter_does_nothing() -> None:
    """add_request_peft row: no adapter -> nothing (no sets, no cache entries)."""
    peft = make_peft()
    peft.add_request_peft(make_req(1, task=None, weights=False))
    assert peft.task_ids() == []
    assert list(peft.host_cache.entries()) == []
    assert list(peft.device_cache.entries()) == []
    assert peft.ever_registered == set()


def test_add_request_peft_registers_and_loads_weights_into_host() -> None:
    """add_request_peft row: register, then put the weights in the host cache (in use)."""
    peft = make_peft(host_pages=8)
    peft.add_request_peft(make_req(1, X))
    assert peft.active_requests(X) == frozenset({1})
    assert peft.paused_requests(X) == frozenset()
    assert peft.host_cache.entry(X) == CacheEntryView(pages=2, in_use=True)
    assert peft.host_cache.num_free_pages == 6
    # add_request_peft does not touch the device cache; ensure_batch does.
    assert list(peft.device_cache.entries()) == []


def test_add_request_peft_drops_weights_after_success() -> None:
    """add_request_peft row: after any successful call the request's weights are dropped."""
    peft = make_peft()
    r = make_req(1, X, weights=True)
    peft.add_request_peft(r)
    assert r.lora_weights is False


def test_add_request_peft_marks_cached_done_copy_in_use() -> None:
    """add_request_peft row: adapter cached on host (done) -> mark the cached copy in use."""
    peft = make_peft(host_pages=8)
    r1 = make_req(1, X)
    peft.add_request_peft(r1)
    peft.mark_request_done(r1)
    assert peft.host_cache.is_in_use(X) is False
    r2 = make_req(2, X, weights=False)
    peft.add_request_peft(r2)
    assert peft.host_cache.entry(X) == CacheEntryView(pages=2, in_use=True)
    assert peft.host_cache.num_free_pages == 6
    assert peft.host_cache.evictions == []
    assert peft.active_requests(X) == frozenset({2})


def test_add_request_peft_not_cached_without_weights_raises() -> None:
    """add_request_peft row: not in host cache and no weights -> PeftTaskNotCachedException."""
    peft = make_peft()
    r = make_req(1, X, weights=False)
    with pytest.raises(PeftTaskNotCachedException, match="not found in cache"):
        peft.add_request_peft(r)
    assert peft.active_requests(X) == frozenset()
    assert peft.paused_requests(X) == frozenset()
    assert X not in peft.host_cache
    assert 1 not in peft.ever_registered


def test_add_request_peft_not_cached_raises_for_paused_request_and_keeps_it_paused() -> None:
    """add_request_peft row: the not-cached raise happens before registering (no set changes)."""
    peft = make_peft()
    r = make_req(1, X, weights=False)
    peft.mark_request_done(r, pause=True)  # phantom, X never cached
    with pytest.raises(PeftTaskNotCachedException):
        peft.add_request_peft(r)
    assert peft.paused_requests(X) == frozenset({1})
    assert peft.active_requests(X) == frozenset()


def test_add_request_peft_evicts_done_host_entry_to_make_room() -> None:
    """add_request_peft row: put the weights in the host cache, evicting a done entry."""
    peft = make_peft(host_pages=2)
    r1 = make_req(1, X)
    peft.add_request_peft(r1)
    peft.mark_request_done(r1)
    peft.add_request_peft(make_req(2, Y))
    assert peft.host_cache.evictions == [X]
    assert X not in peft.host_cache
    assert peft.host_cache.entry(Y) == CacheEntryView(pages=2, in_use=True)


def test_add_request_peft_full_host_raises_and_undoes_registration() -> None:
    """add_request_peft row: full host cache -> LoraCacheFullException; request in neither set."""
    peft = make_peft(host_pages=2)
    peft.add_request_peft(make_req(1, X))  # X pins the whole host cache
    r2 = make_req(2, Y)
    with pytest.raises(LoraCacheFullException, match="no done tasks to evict"):
        peft.add_request_peft(r2)
    assert peft.active_requests(Y) == frozenset()
    assert peft.paused_requests(Y) == frozenset()
    assert Y not in peft.host_cache
    assert peft.host_cache.entry(X) == CacheEntryView(pages=2, in_use=True)
    assert peft.active_requests(X) == frozenset({1})


def test_add_request_peft_full_host_removes_previously_paused_request_from_both_sets() -> None:
    """add_request_peft row: the C++ undo is a terminate, so a paused request leaves paused too."""
    peft = make_peft(host_pages=2)
    peft.add_request_peft(make_req(1, X))  # host full with X in use
    r2 = make_req(2, Y, weights=True)
    peft.mark_request_done(r2, pause=True)  # r2 paused on Y, Y not on host
    assert peft.paused_requests(Y) == frozenset({2})
    with pytest.raises(LoraCacheFullException):
        peft.add_request_peft(r2)
    assert peft.active_requests(Y) == frozenset()
    assert peft.paused_requests(Y) == frozenset()
    assert 2 not in peft.active_requests(X) | peft.paused_requests(X)


def test_add_request_peft_full_host_undo_keeps_other_owners() -> None:
    """add_request_peft row: the undo removes only this request; other owners of t stay."""
    peft = make_peft(host_pages=2)
    peft.add_request_peft(make_req(1, X))
    peft.update_task_state(Y, 3, terminate=False)  # another owner of Y (world out of sync)
    peft.mark_request_done(make_req(4, Y), pause=True)  # and a paused one
    with pytest.raises(LoraCacheFullException):
        peft.add_request_peft(make_req(2, Y))
    assert peft.active_requests(Y) == frozenset({3})
    assert peft.paused_requests(Y) == frozenset({4})


def test_add_request_peft_full_host_undo_marks_device_copy_done() -> None:
    """add_request_peft row: the undo is a terminate, so an emptied active[t] frees the device."""
    peft = make_peft(host_pages=2, device_pages=4)
    peft.add_request_peft(make_req(1, X))
    peft.device_cache.claim(Y, 2)  # device copy of Y in use, as a stale ensure_batch would leave
    with pytest.raises(LoraCacheFullException):
        peft.add_request_peft(make_req(2, Y))
    assert peft.device_cache.entry(Y) == CacheEntryView(pages=2, in_use=False)


def test_add_request_peft_weights_dropped_so_adapter_cannot_come_back() -> None:
    """add_request_peft row: weights dropped, so after X leaves the host a later call raises."""
    peft = make_peft(host_pages=2)
    r1 = make_req(1, X, weights=True)
    peft.add_request_peft(r1)
    assert r1.lora_weights is False
    peft.mark_request_done(r1)  # host copy of X done
    peft.add_request_peft(make_req(2, Y))  # evicts X from host
    assert X not in peft.host_cache
    with pytest.raises(PeftTaskNotCachedException):
        peft.add_request_peft(r1)
    assert peft.active_requests(X) == frozenset()


def test_add_request_peft_paused_request_pins_host_copy_so_it_can_come_back() -> None:
    """add_request_peft row with pause: a paused owner keeps X on host; re-registration works."""
    peft = make_peft(host_pages=4)
    r1 = make_req(1, X)
    peft.add_request_peft(r1)
    peft.mark_request_done(r1, pause=True)
    peft.add_request_peft(make_req(2, Y))
    with pytest.raises(LoraCacheFullException):
        peft.add_request_peft(make_req(3, S))  # X pinned by the paused r1, Y by r2
    peft.add_request_peft(r1)  # weights already dropped, but X is still on host
    assert peft.active_requests(X) == frozenset({1})
    assert peft.paused_requests(X) == frozenset()


@pytest.mark.parametrize("try_gpu_cache", [True, False])
def test_add_request_peft_try_gpu_cache_is_ignored(try_gpu_cache: bool) -> None:
    """add_request_peft row: the try_gpu_cache flag is ignored (same effect either way)."""
    peft = make_peft()
    r = make_req(1, X)
    peft.add_request_peft(r, try_gpu_cache=try_gpu_cache)
    assert peft.active_requests(X) == frozenset({1})
    assert peft.host_cache.entry(X) == CacheEntryView(pages=2, in_use=True)
    assert list(peft.device_cache.entries()) == []
    assert r.lora_weights is False


def test_add_request_peft_twice_is_harmless_for_the_sets() -> None:
    """add_request_peft row: calling twice is harmless for the sets (and the host pages)."""
    peft = make_peft(host_pages=8)
    r = make_req(1, X)
    peft.add_request_peft(r)
    peft.add_request_peft(r)
    assert peft.active_requests(X) == frozenset({1})
    assert peft.paused_requests(X) == frozenset()
    assert peft.host_cache.num_free_pages == 6


def test_add_request_peft_of_paused_request_resumes_it() -> None:
    """add_request_peft row (register): a paused request moves paused -> active."""
    peft = make_peft()
    r = make_req(1, X)
    peft.add_request_peft(r)
    peft.mark_request_done(r, pause=True)
    peft.add_request_peft(r)
    assert peft.active_requests(X) == frozenset({1})
    assert peft.paused_requests(X) == frozenset()


# ---------------------------------------------------------------------------
# Public call: mark_request_done
# ---------------------------------------------------------------------------


def test_mark_request_done_default_is_release_without_pause() -> None:
    """mark_request_done row: release with pause (default false): the request leaves both sets."""
    peft = make_peft()
    r = make_req(1, X)
    peft.add_request_peft(r)
    peft.mark_request_done(r)
    assert peft.active_requests(X) == frozenset()
    assert peft.paused_requests(X) == frozenset()
    assert peft.host_cache.is_in_use(X) is False


def test_mark_request_done_with_pause_moves_to_paused() -> None:
    """mark_request_done row: release with pause=True puts the request in paused[t]."""
    peft = make_peft()
    r = make_req(1, X)
    peft.add_request_peft(r)
    peft.ensure_batch([r], [])
    peft.mark_request_done(r, pause=True)
    assert peft.active_requests(X) == frozenset()
    assert peft.paused_requests(X) == frozenset({1})
    assert peft.device_cache.is_in_use(X) is False
    assert peft.host_cache.is_in_use(X) is True


def test_mark_request_done_with_pause_on_never_registered_request_is_a_phantom() -> None:
    """mark_request_done row, phantom edge case: pause release of an unregistered request."""
    peft = make_peft()
    peft.mark_request_done(make_req(4, X), pause=True)
    assert peft.paused_requests(X) == frozenset({4})
    assert peft.active_requests(X) == frozenset()


def test_mark_request_done_without_adapter_changes_nothing() -> None:
    """mark_request_done row: a request with no adapter owns nothing; no set appears."""
    peft = make_peft()
    peft.mark_request_done(make_req(1, task=None, weights=False), pause=True)
    assert peft.task_ids() == []


# ---------------------------------------------------------------------------
# Public call: ensure_batch
# ---------------------------------------------------------------------------


def test_ensure_batch_marks_every_adapter_of_the_batch_in_use_on_device() -> None:
    """ensure_batch row: every adapter of context and generation is on device, in use."""
    peft = make_peft(device_pages=4)
    ctx, gen = make_req(1, X), make_req(2, Y)
    peft.add_request_peft(ctx)
    peft.add_request_peft(gen)
    peft.ensure_batch([ctx], [gen])
    assert list(peft.device_cache.entries()) == [
        (X, CacheEntryView(pages=2, in_use=True)),
        (Y, CacheEntryView(pages=2, in_use=True)),
    ]
    assert peft.device_cache.num_free_pages == 0


def test_ensure_batch_dedupes_adapters() -> None:
    """ensure_batch row: an adapter shared by several requests is claimed once."""
    peft = make_peft(device_pages=4)
    reqs = [make_req(1, X), make_req(2, X), make_req(3, X)]
    for r in reqs:
        peft.add_request_peft(r)
    peft.ensure_batch(reqs[:2], reqs[2:])
    assert peft.device_cache.num_free_pages == 2
    assert peft_calls(peft, "ensure_batch")[-1].args.tasks == (X,)


def test_ensure_batch_ignores_requests_without_adapter() -> None:
    """ensure_batch row: requests with no adapter need no device pages."""
    peft = make_peft(device_pages=4)
    peft.ensure_batch([make_req(1, None, False)], [make_req(2, None, False)])
    assert list(peft.device_cache.entries()) == []
    assert peft.device_cache.num_free_pages == 4


def test_ensure_batch_remarks_done_device_copy_in_use_without_eviction() -> None:
    """ensure_batch row: a done copy already on device is marked in use, nothing evicted."""
    peft = make_peft(device_pages=4)
    r1, r2 = make_req(1, X), make_req(2, Y)
    peft.add_request_peft(r1)
    peft.add_request_peft(r2)
    peft.ensure_batch([r1], [r2])
    peft.mark_request_done(r1, pause=True)
    assert peft.device_cache.is_in_use(X) is False
    peft.add_request_peft(r1)
    peft.ensure_batch([], [r1, r2])
    assert peft.device_cache.is_in_use(X) is True
    assert peft.device_cache.evictions == []


def test_ensure_batch_evicts_done_device_entry_when_pages_needed() -> None:
    """ensure_batch row: a done device entry is evicted to make room for the batch."""
    peft = make_peft(device_pages=2)
    r1, r2 = make_req(1, X), make_req(2, Y)
    peft.add_request_peft(r1)
    peft.ensure_batch([r1], [])
    peft.mark_request_done(r1)
    peft.add_request_peft(r2)
    peft.ensure_batch([r2], [])
    assert peft.device_cache.evictions == [X]
    assert list(peft.device_cache.entries()) == [(Y, CacheEntryView(pages=2, in_use=True))]


def test_ensure_batch_no_done_entry_raises_cache_full() -> None:
    """ensure_batch row: device cache with no done entry -> LoraCacheFullException."""
    peft = make_peft(device_pages=2)
    r1, r2 = make_req(1, X), make_req(2, Y)
    peft.add_request_peft(r1)
    peft.add_request_peft(r2)
    peft.ensure_batch([], [r1])
    with pytest.raises(LoraCacheFullException, match="no done tasks to evict"):
        peft.ensure_batch([r2], [])
    assert Y not in peft.device_cache
    assert peft.device_cache.entry(X) == CacheEntryView(pages=2, in_use=True)


def test_ensure_batch_paused_owner_does_not_pin_device() -> None:
    """ensure_batch row + release with pause: the paused adapter's device copy is evictable."""
    peft = make_peft(device_pages=2)
    a, b = make_req(1, X), make_req(2, Y)
    peft.add_request_peft(a)
    peft.ensure_batch([], [a])
    peft.mark_request_done(a, pause=True)  # suspend: device done, host pinned
    peft.add_request_peft(b)
    peft.ensure_batch([b], [])
    assert peft.device_cache.evictions == [X]
    assert peft.host_cache.is_in_use(X) is True


def test_ensure_batch_evictions_before_the_raise_stay_evicted() -> None:
    """ensure_batch row: entries evicted before the LoraCacheFullException stay evicted."""
    peft = make_peft(device_pages=4, host_pages=16)
    s, w, z = make_req(1, S), make_req(2, W), make_req(3, Z)
    for r in (s, w, z):
        peft.add_request_peft(r)
    peft.ensure_batch([s], [w])  # device: S (1, in use), W (3, in use), 0 free
    peft.mark_request_done(s)  # S done on device
    with pytest.raises(LoraCacheFullException, match="no done tasks to evict"):
        peft.ensure_batch([w], [z])  # Z needs 3: evict S (1 free), then nothing left
    assert peft.device_cache.evictions == [S]
    assert S not in peft.device_cache
    assert Z not in peft.device_cache
    assert peft.device_cache.num_free_pages == 1
    assert peft.device_cache.entry(W) == CacheEntryView(pages=3, in_use=True)


# ---------------------------------------------------------------------------
# LoraCache
# ---------------------------------------------------------------------------


def test_lora_cache_claim_new_entry_takes_pages_and_is_in_use() -> None:
    """LoraCache: a claim puts the entry in the cache, in use, and takes its pages."""
    cache = LoraCache("device", 4)
    cache.claim(1, 3)
    assert cache.entry(1) == CacheEntryView(pages=3, in_use=True)
    assert cache.num_free_pages == 1
    assert 1 in cache
    assert cache.entry(2) is None


def test_lora_cache_claim_of_present_entry_marks_in_use_without_eviction() -> None:
    """LoraCache: claim of a present (done) entry marks it in use; no eviction, no pages."""
    cache = LoraCache("device", 2)
    cache.claim(1, 2)
    cache.mark_done(1)
    cache.claim(1, 2)
    assert cache.entry(1) == CacheEntryView(pages=2, in_use=True)
    assert cache.num_free_pages == 0
    assert cache.evictions == []


def test_lora_cache_evicts_oldest_done_first() -> None:
    """LoraCache: eviction is oldest-done-first (done order, not insertion order)."""
    cache = LoraCache("device", 3)
    for t in (1, 2, 3):
        cache.claim(t, 1)
    cache.mark_done(2)
    cache.mark_done(3)
    cache.mark_done(1)
    cache.claim(4, 1)
    assert cache.evictions == [2]
    cache.claim(5, 1)
    assert cache.evictions == [2, 3]
    cache.claim(6, 1)
    assert cache.evictions == [2, 3, 1]


def test_lora_cache_done_again_after_reuse_counts_as_newest() -> None:
    """LoraCache: an entry reclaimed and done again is younger than one done meanwhile."""
    cache = LoraCache("device", 2)
    cache.claim(1, 1)
    cache.claim(2, 1)
    cache.mark_done(1)
    cache.mark_done(2)
    cache.claim(1, 1)  # back in use
    cache.mark_done(1)  # now done after 2
    cache.claim(3, 1)
    assert cache.evictions == [2]
    assert 1 in cache


def test_lora_cache_evicts_one_at_a_time_only_as_needed() -> None:
    """LoraCache: evicts one done entry at a time, only until enough pages are free."""
    cache = LoraCache("device", 4)
    cache.claim(1, 1)
    cache.claim(2, 1)
    cache.mark_done(1)
    cache.mark_done(2)
    cache.claim(3, 3)  # 2 free, needs 3: one eviction suffices
    assert cache.evictions == [1]
    assert 2 in cache
    assert cache.num_free_pages == 0


def test_lora_cache_no_eviction_when_free_pages_suffice() -> None:
    """LoraCache: done entries are not evicted while free pages cover the claim."""
    cache = LoraCache("device", 4)
    cache.claim(1, 2)
    cache.mark_done(1)
    cache.claim(2, 2)
    assert cache.evictions == []
    assert cache.entry(1) == CacheEntryView(pages=2, in_use=False)


def test_lora_cache_never_evicts_in_use_entry_and_keeps_earlier_evictions() -> None:
    """LoraCache: in-use entries are never evicted; evictions before the raise stay."""
    cache = LoraCache("host", 3)
    cache.claim(1, 1)
    cache.claim(2, 1)
    cache.claim(3, 1)
    cache.mark_done(2)
    with pytest.raises(LoraCacheFullException, match="host LoRA cache: no done tasks to evict"):
        cache.claim(4, 2)
    assert cache.evictions == [2]
    assert 2 not in cache
    assert 4 not in cache
    assert cache.entry(1) == CacheEntryView(pages=1, in_use=True)
    assert cache.entry(3) == CacheEntryView(pages=1, in_use=True)
    assert cache.num_free_pages == 1


def test_lora_cache_full_of_in_use_entries_raises() -> None:
    """LoraCache: no done entry left and pages short -> LoraCacheFullException."""
    cache = LoraCache("device", 2)
    cache.claim(1, 2)
    with pytest.raises(LoraCacheFullException, match="no done tasks to evict"):
        cache.claim(2, 1)
    assert cache.evictions == []
    assert cache.num_free_pages == 0


def test_lora_cache_mark_done_returns_whether_it_was_in_use() -> None:
    """LoraCache: mark_done returns True only for an entry that was in use."""
    cache = LoraCache("device", 4)
    cache.claim(1, 2)
    assert cache.mark_done(1) is True
    assert cache.mark_done(1) is False  # already done
    assert cache.mark_done(99) is False  # absent
    assert cache.is_in_use(1) is False
    assert cache.is_in_use(99) is False


def test_lora_cache_pages_conserved() -> None:
    """LoraCache: free pages plus held pages equal capacity through claims and evictions."""
    cache = LoraCache("device", 5)
    cache.claim(1, 2)
    cache.claim(2, 3)
    cache.mark_done(1)
    cache.mark_done(2)
    cache.claim(3, 4)
    held = sum(view.pages for _, view in cache.entries())
    assert cache.num_free_pages + held == 5
    assert cache.evictions == [1, 2]


# ---------------------------------------------------------------------------
# The call ledger
# ---------------------------------------------------------------------------


def test_ledger_records_first_add_request_peft_with_caller_and_facts() -> None:
    """Ledger: add_request_peft recorded with caller, method, request id and call-time facts."""
    ledger = CallLedger(iteration=3, caller="prepare_resources")
    peft = make_peft(ledger=ledger)
    peft.add_request_peft(make_req(1, X))
    assert len(ledger.calls) == 1
    call = ledger.calls[0]
    assert (call.iteration, call.caller, call.component, call.method, call.request_id) == (
        3,
        "prepare_resources",
        "peft",
        "add_request_peft",
        1,
    )
    assert call.args.task_id == X
    assert detail(call) == {
        "already_active": False,
        "was_paused": False,
        "registered_before": False,
        "started": False,
    }


def test_ledger_add_request_peft_twice_reports_already_active() -> None:
    """Ledger: the second add_request_peft of an active request has already_active True."""
    peft = make_peft()
    r = make_req(1, X)
    peft.add_request_peft(r)
    peft.add_request_peft(r)
    second = peft_calls(peft, "add_request_peft")[1]
    assert detail(second) == {
        "already_active": True,
        "was_paused": False,
        "registered_before": True,
        "started": False,
    }


def test_ledger_add_request_peft_resume_reports_was_paused() -> None:
    """Ledger: add_request_peft of a paused request has was_paused and registered_before."""
    peft = make_peft()
    r = make_req(1, X)
    peft.add_request_peft(r)
    peft.mark_request_done(r, pause=True)
    peft.ledger.caller = "scheduler"
    peft.add_request_peft(r)
    call = peft_calls(peft, "add_request_peft")[-1]
    assert call.caller == "scheduler"
    assert detail(call) == {
        "already_active": False,
        "was_paused": True,
        "registered_before": True,
        "started": False,
    }


def test_ledger_add_request_peft_of_phantom_is_not_registered_before() -> None:
    """Ledger: a phantom's first registration has was_paused True, registered_before False."""
    peft = make_peft()
    r = make_req(1, X)
    peft.mark_request_done(r, pause=True)
    peft.add_request_peft(r)
    call = peft_calls(peft, "add_request_peft")[-1]
    assert call.facts.was_paused is True
    assert call.facts.registered_before is False


def test_ledger_records_not_cached_failure() -> None:
    """Ledger: an add_request_peft that raises not-cached is still recorded, with its facts."""
    peft = make_peft()
    with pytest.raises(PeftTaskNotCachedException):
        peft.add_request_peft(make_req(1, X, weights=False))
    (call,) = peft.ledger.calls
    assert call.method == "add_request_peft"
    assert call.request_id == 1
    assert call.result == "not_cached"
    assert call.facts.registered_before is False


def test_ledger_mark_request_done_pause_facts() -> None:
    """Ledger: mark_request_done(pause=True) records pause, was_active, and released copies."""
    peft = make_peft()
    r = make_req(1, X)
    peft.add_request_peft(r)
    peft.ensure_batch([r], [])
    peft.ledger.caller = "scheduler"
    peft.mark_request_done(r, pause=True)
    call = peft_calls(peft, "mark_request_done")[-1]
    assert call.caller == "scheduler"
    assert call.request_id == 1
    assert call.args.pause is True
    assert call.args.task_id == X
    assert detail(call) == {
        "was_active": True,
        "was_paused": False,
        "released_device": True,
        "released_host": False,
    }


def test_ledger_mark_request_done_terminate_of_paused_releases_host() -> None:
    """Ledger: terminating a paused request records was_paused and released_host True."""
    peft = make_peft()
    r = make_req(1, X)
    peft.add_request_peft(r)
    peft.ensure_batch([r], [])
    peft.mark_request_done(r, pause=True)
    peft.ledger.caller = "free_resources"
    peft.mark_request_done(r)
    call = peft_calls(peft, "mark_request_done")[-1]
    assert call.caller == "free_resources"
    assert call.args.pause is False
    assert detail(call) == {
        "was_active": False,
        "was_paused": True,
        "released_device": False,  # already done when it was paused
        "released_host": True,
    }


def test_ledger_mark_request_done_phantom_release_facts() -> None:
    """Ledger: a pause release of a request that owns nothing shows was_active/was_paused False."""
    peft = make_peft()
    peft.mark_request_done(make_req(5, X), pause=True)
    (call,) = peft.ledger.calls
    assert call.args.pause is True
    assert detail(call) == {
        "was_active": False,
        "was_paused": False,
        "released_device": False,
        "released_host": False,
    }


def test_ledger_ensure_batch_recorded_with_tasks_and_failure() -> None:
    """Ledger: ensure_batch recorded with no request id, its task list and its result."""
    peft = make_peft(device_pages=2)
    r1, r2 = make_req(1, X), make_req(2, Y)
    peft.add_request_peft(r1)
    peft.add_request_peft(r2)
    peft.ensure_batch([r1], [])
    with pytest.raises(LoraCacheFullException):
        peft.ensure_batch([r1], [r2])
    ok, failed = peft_calls(peft, "ensure_batch")
    assert (ok.request_id, ok.args.tasks, ok.result) == (None, (X,), "ok")
    assert (failed.request_id, failed.args.tasks, failed.result) == (
        None,
        (X, Y),
        "LoraCacheFullException",
    )


def test_ever_registered_grows_on_registration_only() -> None:
    """ever_registered grows on registration; releases (and phantoms) never add to it."""
    peft = make_peft()
    r1, r2 = make_req(1, X), make_req(2, Y)
    peft.add_request_peft(r1)
    assert peft.ever_registered == {1}
    peft.mark_request_done(make_req(3, X), pause=True)  # phantom
    peft.add_request_peft(r2)
    assert peft.ever_registered == {1, 2}
    peft.mark_request_done(r1)
    peft.mark_request_done(r2, pause=True)
    assert peft.ever_registered == {1, 2}


# ---------------------------------------------------------------------------
# determine_num_pages and max_device_pages
# ---------------------------------------------------------------------------


def test_determine_num_pages_is_the_adapter_size() -> None:
    """determine_num_pages: the adapter's pages; 0 for a request with no adapter."""
    peft = make_peft()
    assert peft.determine_num_pages(make_req(1, X)) == 2
    assert peft.determine_num_pages(make_req(2, Z)) == 3
    assert peft.determine_num_pages(make_req(3, S)) == 1
    assert peft.determine_num_pages(make_req(4, None, False)) == 0


def test_max_device_pages_is_the_device_cache_capacity() -> None:
    """max_device_pages: the device LoRA cache's capacity (not the host's, not free pages)."""
    peft = make_peft(device_pages=5, host_pages=11)
    assert peft.max_device_pages == 5
    r = make_req(1, Z)
    peft.add_request_peft(r)
    peft.ensure_batch([r], [])
    assert peft.max_device_pages == 5
    assert peft.device_cache.num_free_pages == 2
