"""Example tests for the KV pool model, ``peftlife.kv.KVCacheManager``.

Each test names the residency rule it covers (docs/glossary.md), or the
pages and faults it checks. Page conservation (invariant 10)
is checked after every step of a seeded random walk at the end.
"""

from __future__ import annotations

import random

import pytest

from peftlife.world.kv import NO_CACHE, CacheView, KVCacheManager
from peftlife.world.ledger import Call, CallLedger, given
from peftlife.world.request import LlmRequestState, Request
from peftlife.world.residency import Residency

# ---- helpers ----


def req(request_id: int, prompt_len: int = 8, max_new_tokens: int = 4) -> Request:
    return Request(request_id, None, False, prompt_len=prompt_len, max_new_tokens=max_new_tokens)


def started_req(request_id: int) -> Request:
    r = req(request_id)
    r.state = LlmRequestState.GENERATION_IN_PROGRESS
    return r


def pool(device: int = 8, host: int = 0, tpb: int = 4) -> KVCacheManager:
    return KVCacheManager(device_pages=device, tokens_per_block=tpb, host_pages=host)


def with_capacity(p: KVCacheManager, r: Request, capacity: int) -> None:
    """Create r's cache in p and size it to ``capacity`` tokens; both must succeed."""
    assert p.prepare_context(r) is True
    assert p.resize_context(r, capacity) is True


def last(p: KVCacheManager) -> Call:
    return p.ledger.calls[-1]


def assert_conserved(p: KVCacheManager) -> None:
    """Invariant 10 on both tiers: free pages plus held pages equal capacity."""
    v = p.pool_view()
    held_device = sum(d for _, d, _ in v.holders)
    held_host = sum(h for _, _, h in v.holders)
    assert v.device_free >= 0 and v.host_free >= 0, v
    assert v.device_free + held_device == v.device_capacity, v
    assert v.host_free + held_host == v.host_capacity, v


# ---- section 3, prepare_context ----


def test_prepare_context_creates_active_cache_with_no_pages() -> None:
    """Section 3, prepare_context: NONE to ACTIVE, the new cache holds no pages."""
    p = pool(device=4)
    r = req(1)
    assert p.residency(1) is Residency.NONE
    assert p.prepare_context(r) is True
    assert p.residency(1) is Residency.ACTIVE
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=0, device_pages=0, host_pages=0)
    assert p.num_free_device_pages == 4
    assert (last(p).method, last(p).request_id, last(p).result) == ("prepare_context", 1, True)
    assert last(p).facts.created is True
    assert_conserved(p)


def test_prepare_context_on_active_cache_is_harmless() -> None:
    """Section 3, prepare_context: an already ACTIVE cache is left as it is."""
    p = pool(device=4)
    r = req(1)
    with_capacity(p, r, 6)
    assert p.prepare_context(r) is True
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=6, device_pages=2, host_pages=0)
    assert p.num_free_device_pages == 2
    assert last(p).facts.created is None


def test_prepare_context_resumes_a_suspended_cache_from_the_host() -> None:
    """Section 3, prepare_context: resumes a suspended cache, host pages back on device."""
    p = pool(device=4, host=4)
    r = req(1)
    with_capacity(p, r, 7)
    p.suspend_request(r)
    assert p.view(1) == CacheView(Residency.SUSPENDED, capacity=7, device_pages=0, host_pages=2)
    assert p.prepare_context(r) is True
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=7, device_pages=2, host_pages=0)
    assert (p.num_free_device_pages, p.num_free_host_pages) == (2, 4)
    assert_conserved(p)


def test_prepare_context_resumes_a_cache_suspended_in_place() -> None:
    """Section 3, prepare_context: a cache suspended without a lower tier resumes for free."""
    p = pool(device=3)
    a, b = req(1), req(2)
    with_capacity(p, a, 8)
    p.suspend_request(a)
    with_capacity(p, b, 4)  # the last free page
    assert p.num_free_device_pages == 0
    assert p.prepare_context(a) is True
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=8, device_pages=2, host_pages=0)
    assert_conserved(p)


def test_prepare_context_resume_refused_when_device_lacks_room() -> None:
    """Section 3, prepare_context: resume refused under pressure returns false, stays SUSPENDED."""
    p = pool(device=3, host=4)
    a, b = req(1), req(2)
    with_capacity(p, a, 8)  # 2 pages
    p.suspend_request(a)  # to host, device has 3 free
    with_capacity(p, b, 12)  # takes all 3
    assert p.prepare_context(a) is False
    assert p.view(1) == CacheView(Residency.SUSPENDED, capacity=8, device_pages=0, host_pages=2)
    assert (p.num_free_device_pages, p.num_free_host_pages) == (0, 2)
    assert last(p).result is False
    assert last(p).facts.fault == "no_device_room"
    assert_conserved(p)
    # Once room is made, the same resume succeeds.
    p.free_resources(b)
    assert p.prepare_context(a) is True
    assert p.is_request_active(1)


# ---- section 3, resize_context ----


