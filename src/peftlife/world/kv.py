"""A KV pool: device pages, an optional lower tier, and per-request residency.

This models upstream's ``KVCacheManagerV2`` at the level a scheduler sees it:
the upstream method names and their results, page accounting per tier, and
the two one-shot faults the nemesis aims at a pool. Every method takes the
request (as upstream does) and records itself in the shared call ledger.

Free page counters are kept by hand rather than derived from the caches, so
that page conservation (invariant 10) is a real check on this code.
"""

from __future__ import annotations

import types
from collections.abc import Mapping

import attrs

from peftlife.world.immutable import SharedMemo, copied_by_field, immutable
from peftlife.world.ledger import CallLedger, Component, Facts, Fault, KvMethod, residency_facts
from peftlife.world.request import Request
from peftlife.world.residency import Residency


@copied_by_field
@attrs.define(slots=True)
class _Cache:
    active: bool = True
    capacity: int = 0
    device_pages: int = 0
    host_pages: int = 0


@immutable
@attrs.frozen
class CacheView:
    """One request's cache in one pool, as a snapshot sees it."""

    residency: Residency = Residency.NONE
    capacity: int = 0
    device_pages: int = 0
    host_pages: int = 0


NO_CACHE = CacheView()
# A pool keeps at most this many views for reuse: a long run of growing caches would
# otherwise keep one for every capacity it ever reached.
_MAX_VIEWS = 4096


@immutable
@attrs.frozen
class PoolView:
    """One pool's page accounting, as a snapshot sees it."""

    name: str
    device_capacity: int
    device_free: int
    host_capacity: int
    host_free: int
    # (request id, device pages, host pages), by request id.
    holders: tuple[tuple[int, int, int], ...]