@pytest.mark.parametrize(
    ("tpb", "capacity", "pages"),
    [(4, 0, 0), (4, 1, 1), (4, 4, 1), (4, 5, 2), (4, 8, 2), (4, 9, 3), (1, 5, 5), (16, 17, 2)],
)
def test_resize_context_pages_are_ceil_of_capacity(tpb: int, capacity: int, pages: int) -> None:
    """Section 3, resize_context: pages = ceil(capacity / tokens_per_block)."""
    p = pool(device=8, tpb=tpb)
    r = req(1)
    with_capacity(p, r, capacity)
    assert p.pages_for(capacity) == pages
    assert p.num_device_pages(1) == pages
    assert p.num_free_device_pages == 8 - pages
    assert_conserved(p)


def test_resize_context_covers_the_cursor_plus_the_chunk_and_never_shrinks() -> None:
    """Section 3, resize_context, as upstream's KVCacheManagerV2: the argument is the
    chunk's tokens over the context cursor; the cache grows to cover them, never shrinks."""
    p = pool(device=8, tpb=4)
    r = req(1)
    with_capacity(p, r, 6)
    r.context_current_position = 6  # the first chunk ran
    assert p.resize_context(r, 4) is True
    assert p.view(1).capacity == 10  # not 4, not 16
    assert p.num_device_pages(1) == 3
    assert last(p).facts.num_tokens == 4
    assert p.resize_context(r, 1) is True  # covered already: nothing shrinks
    assert p.view(1).capacity == 10
    assert_conserved(p)


def test_revert_allocate_context_undoes_the_growth_and_suspends() -> None:
    """revert_allocate_context: back to the capacity before this growth; the cache is
    then suspended (upstream's revert), its pages moved down when the tier has room."""
    p = pool(device=8, host=8, tpb=4)
    r = req(1)
    with_capacity(p, r, 4)
    assert p.resize_context(r, 13) is True
    assert (p.num_device_pages(1), p.num_free_device_pages) == (4, 4)
    assert p.revert_allocate_context(r) is True
    assert p.view(1) == CacheView(Residency.SUSPENDED, capacity=4, device_pages=0, host_pages=1)
    assert p.num_free_device_pages == 8
    assert_conserved(p)
    # A second revert has nothing to undo.
    assert p.revert_allocate_context(r) is True
    assert p.view(1).capacity == 4


def test_revert_allocate_context_of_a_first_chunk_keeps_it_active_and_empty() -> None:
    """revert_allocate_context from capacity 0: the growth is undone, nothing suspended."""
    p = pool(device=8, tpb=4)
    r = req(1)
    assert p.prepare_context(r) is True
    assert p.resize_context(r, 8) is True
    assert p.revert_allocate_context(r) is True
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=0, device_pages=0, host_pages=0)
    assert_conserved(p)


def test_failed_resize_of_a_first_chunk_suspends_its_cache() -> None:
    """resize_context, as upstream: a first chunk that cannot grow is suspended."""
    p = pool(device=1, tpb=4)
    r = req(1)
    assert p.prepare_context(r) is True
    assert p.resize_context(r, 8) is False
    assert p.residency(1) is Residency.SUSPENDED
    assert_conserved(p)


def test_preempt_request_frees_the_cache_and_is_recorded_as_a_recompute_free() -> None:
    """preempt_request: the cache is gone on every tier; the ledger counts it as the
    scheduler freeing a started request (recompute-pending starts)."""
    p = pool(device=8, host=8, tpb=4)
    r = started_req(1)
    with_capacity(p, r, 8)
    p.ledger.caller = "scheduler"
    p.preempt_request(r)
    assert p.residency(1) is Residency.NONE
    assert p.num_free_device_pages == 8
    assert last(p).method == "preempt_request"
    assert last(p).frees_started_request
    assert_conserved(p)


def test_upstream_queries_tier_below_gpu_and_cache_map() -> None:
    """has_cache_tier_below_gpu follows the lower tier; kv_cache_map answers membership."""
    assert pool(host=0).has_cache_tier_below_gpu is False
    p = pool(host=4)
    assert p.has_cache_tier_below_gpu is True
    r = req(1)
    assert 1 not in p.kv_cache_map
    p.prepare_context(r)
    assert 1 in p.kv_cache_map
    assert p.has_active_cache(r)
    p.suspend_request(r)
    assert not p.has_active_cache(r)


def test_joint_draft_calls_with_prefix_reuse_off() -> None:
    """The joint pairing's calls: nothing is reused; preparing creates or resumes;
    the draft's context growth follows resize_context."""
    p = pool(device=2, host=4, tpb=4)
    r = req(1)
    assert p.probe_context_reuse(r) == 0
    assert p.prepare_context_cache(r, 0) == 0
    assert p.try_allocate_draft_context(r, 8) is True
    assert p.view(1).capacity == 8
    assert p.try_allocate_draft_context(r, 12) is False
    p.suspend_request(r)
    p.refuse_next_resumes()
    assert p.prepare_context_cache(r, None) is None