@copied_by_field
class KVCacheManager:
    """One KV pool. ``host_pages=0`` means no lower tier (``can_evict`` false).

    >>> from peftlife.world.request import Request
    >>> pool = KVCacheManager(device_pages=4, tokens_per_block=4)
    >>> r = Request(1, None, False, prompt_len=6, max_new_tokens=1)
    >>> pool.prepare_context(r), pool.resize_context(r, 6), pool.num_free_device_pages
    (True, True, 2)
    """

    def __init__(
        self,
        *,
        device_pages: int,
        tokens_per_block: int,
        host_pages: int = 0,
        ledger: CallLedger | None = None,
        name: Component = "target",
    ) -> None:
        if device_pages < 1 or tokens_per_block < 1 or host_pages < 0:
            raise ValueError(
                "a pool needs device_pages >= 1, tokens_per_block >= 1, host_pages >= 0"
            )
        self.name: Component = name
        self.tokens_per_block = tokens_per_block
        self.device_capacity = device_pages
        self.host_capacity = host_pages
        self.num_free_device_pages = device_pages
        self.num_free_host_pages = host_pages
        self.ledger = ledger if ledger is not None else CallLedger()
        self._caches: dict[int, _Cache] = {}
        # Capacity before this iteration's context growth, for revert_allocate_context
        # (upstream keeps it on the request as ``py_ctx_pre_resize_cap``).
        self._pre_resize_cap: dict[int, int] = {}
        # Draft pairing: a draft pool admits context chunks through the joint calls.
        self.enable_joint_kv_cache_reuse = False
        self._refuse_resumes = 0
        self._fail_grows = 0
        # The residency of the request the current call is about, as the call began.
        self._before = Residency.NONE
        # Each view this pool has shown, by what it shows: a snapshot views every live
        # request's cache, most of them unchanged since the last, and a view is frozen
        # (so a copy of the pool shares them).
        self._views: SharedMemo[tuple[bool, int, int, int], CacheView] = SharedMemo()
        # How many calls this pool recorded: every upstream method records itself, after
        # whatever it changed, so its caches shown at one count hold until the next.
        self.changes = 0
        self._pool_view_at: tuple[object, ...] | None = None
        self._pool_view = PoolView(self.name, 0, 0, 0, 0, ())

    # ---- queries ----

    @property
    def can_evict(self) -> bool:
        """Whether suspension can move pages to a tier below the device."""
        return self.host_capacity > 0

    @property
    def has_cache_tier_below_gpu(self) -> bool:
        """Upstream's name for ``can_evict``: preemption is left to pools without one."""
        return self.can_evict

    @property
    def enable_block_reuse(self) -> bool:
        """Prefix reuse across requests is not modelled."""
        return False

    @property
    def kv_cache_map(self) -> Mapping[int, object]:
        """Request id to cache, read-only; upstream tests membership in it."""
        return types.MappingProxyType(self._caches)

    def has_active_cache(self, req: Request) -> bool:
        return self.is_request_active(req.request_id)

    def pages_for(self, capacity: int) -> int:
        return -(-capacity // self.tokens_per_block)

    def residency(self, request_id: int) -> Residency:
        cache = self._caches.get(request_id)
        if cache is None:
            return Residency.NONE
        return Residency.ACTIVE if cache.active else Residency.SUSPENDED

    def is_request_active(self, request_id: int) -> bool:
        # ``residency(request_id) is ACTIVE``, unfolded: schedulers ask it of every request.
        cache = self._caches.get(request_id)
        return cache is not None and cache.active

    def has_cache(self, request_id: int) -> bool:
        return request_id in self._caches

    def num_device_pages(self, request_id: int) -> int:
        cache = self._caches.get(request_id)
        return cache.device_pages if cache is not None else 0

    def can_offload(self, request_id: int) -> bool:
        """Would suspending this request free its device pages? (all or nothing)"""
        cache = self._caches.get(request_id)
        return (
            self.can_evict and cache is not None and cache.device_pages <= self.num_free_host_pages
        )

    def view(self, request_id: int) -> CacheView:
        cache = self._caches.get(request_id)
        if cache is None:
            return NO_CACHE
        key = (cache.active, cache.capacity, cache.device_pages, cache.host_pages)
        view = self._views.get(key)
        if view is None:
            if len(self._views) >= _MAX_VIEWS:
                self._views.clear()
            view = self._views[key] = CacheView(
                residency=Residency.ACTIVE if cache.active else Residency.SUSPENDED,
                capacity=cache.capacity,
                device_pages=cache.device_pages,
                host_pages=cache.host_pages,
            )
        return view

    def pool_view(self) -> PoolView:
        # Made again only when a call was recorded or a public field moved: those are read
        # as they are, since a scheduler can write them.
        shown = (
            self.changes,
            self.name,
            self.device_capacity,
            self.num_free_device_pages,
            self.host_capacity,
            self.num_free_host_pages,
        )
        if self._pool_view_at != shown:
            self._pool_view = PoolView(
                name=self.name,
                device_capacity=self.device_capacity,
                device_free=self.num_free_device_pages,
                host_capacity=self.host_capacity,
                host_free=self.num_free_host_pages,
                holders=tuple(
                    (rid, c.device_pages, c.host_pages) for rid, c in sorted(self._caches.items())
                ),
            )
            self._pool_view_at = shown
        return self._pool_view

    # ---- the nemesis ----

    def refuse_next_resumes(self, count: int = 1) -> None:
        """Make the next ``count`` resumes in this pool fail."""
        self._refuse_resumes += count

    def fail_next_grows(self, count: int = 1) -> None:
        """Make the next ``count`` grows in this pool fail, even ones needing no page."""
        self._fail_grows += count

    def clear_faults(self) -> None:
        self._refuse_resumes = 0
        self._fail_grows = 0

    @property
    def pending_faults(self) -> tuple[int, int]:
        """(resumes to refuse, grows to fail)."""
        return self._refuse_resumes, self._fail_grows

    # ---- upstream methods ----

    def prepare_context(self, req: Request) -> bool:
        """Create the cache (no pages yet) or resume a suspended one."""
        self._before = self.residency(req.request_id)
        cache = self._caches.get(req.request_id)
        if cache is None:
            self._caches[req.request_id] = _Cache()
            return self._record(
                "prepare_context",
                req,
                True,
                Facts(before=self._before, after=self.residency(req.request_id), created=True),
            )
        fault = self._resume(cache)
        return self._record(
            "prepare_context",
            req,
            fault is None,
            residency_facts(self._before, self.residency(req.request_id), fault),
        )

    def resize_context(self, req: Request, num_tokens: int) -> bool:
        """Grow the cache to cover the next ``num_tokens`` context tokens.

        As upstream's ``KVCacheManagerV2``: the target is the context cursor plus
        ``num_tokens``, the cache never shrinks here, a failed grow of a first
        chunk suspends its cache, and a grow is remembered so that
        ``revert_allocate_context`` can undo it.
        """
        return self._grow_context("resize_context", req, num_tokens)

    def try_allocate_draft_context(self, req: Request, num_tokens: int) -> bool:
        """The draft pool's half of a joint context admission: grow like ``resize_context``."""
        return self._grow_context("try_allocate_draft_context", req, num_tokens)

    def revert_allocate_context(self, req: Request) -> bool:
        """Undo this iteration's context growth; the cache is then suspended.

        False when the cache had to be dropped instead (its computed context
        no longer fits the old capacity), as upstream.
        """
        self._before = self.residency(req.request_id)
        pre_cap = self._pre_resize_cap.pop(req.request_id, None)
        cache = self._caches.get(req.request_id)
        kept = True
        if pre_cap is not None and cache is not None and cache.active and pre_cap < cache.capacity:
            if req.context_current_position > pre_cap:
                self._drop(req)
                kept = False
            else:
                self._resize(cache, pre_cap)
                if pre_cap > 0:
                    self._suspend(cache)
        return self._record(
            "revert_allocate_context",
            req,
            kept,
            Facts(before=self._before, after=self.residency(req.request_id), capacity=pre_cap),
        )

    def probe_context_reuse(self, req: Request) -> int:
        """Tokens of the prompt found in the reuse tree: none, prefix reuse is not modelled."""
        return 0

    def prepare_context_cache(self, req: Request, reuse_limit: int | None) -> int | None:
        """The joint pairing's ``prepare_context``: the reused depth (0), or None if refused."""
        prepared = self.prepare_context(req)
        return 0 if prepared else None

    def try_allocate_generation(self, req: Request) -> bool:
        """Resume if suspended, then grow by one token.

        A failed grow leaves a just-resumed cache ACTIVE, as upstream does.
        """
        self._before = self.residency(req.request_id)
        cache = self._caches.get(req.request_id)
        if cache is None:
            return self._record(
                "try_allocate_generation",
                req,
                False,
                residency_facts(self._before, self.residency(req.request_id)),
            )
        fault = self._resume(cache) or self._resize(cache, cache.capacity + 1)
        return self._record(
            "try_allocate_generation",
            req,
            fault is None,
            residency_facts(self._before, self.residency(req.request_id), fault),
        )

    def revert_allocate_generation(self, req: Request) -> None:
        """Undo the last one-token grow; the cache stays ACTIVE."""
        self._before = self.residency(req.request_id)
        cache = self._caches.get(req.request_id)
        if cache is not None and cache.active and cache.capacity > 0:
            self._resize(cache, cache.capacity - 1)
        self._record(
            "revert_allocate_generation",
            req,
            None,
            residency_facts(self._before, self.residency(req.request_id)),
        )

    def suspend_request(self, req: Request) -> None:
        """ACTIVE to SUSPENDED; pages move down only if the whole cache fits there."""
        self._before = self.residency(req.request_id)
        cache = self._caches.get(req.request_id)
        moved = cache is not None and cache.active and self._suspend(cache)
        self._record(
            "suspend_request",
            req,
            None,
            Facts(before=self._before, after=self.residency(req.request_id), moved_to_host=moved),
        )

    def free_resources(self, req: Request) -> None:
        """Any state to NONE, pages freed on every tier."""
        self._drop(req, "free_resources")

    def preempt_request(self, req: Request) -> None:
        """Give up a started request's cache so another can allocate (a recompute follows).

        Upstream keeps this for pools that suspension cannot drain; here it frees
        the cache on every tier, as ``free_resources`` does.
        """
        self._drop(req, "preempt_request")

    # ---- internals ----

    def _drop(self, req: Request, method: KvMethod = "free_resources") -> None:
        self._before = self.residency(req.request_id)
        cache = self._caches.pop(req.request_id, None)
        self._pre_resize_cap.pop(req.request_id, None)
        if cache is not None:
            self.num_free_device_pages += cache.device_pages
            self.num_free_host_pages += cache.host_pages
        self._record(
            method,
            req,
            None,
            Facts(
                before=self._before,
                after=self.residency(req.request_id),
                had_cache=cache is not None,
                was_active=cache is not None and cache.active,
                started=req.is_started,
            ),
        )

    def _grow_context(self, method: KvMethod, req: Request, num_tokens: int) -> bool:
        self._before = self.residency(req.request_id)
        cache = self._caches.get(req.request_id)
        if cache is None or not cache.active:
            return self._record(
                method,
                req,
                False,
                Facts(
                    before=self._before, after=self.residency(req.request_id), num_tokens=num_tokens
                ),
            )
        before = cache.capacity
        capacity = max(before, req.context_current_position + num_tokens)
        fault = self._resize(cache, capacity)
        if fault is None:
            if capacity > before:
                self._pre_resize_cap[req.request_id] = before
            else:
                self._pre_resize_cap.pop(req.request_id, None)
        elif req.is_first_context_chunk:
            self._suspend(cache)
        facts = Facts(
            before=self._before,
            after=self.residency(req.request_id),
            num_tokens=num_tokens,
            capacity=capacity,
            fault=fault,
        )
        return self._record(method, req, fault is None, facts)

    def _suspend(self, cache: _Cache) -> bool:
        """Make an ACTIVE cache inactive; True if its pages moved to the lower tier."""
        cache.active = False
        if not (self.can_evict and cache.device_pages <= self.num_free_host_pages):
            return False
        self.num_free_host_pages -= cache.device_pages
        self.num_free_device_pages += cache.device_pages
        cache.host_pages, cache.device_pages = cache.device_pages, 0
        return True

    def _resume(self, cache: _Cache) -> Fault | None:
        """Bring a suspended cache back on the device; the fault that stopped it, if any."""
        if cache.active:
            return None
        if self._refuse_resumes:
            self._refuse_resumes -= 1
            return "refused_resume"
        if cache.host_pages > self.num_free_device_pages:
            return "no_device_room"
        self.num_free_device_pages -= cache.host_pages
        self.num_free_host_pages += cache.host_pages
        cache.device_pages, cache.host_pages = cache.device_pages + cache.host_pages, 0
        cache.active = True
        return None

    def _resize(self, cache: _Cache, capacity: int) -> Fault | None:
        if capacity > cache.capacity and self._fail_grows:
            self._fail_grows -= 1
            return "failed_grow"
        extra = self.pages_for(capacity) - cache.device_pages
        if extra > self.num_free_device_pages:
            return "no_device_room"
        self.num_free_device_pages -= extra
        cache.device_pages += extra
        cache.capacity = capacity
        return None

    def _record(self, method: KvMethod, req: Request, result: bool | None, facts: Facts) -> bool:
        # Every call's facts hold the request's residency before and after it (invariant 4
        # reads a resume from them), built with the rest at the call: a record made once.
        self.changes += 1
        self.ledger.record(self.name, method, req.request_id, result=result, facts=facts)
        return bool(result)