def test_resize_context_false_when_pool_cannot() -> None:
    """Section 3, resize_context: false when the pool lacks the pages; nothing is taken."""
    p = pool(device=3, tpb=4)
    a, b = started_req(1), req(2)  # a started request stays ACTIVE when it cannot grow
    with_capacity(p, a, 4)
    with_capacity(p, b, 4)
    assert p.resize_context(a, 12) is False  # needs 2 more pages, 1 free
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=4, device_pages=1, host_pages=0)
    assert p.num_free_device_pages == 1
    assert last(p).result is False
    assert last(p).facts.fault == "no_device_room"
    # Exactly filling the device is allowed.
    assert p.resize_context(a, 8) is True
    assert p.num_free_device_pages == 0
    assert_conserved(p)


def test_resize_context_false_without_an_active_cache() -> None:
    """Section 3, resize_context: no cache, or a suspended cache, cannot be resized."""
    p = pool(device=4, host=4)
    r = req(1)
    assert p.resize_context(r, 4) is False
    assert p.residency(1) is Residency.NONE
    with_capacity(p, r, 4)
    p.suspend_request(r)
    assert p.resize_context(r, 8) is False
    assert p.view(1) == CacheView(Residency.SUSPENDED, capacity=4, device_pages=0, host_pages=1)
    assert_conserved(p)


# ---- section 3, try_allocate_generation ----


def test_try_allocate_generation_grows_by_one_token() -> None:
    """Section 3, try_allocate_generation: grows by one token, a page only at a boundary."""
    p = pool(device=4, tpb=4)
    r = req(1)
    with_capacity(p, r, 3)
    assert p.try_allocate_generation(r) is True
    assert (p.view(1).capacity, p.num_device_pages(1)) == (4, 1)  # same page
    assert p.try_allocate_generation(r) is True
    assert (p.view(1).capacity, p.num_device_pages(1)) == (5, 2)  # a new page
    assert p.num_free_device_pages == 2
    assert (last(p).method, last(p).result) == ("try_allocate_generation", True)
    assert_conserved(p)


def test_try_allocate_generation_without_cache_is_false() -> None:
    """Section 3, try_allocate_generation: no cache to grow, false, none created."""
    p = pool()
    assert p.try_allocate_generation(req(1)) is False
    assert p.residency(1) is Residency.NONE
    assert (last(p).method, last(p).result) == ("try_allocate_generation", False)


def test_try_allocate_generation_false_when_device_is_full() -> None:
    """Section 3, try_allocate_generation: a grow that needs a page the pool lacks fails."""
    p = pool(device=1, tpb=4)
    r = req(1)
    with_capacity(p, r, 4)
    assert p.try_allocate_generation(r) is False
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=4, device_pages=1, host_pages=0)
    assert last(p).facts.fault == "no_device_room"


def test_try_allocate_generation_resumes_then_grows() -> None:
    """Section 3, try_allocate_generation: if suspended, resume first, then grow."""
    p = pool(device=4, host=4, tpb=4)
    r = req(1)
    with_capacity(p, r, 8)
    p.suspend_request(r)
    assert p.try_allocate_generation(r) is True
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=9, device_pages=3, host_pages=0)
    assert (p.num_free_device_pages, p.num_free_host_pages) == (1, 4)
    assert_conserved(p)


def test_try_allocate_generation_failed_grow_after_resume_leaves_cache_active() -> None:
    """Section 3, try_allocate_generation: a failed grow after a resume leaves the cache ACTIVE."""
    p = pool(device=3, host=4, tpb=4)
    a, b = req(1), req(2)
    with_capacity(p, a, 8)  # 2 pages
    p.suspend_request(a)  # to host
    with_capacity(p, b, 4)  # 1 page; 2 left, enough to resume a but not to grow it
    assert p.try_allocate_generation(a) is False
    assert p.residency(1) is Residency.ACTIVE
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=8, device_pages=2, host_pages=0)
    assert (p.num_free_device_pages, p.num_free_host_pages) == (0, 4)
    assert last(p).facts.fault == "no_device_room"
    assert_conserved(p)


def test_try_allocate_generation_injected_failed_grow_after_resume_leaves_cache_active() -> None:
    """Section 3, try_allocate_generation: resume, then a fail_next_grows grow: ACTIVE, false."""
    p = pool(device=8, host=4, tpb=4)
    r = req(1)
    with_capacity(p, r, 6)
    p.suspend_request(r)
    p.fail_next_grows()
    assert p.try_allocate_generation(r) is False
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=6, device_pages=2, host_pages=0)
    assert last(p).facts.fault == "failed_grow"
    assert p.pending_faults == (0, 0)
    assert_conserved(p)


def test_try_allocate_generation_resume_refused_when_device_lacks_room() -> None:
    """Section 3, try_allocate_generation: resume refused (no device room): false, SUSPENDED."""
    p = pool(device=2, host=4, tpb=4)
    a, b = req(1), req(2)
    with_capacity(p, a, 8)
    p.suspend_request(a)
    with_capacity(p, b, 1)  # 1 page left, a needs 2 to resume
    assert p.try_allocate_generation(a) is False
    assert p.view(1) == CacheView(Residency.SUSPENDED, capacity=8, device_pages=0, host_pages=2)
    assert (p.num_free_device_pages, p.num_free_host_pages) == (1, 2)
    assert last(p).facts.fault == "no_device_room"
    assert_conserved(p)


# ---- section 3, revert_allocate_generation ----


def test_revert_allocate_generation_undoes_the_grow() -> None:
    """Section 3, revert_allocate_generation: undoes the grow and frees its new page."""
    p = pool(device=4, tpb=4)
    r = req(1)
    with_capacity(p, r, 4)
    assert p.try_allocate_generation(r) is True
    assert (p.view(1).capacity, p.num_free_device_pages) == (5, 2)
    assert p.revert_allocate_generation(r) is None
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=4, device_pages=1, host_pages=0)
    assert p.num_free_device_pages == 3
    assert (last(p).method, last(p).request_id, last(p).result) == (
        "revert_allocate_generation",
        1,
        None,
    )
    assert_conserved(p)


def test_revert_allocate_generation_does_not_suspend_a_resumed_cache() -> None:
    """Section 3, revert_allocate_generation: after resume and grow, revert keeps it ACTIVE."""
    p = pool(device=4, host=4, tpb=4)
    r = req(1)
    with_capacity(p, r, 8)
    p.suspend_request(r)
    assert p.try_allocate_generation(r) is True
    p.revert_allocate_generation(r)
    assert p.is_request_active(1)
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=8, device_pages=2, host_pages=0)
    assert (p.num_free_device_pages, p.num_free_host_pages) == (2, 4)
    assert_conserved(p)


def test_revert_allocate_generation_within_a_page_keeps_the_page() -> None:
    """Section 3, revert_allocate_generation: a grow that took no page gives none back."""
    p = pool(device=4, tpb=4)
    r = req(1)
    with_capacity(p, r, 5)
    assert p.try_allocate_generation(r) is True
    p.revert_allocate_generation(r)
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=5, device_pages=2, host_pages=0)
    assert p.num_free_device_pages == 2


# ---- section 3, suspend_request ----


def test_suspend_request_with_room_below_moves_pages_to_host() -> None:
    """Section 3, suspend_request: with a lower tier that has room, pages move there."""
    p = pool(device=4, host=3, tpb=4)
    r = req(1)
    with_capacity(p, r, 12)  # 3 pages, exactly the host's room
    assert p.can_evict is True
    assert p.can_offload(1) is True
    assert p.suspend_request(r) is None
    assert p.view(1) == CacheView(Residency.SUSPENDED, capacity=12, device_pages=0, host_pages=3)
    assert (p.num_free_device_pages, p.num_free_host_pages) == (4, 0)
    assert not p.is_request_active(1)
    assert last(p).method == "suspend_request"
    assert last(p).facts.moved_to_host is True
    assert_conserved(p)


def test_suspend_request_without_lower_tier_keeps_device_pages() -> None:
    """Section 3, suspend_request: no lower tier, inactive but keeps its device pages."""
    p = pool(device=4, host=0, tpb=4)
    r = req(1)
    with_capacity(p, r, 8)
    assert p.can_evict is False
    assert p.can_offload(1) is False
    p.suspend_request(r)
    assert p.view(1) == CacheView(Residency.SUSPENDED, capacity=8, device_pages=2, host_pages=0)
    assert p.num_free_device_pages == 2  # suspension freed nothing
    assert last(p).facts.moved_to_host is False
    assert_conserved(p)


def test_suspend_request_lower_tier_without_room_is_all_or_nothing() -> None:
    """Section 3, suspend_request: lower tier lacks room for the whole cache, keeps device pages."""
    p = pool(device=8, host=4, tpb=4)
    a, b = req(1), req(2)
    with_capacity(p, a, 8)
    p.suspend_request(a)  # 2 host pages used, 2 left
    with_capacity(p, b, 12)  # 3 pages: more than the host's 2 free
    assert p.can_offload(2) is False
    p.suspend_request(b)
    assert p.view(2) == CacheView(Residency.SUSPENDED, capacity=12, device_pages=3, host_pages=0)
    assert (p.num_free_device_pages, p.num_free_host_pages) == (5, 2)  # no partial move
    assert last(p).facts.moved_to_host is False
    assert_conserved(p)


def test_suspend_request_no_op_without_cache() -> None:
    """Section 3, suspend_request: no-op if there is no cache (none is created)."""
    p = pool(device=4, host=4)
    p.suspend_request(req(1))
    assert p.residency(1) is Residency.NONE
    assert not p.has_cache(1)
    assert (p.num_free_device_pages, p.num_free_host_pages) == (4, 4)
    assert (last(p).method, last(p).request_id) == ("suspend_request", 1)


def test_suspend_request_no_op_when_already_suspended() -> None:
    """Section 3, suspend_request: suspending a suspended cache changes nothing."""
    p = pool(device=4, host=4, tpb=4)
    r = req(1)
    with_capacity(p, r, 8)
    p.suspend_request(r)
    before = (p.view(1), p.pool_view())
    p.suspend_request(r)
    assert (p.view(1), p.pool_view()) == before
    assert last(p).facts.moved_to_host is False


def test_suspend_request_in_place_then_no_op_even_after_host_frees_up() -> None:
    """Section 3, suspend_request: a cache suspended in place is not moved by a second suspend."""
    p = pool(device=8, host=2, tpb=4)
    a, b = req(1), req(2)
    with_capacity(p, a, 8)
    p.suspend_request(a)  # fills host
    with_capacity(p, b, 4)
    p.suspend_request(b)  # no room below: in place
    p.free_resources(a)  # host has room now
    p.suspend_request(b)
    assert p.view(2) == CacheView(Residency.SUSPENDED, capacity=4, device_pages=1, host_pages=0)
    assert_conserved(p)


# ---- section 3, free_resources ----


def _to_state(p: KVCacheManager, r: Request, state: str) -> None:
    if state == "none":
        return
    with_capacity(p, r, 7)  # 2 pages
    if state == "suspended_host":
        p.suspend_request(r)
        assert p.view(r.request_id).host_pages == 2
    elif state == "suspended_in_place":
        p.suspend_request(r)
        assert p.view(r.request_id).device_pages == 2


@pytest.mark.parametrize(
    ("host", "state", "was_active"),
    [
        (4, "none", False),
        (4, "active", True),
        (4, "suspended_host", False),
        (0, "suspended_in_place", False),
        (1, "suspended_in_place", False),  # a lower tier too small for the cache
    ],
)
def test_free_resources_from_every_state_frees_every_tier(
    host: int, state: str, was_active: bool
) -> None:
    """Section 3, free_resources: any state to NONE, pages freed on every tier."""
    p = pool(device=4, host=host, tpb=4)
    other = req(9)
    with_capacity(p, other, 4)  # a bystander keeps its page
    r = req(1)
    _to_state(p, r, state)
    expected = {"none": Residency.NONE, "active": Residency.ACTIVE}.get(state, Residency.SUSPENDED)
    assert p.residency(1) is expected
    p.free_resources(r)
    assert p.residency(1) is Residency.NONE
    assert not p.has_cache(1)
    assert p.view(1) == NO_CACHE
    assert (p.num_free_device_pages, p.num_free_host_pages) == (3, host)
    assert p.view(9) == CacheView(Residency.ACTIVE, capacity=4, device_pages=1, host_pages=0)
    call = last(p)
    assert (call.method, call.request_id, call.result) == ("free_resources", 1, None)
    assert call.facts.had_cache is (state != "none")
    assert call.facts.was_active is was_active
    assert_conserved(p)


def test_free_resources_records_started() -> None:
    """Section 3, free_resources: the ledger records whether the request had started."""
    p = pool()
    fresh, running = req(1), started_req(2)
    with_capacity(p, fresh, 4)
    with_capacity(p, running, 4)
    p.free_resources(fresh)
    assert last(p).facts.started is False
    p.free_resources(running)
    assert last(p).facts.started is True
    assert p.num_free_device_pages == 8


def test_free_resources_twice_is_harmless() -> None:
    """Section 3, free_resources: freeing a freed request frees nothing more."""
    p = pool(device=4)
    r = req(1)
    with_capacity(p, r, 8)
    p.free_resources(r)
    p.free_resources(r)
    assert p.num_free_device_pages == 4
    assert last(p).facts.had_cache is False
    assert_conserved(p)


# ---- section 3, is_request_active ----


def test_is_request_active_follows_residency() -> None:
    """Section 3, is_request_active: true exactly when the cache exists and is ACTIVE."""
    p = pool(device=4, host=4)
    r = req(1)
    assert p.is_request_active(1) is False  # unknown id
    p.prepare_context(r)
    assert p.is_request_active(1) is True  # created, even with no pages
    p.resize_context(r, 5)
    p.suspend_request(r)
    assert p.is_request_active(1) is False  # suspended
    p.prepare_context(r)
    assert p.is_request_active(1) is True  # resumed
    p.free_resources(r)
    assert p.is_request_active(1) is False  # freed
    assert p.is_request_active(2) is False


def test_is_request_active_false_for_cache_suspended_in_place() -> None:
    """Section 3, is_request_active: a suspended cache holding device pages is not active."""
    p = pool(device=4, host=0)
    r = req(1)
    with_capacity(p, r, 4)
    p.suspend_request(r)
    assert p.num_device_pages(1) == 1
    assert p.is_request_active(1) is False


# ---- section 3, faults: refuse the next resume ----


def _suspended_on_host(p: KVCacheManager, r: Request, capacity: int = 8) -> None:
    with_capacity(p, r, capacity)
    p.suspend_request(r)
    assert p.residency(r.request_id) is Residency.SUSPENDED


def test_refuse_next_resumes_fails_prepare_context_once() -> None:
    """Section 3, faults: refuse_next_resumes fails the next prepare_context resume, one-shot."""
    p = pool(device=8, host=4, tpb=4)
    r = req(1)
    _suspended_on_host(p, r)
    p.refuse_next_resumes()
    assert p.pending_faults == (1, 0)
    assert p.prepare_context(r) is False
    assert p.view(1) == CacheView(Residency.SUSPENDED, capacity=8, device_pages=0, host_pages=2)
    assert last(p).facts.fault == "refused_resume"
    assert p.pending_faults == (0, 0)
    assert p.prepare_context(r) is True  # one-shot
    assert p.is_request_active(1)
    assert_conserved(p)


def test_refuse_next_resumes_fails_try_allocate_generation_once() -> None:
    """Section 3, faults: refuse_next_resumes fails a try_allocate_generation resume; no grow."""
    p = pool(device=8, host=4, tpb=4)
    r = req(1)
    _suspended_on_host(p, r)
    p.refuse_next_resumes()
    assert p.try_allocate_generation(r) is False
    assert p.view(1) == CacheView(Residency.SUSPENDED, capacity=8, device_pages=0, host_pages=2)
    assert last(p).facts.fault == "refused_resume"
    assert p.try_allocate_generation(r) is True  # one-shot
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=9, device_pages=3, host_pages=0)
    assert_conserved(p)


def test_refuse_next_resumes_also_refuses_a_resume_needing_no_pages() -> None:
    """Section 3, faults: a refused resume refuses even a cache suspended in place."""
    p = pool(device=8, host=0, tpb=4)
    r = req(1)
    _suspended_on_host(p, r)  # no host: suspended in place
    p.refuse_next_resumes()
    assert p.prepare_context(r) is False
    assert p.residency(1) is Residency.SUSPENDED
    assert p.num_device_pages(1) == 2


def test_refuse_next_resumes_count_n() -> None:
    """Section 3, faults: refuse_next_resumes(N) refuses exactly the next N resumes."""
    p = pool(device=8, host=8, tpb=4)
    a, b = req(1), req(2)
    _suspended_on_host(p, a)
    _suspended_on_host(p, b)
    p.refuse_next_resumes(2)
    assert p.pending_faults == (2, 0)
    assert p.prepare_context(a) is False
    assert p.try_allocate_generation(b) is False
    assert p.pending_faults == (0, 0)
    assert p.prepare_context(a) is True
    assert p.try_allocate_generation(b) is True
    assert_conserved(p)


def test_refuse_next_resumes_counts_add_up() -> None:
    """Section 3, faults: two refuse_next_resumes calls refuse two resumes."""
    p = pool(device=8, host=8, tpb=4)
    r = req(1)
    _suspended_on_host(p, r)
    p.refuse_next_resumes()
    p.refuse_next_resumes()
    assert p.prepare_context(r) is False
    assert p.prepare_context(r) is False
    assert p.prepare_context(r) is True


def test_refuse_next_resumes_ignores_creation_and_active_caches() -> None:
    """Section 3, faults: only a resume is refused; creating or re-preparing is not a resume."""
    p = pool(device=8, host=4, tpb=4)
    r = req(1)
    p.refuse_next_resumes()
    assert p.prepare_context(r) is True  # creation
    assert p.resize_context(r, 4) is True
    assert p.prepare_context(r) is True  # already active
    assert p.try_allocate_generation(r) is True  # no resume needed
    assert p.pending_faults == (1, 0)  # still armed for the next real resume
    p.suspend_request(r)
    assert p.prepare_context(r) is False


# ---- section 3, faults: fail the next grow ----


def test_fail_next_grows_fails_resize_context_needing_no_new_page() -> None:
    """Section 3, faults: fail_next_grows fails the next resize_context, even with no new page."""
    p = pool(device=8, tpb=4)
    r = started_req(1)
    with_capacity(p, r, 5)
    p.fail_next_grows()
    assert p.resize_context(r, 6) is False  # 6 tokens fit in the same 2 pages
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=5, device_pages=2, host_pages=0)
    assert last(p).facts.fault == "failed_grow"
    assert p.resize_context(r, 6) is True  # one-shot
    assert p.view(1).capacity == 6


def test_fail_next_grows_fails_resize_context_needing_pages() -> None:
    """Section 3, faults: fail_next_grows fails a resize_context that needs pages; none taken."""
    p = pool(device=8, tpb=4)
    r = req(1)
    with_capacity(p, r, 4)
    p.fail_next_grows()
    assert p.resize_context(r, 16) is False
    assert p.num_free_device_pages == 7
    assert_conserved(p)


def test_fail_next_grows_fails_generation_grow_needing_no_new_page() -> None:
    """Section 3, faults: fail_next_grows fails a generation grow, even with no new page."""
    p = pool(device=8, tpb=4)
    r = req(1)
    with_capacity(p, r, 5)
    p.fail_next_grows()
    assert p.try_allocate_generation(r) is False
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=5, device_pages=2, host_pages=0)
    assert last(p).facts.fault == "failed_grow"
    assert p.try_allocate_generation(r) is True  # one-shot
    assert p.view(1).capacity == 6


def test_fail_next_grows_count_n() -> None:
    """Section 3, faults: fail_next_grows(N) fails exactly the next N grows."""
    p = pool(device=8, tpb=4)
    r = req(1)
    with_capacity(p, r, 4)
    p.fail_next_grows(3)
    assert p.resize_context(r, 5) is False
    assert p.try_allocate_generation(r) is False
    assert p.resize_context(r, 8) is False
    assert p.pending_faults == (0, 0)
    assert p.try_allocate_generation(r) is True
    assert p.view(1).capacity == 5


def test_fail_next_grows_does_not_affect_shrink_or_revert() -> None:
    """Section 3, faults: fail_next_grows leaves a shrink and a revert alone, still armed."""
    p = pool(device=8, tpb=4)
    r = req(1)
    with_capacity(p, r, 12)
    assert p.try_allocate_generation(r) is True  # 13 tokens, 4 pages
    p.fail_next_grows()
    p.revert_allocate_generation(r)
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=12, device_pages=3, host_pages=0)
    assert p.revert_allocate_context(r) is True  # the chunk's growth, from 0
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=0, device_pages=0, host_pages=0)
    assert p.pending_faults == (0, 1)
    assert p.resize_context(r, 5) is False  # the next grow still fails
    assert_conserved(p)


def test_fail_next_grows_does_not_affect_resume_or_creation() -> None:
    """Section 3, faults: fail_next_grows fails grows only, not a creation or a bare resume."""
    p = pool(device=8, host=4, tpb=4)
    r = req(1)
    with_capacity(p, r, 4)
    p.suspend_request(r)
    p.fail_next_grows()
    assert p.prepare_context(r) is True  # resume
    assert p.prepare_context(req(2)) is True  # creation
    assert p.pending_faults == (0, 1)


# ---- section 3, faults: clear and aim ----


def test_clear_faults_disarms_both() -> None:
    """Section 3, faults: clear_faults drops pending refusals and failures."""
    p = pool(device=8, host=4, tpb=4)
    r = req(1)
    _suspended_on_host(p, r)
    p.refuse_next_resumes(3)
    p.fail_next_grows(2)
    assert p.pending_faults == (3, 2)
    p.clear_faults()
    assert p.pending_faults == (0, 0)
    assert p.try_allocate_generation(r) is True
    assert p.resize_context(r, 20) is True
    assert p.view(1) == CacheView(Residency.ACTIVE, capacity=20, device_pages=5, host_pages=0)


def test_faults_are_aimed_at_one_pool() -> None:
    """Section 3, faults: a fault in the target pool does not touch the draft pool."""
    ledger = CallLedger()
    target = KVCacheManager(device_pages=8, tokens_per_block=4, host_pages=4, ledger=ledger)
    draft = KVCacheManager(
        device_pages=8, tokens_per_block=4, host_pages=4, ledger=ledger, name="draft"
    )
    r = req(1)
    for p in (target, draft):
        _suspended_on_host(p, r)
    target.refuse_next_resumes()
    target.fail_next_grows()
    assert draft.try_allocate_generation(r) is True
    assert draft.resize_context(r, 12) is True
    assert target.pending_faults == (1, 1)
    assert draft.pending_faults == (0, 0)
    assert target.prepare_context(r) is False
    assert [(c.component, c.method, c.result) for c in ledger.calls[-3:]] == [
        ("draft", "try_allocate_generation", True),
        ("draft", "resize_context", True),
        ("target", "prepare_context", False),
    ]


# ---- ledger ----


def test_every_call_is_recorded_in_the_ledger_in_order() -> None:
    """Ledger: every method records method, request id and result, in call order."""
    p = pool(device=2, host=4, tpb=4)
    r = req(7)
    p.prepare_context(r)
    p.resize_context(r, 8)
    p.try_allocate_generation(r)  # needs a third page: fails
    p.revert_allocate_generation(r)
    p.suspend_request(r)
    p.prepare_context(r)
    p.free_resources(r)
    got = [(c.component, c.method, c.request_id, c.result) for c in p.ledger.calls]
    assert got == [
        ("target", "prepare_context", 7, True),
        ("target", "resize_context", 7, True),
        ("target", "try_allocate_generation", 7, False),
        ("target", "revert_allocate_generation", 7, None),
        ("target", "suspend_request", 7, None),
        ("target", "prepare_context", 7, True),
        ("target", "free_resources", 7, None),
    ]
    facts = [given(c.facts) for c in p.ledger.calls]
    assert facts[1] == {
        "num_tokens": 8,
        "capacity": 8,
        "before": Residency.ACTIVE,
        "after": Residency.ACTIVE,
    }
    assert facts[2] == {
        "fault": "no_device_room",
        "before": Residency.ACTIVE,
        "after": Residency.ACTIVE,
    }
    assert facts[4] == {
        "moved_to_host": True,
        "before": Residency.ACTIVE,
        "after": Residency.SUSPENDED,
    }
    # A clean resume carries no fault; its residency says it resumed.
    assert facts[5] == {"before": Residency.SUSPENDED, "after": Residency.ACTIVE}
    assert facts[6] == {
        "had_cache": True,
        "was_active": True,
        "started": False,
        "before": Residency.ACTIVE,
        "after": Residency.NONE,
    }


def test_ledger_records_injected_faults() -> None:
    """Ledger: an injected fault is recorded as the call's ``fault`` fact."""
    p = pool(device=8, host=4, tpb=4)
    r = req(1)
    _suspended_on_host(p, r)
    p.refuse_next_resumes()
    p.try_allocate_generation(r)
    p.prepare_context(r)
    p.fail_next_grows()
    p.resize_context(r, 9)
    facts = [(c.method, c.result, c.facts.fault) for c in p.ledger.calls[-3:]]
    assert facts == [
        ("try_allocate_generation", False, "refused_resume"),
        ("prepare_context", True, None),
        ("resize_context", False, "failed_grow"),
    ]


def test_ledger_follows_iteration_and_caller() -> None:
    """Ledger: calls carry the ledger's current iteration and caller."""
    ledger = CallLedger()
    p = KVCacheManager(device_pages=4, tokens_per_block=4, ledger=ledger)
    ledger.iteration, ledger.caller = 3, "scheduler"
    p.prepare_context(req(1))
    ledger.caller = "free_resources"
    p.free_resources(req(1))
    assert [(c.iteration, c.caller, c.method) for c in ledger.calls] == [
        (3, "scheduler", "prepare_context"),
        (3, "free_resources", "free_resources"),
    ]


# ---- construction ----


@pytest.mark.parametrize(("device", "tpb", "host"), [(0, 4, 0), (4, 0, 0), (4, 4, -1)])
def test_pool_rejects_bad_sizes(device: int, tpb: int, host: int) -> None:
    """Section 3, pages: a pool needs device pages, a block size and a non-negative host tier."""
    with pytest.raises(ValueError):
        KVCacheManager(device_pages=device, tokens_per_block=tpb, host_pages=host)


# ---- page conservation over a seeded random walk ----


def _check_world(p: KVCacheManager, ids: list[int]) -> None:
    assert_conserved(p)
    for rid in ids:
        v = p.view(rid)
        if v.residency is Residency.NONE:
            assert v == NO_CACHE
            continue
        # A cache's pages, wherever they are, are ceil(capacity / tokens_per_block).
        assert v.device_pages + v.host_pages == p.pages_for(v.capacity), (rid, v)
        # A cache is never split across tiers; an ACTIVE cache is all on device.
        assert v.device_pages == 0 or v.host_pages == 0, (rid, v)
        if v.residency is Residency.ACTIVE:
            assert v.host_pages == 0, (rid, v)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("host", [0, 3, 6])
def test_pages_are_conserved_over_random_sequences(seed: int, host: int) -> None:
    """Invariant 10: free + held == capacity on both tiers after every operation."""
    rng = random.Random(seed * 31 + host)
    p = pool(device=6, host=host, tpb=3)
    requests = [req(i) for i in range(1, 5)]
    ids = [r.request_id for r in requests]
    ops = [
        "prepare",
        "resize",
        "grow",
        "revert",
        "revert_context",
        "suspend",
        "free",
        "refuse",
        "fail_grow",
        "clear",
    ]
    weights = [4, 4, 4, 2, 2, 3, 2, 1, 1, 1]
    seen = set()
    for _ in range(150):
        op = rng.choices(ops, weights)[0]
        r = rng.choice(requests)
        before = p.view(r.request_id)
        if op == "prepare":
            ok = p.prepare_context(r)
            if ok:
                assert p.is_request_active(r.request_id)
        elif op == "resize":
            cap = rng.randrange(0, 16)
            ok = p.resize_context(r, cap)
            grown = max(before.capacity, r.context_current_position + cap)
            assert p.view(r.request_id).capacity == (grown if ok else before.capacity)
        elif op == "grow":
            ok = p.try_allocate_generation(r)
            after = p.view(r.request_id)
            if ok:
                assert after.capacity == before.capacity + 1
                assert after.residency is Residency.ACTIVE
            else:
                assert after.capacity == before.capacity
        elif op == "revert_context":
            p.revert_allocate_context(r)
            assert p.view(r.request_id).capacity <= before.capacity
        elif op == "revert":
            p.revert_allocate_generation(r)
            assert p.view(r.request_id).residency is before.residency
        elif op == "suspend":
            p.suspend_request(r)
            if before.residency is not Residency.NONE:
                assert p.view(r.request_id).residency is Residency.SUSPENDED
        elif op == "free":
            p.free_resources(r)
            assert p.view(r.request_id) == NO_CACHE
        elif op == "refuse":
            p.refuse_next_resumes()
        elif op == "fail_grow":
            p.fail_next_grows()
        else:
            p.clear_faults()
        seen.add((op, p.residency(r.request_id)))
        _check_world(p, ids)
    # The walk really visited the interesting states.
    assert {("suspend", Residency.SUSPENDED), ("grow", Residency.ACTIVE)} <= seen
    # Freeing everything gives every page back.
    for r in requests:
        p.free_resources(r)
    v = p.pool_view()
    assert (v.device_free, v.host_free, v.holders) == (6, host, ())
