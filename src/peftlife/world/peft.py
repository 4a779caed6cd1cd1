"""The PEFT manager: adapter ownership sets and the device and host LoRA caches.

This follows the C++ ``PeftCacheManager`` rule for rule, because the bugs
peftlife hunts live in the gap between what a scheduler assumes and what
those rules do. The two that matter most:

* ownership is two *sets* per adapter (``active`` and ``paused``), not counters;
* a release with ``pause`` inserts the request into ``paused`` even when it
  was never active. That is how a phantom owner arises.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from peftlife.world.immutable import SharedMemo, copied_by_field, immutable
from peftlife.world.ledger import Args, CallLedger, Facts, PeftMethod, Result
from peftlife.world.request import Request


class LoraCacheFullException(Exception):
    """A LoRA cache cannot free enough pages: no done entry is left to evict."""


class PeftTaskNotCachedException(Exception):
    """The adapter is not in the host cache and the request carries neither weights
    nor a LoRA path to load them from."""


@immutable
@attrs.frozen
class CacheEntryView:
    pages: int
    in_use: bool


@copied_by_field
@attrs.define(slots=True)
class _Entry:
    pages: int
    in_use: bool
    # Order in which entries became done; eviction takes the smallest first.
    done_seq: int = 0


@copied_by_field
class LoraCache:
    """Adapters held in pages; only done entries are evicted, oldest done first.

    >>> cache = LoraCache("device", 2)
    >>> cache.claim(1, 2); _ = cache.mark_done(1); cache.claim(2, 2)
    >>> sorted(cache.entries())
    [(2, CacheEntryView(pages=2, in_use=True))]
    """

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = capacity
        self.num_free_pages = capacity
        self._entries: dict[int, _Entry] = {}
        self._done_counter = 0
        self.evictions: list[int] = []
        # How many times an entry changed (claimed, marked done, evicted): what was
        # shown of the entries at one count holds until the next.
        self.changes = 0
        self._shown_at = -1
        self._shown: tuple[tuple[tuple[int, CacheEntryView], ...], tuple[int, ...]] = ((), ())
        # The two views an entry of some size can have, shared (by a copy of the cache
        # too): a snapshot views them all.
        self._views: SharedMemo[tuple[int, bool], CacheEntryView] = SharedMemo()

    def __contains__(self, task_id: int) -> bool:
        return task_id in self._entries

    def is_in_use(self, task_id: int) -> bool:
        entry = self._entries.get(task_id)
        return entry is not None and entry.in_use

    def entry(self, task_id: int) -> CacheEntryView | None:
        e = self._entries.get(task_id)
        return None if e is None else self._view(e)

    def entries(self) -> tuple[tuple[int, CacheEntryView], ...]:
        """Every entry by task id."""
        return self._entries_and_order()[0]

    @property
    def shown_sizes(self) -> tuple[str, int, int]:
        """What a view shows of the cache beside its entries, all public."""
        return self.name, self.capacity, self.num_free_pages

    def task_ids(self) -> Iterable[int]:
        """The adapters with an entry, in no order."""
        return self._entries.keys()

    def _view(self, e: _Entry) -> CacheEntryView:
        key = (e.pages, e.in_use)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = CacheEntryView(e.pages, e.in_use)
        return view

    def eviction_order(self) -> tuple[int, ...]:
        """The done entries, the next to be evicted first."""
        return self._entries_and_order()[1]

    def _entries_and_order(
        self,
    ) -> tuple[tuple[tuple[int, CacheEntryView], ...], tuple[int, ...]]:
        # Made again only after a change: a snapshot shows both after every iteration.
        if self._shown_at != self.changes:
            entries = tuple((t, self._view(e)) for t, e in sorted(self._entries.items()))
            done = sorted((e.done_seq, t) for t, e in self._entries.items() if not e.in_use)
            self._shown = entries, tuple(t for _, t in done)
            self._shown_at = self.changes
        return self._shown

    def claim(self, task_id: int, pages: int) -> None:
        """Put ``task_id`` in the cache (evicting done entries if needed) and mark it in use.

        Entries evicted before a failure stay evicted, as upstream.
        """
        entry = self._entries.get(task_id)
        if entry is not None:
            # Claiming an entry in use changes nothing shown: every batch claims its adapters.
            if not entry.in_use:
                self.changes += 1
                entry.in_use = True
            return
        self.changes += 1
        while self.num_free_pages < pages:
            done = [(e.done_seq, t) for t, e in self._entries.items() if not e.in_use]
            if not done:
                raise LoraCacheFullException(
                    f"{self.name} LoRA cache: no done tasks to evict for task {task_id} "
                    f"({pages} pages needed, {self.num_free_pages} free)"
                )
            _, victim = min(done)
            self.num_free_pages += self._entries.pop(victim).pages
            self.evictions.append(victim)
        self.num_free_pages -= pages
        self._entries[task_id] = _Entry(pages=pages, in_use=True)

    def mark_done(self, task_id: int) -> bool:
        """Make an in-use entry evictable; True if it was in use."""
        entry = self._entries.get(task_id)
        if entry is None or not entry.in_use:
            return False
        self.changes += 1
        entry.in_use = False
        self._done_counter += 1
        entry.done_seq = self._done_counter
        return True


@copied_by_field
class PeftCacheManager:
    """The C++ ``PeftCacheManager`` as a scheduler and the executor see it.

    ``adapter_pages`` maps each adapter task id to its size in pages.

    >>> from peftlife.world.request import Request
    >>> peft = PeftCacheManager(device_pages=4, host_pages=8, adapter_pages={7: 2})
    >>> r = Request(1, 7, True, prompt_len=4, max_new_tokens=1)
    >>> peft.add_request_peft(r); peft.active_requests(7)
    frozenset({1})
    >>> peft.mark_request_done(r, pause=True); peft.paused_requests(7)
    frozenset({1})
    """

    def __init__(
        self,
        *,
        device_pages: int,
        host_pages: int,
        adapter_pages: Mapping[int, int],
        ledger: CallLedger | None = None,
    ) -> None:
        self.device_cache = LoraCache("device", device_pages)
        self.host_cache = LoraCache("host", host_pages)
        self.adapter_pages = dict(adapter_pages)
        self.ledger = ledger if ledger is not None else CallLedger()
        self._active: dict[int, set[int]] = {}
        self._paused: dict[int, set[int]] = {}
        self.ever_registered: set[int] = set()
        # How many times an ownership set changed (with the two caches' own counts,
        # what a view of the adapters depends on).
        self._ownership_changes = 0

    # ---- queries ----

    @property
    def max_device_pages(self) -> int:
        return self.device_cache.capacity

    def determine_num_pages(self, req: Request) -> int:
        if req.lora_task_id is None:
            return 0
        return self.adapter_pages[req.lora_task_id]

    def active_requests(self, task_id: int) -> frozenset[int]:
        return frozenset(self._active.get(task_id, ()))

    def paused_requests(self, task_id: int) -> frozenset[int]:
        return frozenset(self._paused.get(task_id, ()))

    @property
    def changes(self) -> tuple[int, int, int]:
        """Counts of the changes to ownership and to the two caches: the adapters'
        views made at one value hold as long as it stays."""
        return self._ownership_changes, self.device_cache.changes, self.host_cache.changes

    def task_ids(self) -> list[int]:
        """Every adapter with an owner or a cache entry, sorted."""
        known = self._active.keys() | self._paused.keys()
        return sorted(known.union(self.device_cache.task_ids(), self.host_cache.task_ids()))

    # ---- the C++ ownership rule ----

    def update_task_state(
        self, task_id: int, request_id: int, *, terminate: bool, pause: bool = False
    ) -> tuple[bool, bool]:
        """``updateTaskState``: register, or release with or without pause.

        Returns whether the device and the host copy were released (marked done).
        """
        active = self._active.setdefault(task_id, set())
        paused = self._paused.setdefault(task_id, set())
        held_before = request_id in active, request_id in paused
        released = (False, False)
        if not terminate:
            active.add(request_id)
            paused.discard(request_id)
            self.ever_registered.add(request_id)
        else:
            active.discard(request_id)
            if pause:
                # Inserted even if it was never active: the phantom case.
                paused.add(request_id)
            else:
                paused.discard(request_id)
            if not active:
                released = (
                    self.device_cache.mark_done(task_id),
                    not paused and self.host_cache.mark_done(task_id),
                )
        # Counted only when ownership moved: a registration of an owner changes nothing.
        if (request_id in active, request_id in paused) != held_before:
            self._ownership_changes += 1
        # Empty sets are dropped so that snapshots compare equal whatever the history.
        if not active:
            del self._active[task_id]
        if not paused:
            del self._paused[task_id]
        return released

    # ---- public calls ----

    def add_request_peft(self, req: Request, try_gpu_cache: bool = True) -> None:
        """Register the request's adapter and pin it in the host cache.

        ``try_gpu_cache`` is accepted and ignored, as upstream.
        """
        task_id = req.lora_task_id
        if task_id is None:
            self._record("add_request_peft", req, "ok", Facts())
            return
        uncached = task_id not in self.host_cache and not req.lora_weights
        facts = Facts(
            already_active=req.request_id in self._active.get(task_id, ()),
            was_paused=req.request_id in self._paused.get(task_id, ()),
            registered_before=req.request_id in self.ever_registered,
            started=req.is_started,
            # Upstream's PeftCacheManager.add_request_peft (resource_manager.py) loads
            # the weights from py_lora_path when the task is not cached.
            reloaded=True if uncached and req.lora_path else None,
        )
        if uncached and not req.lora_path:
            self._record("add_request_peft", req, "not_cached", facts)
            raise PeftTaskNotCachedException(
                f"LoRA task {task_id} not found in cache; request {req.request_id} "
                "carries no weights and no LoRA path to load them from"
            )
        self.update_task_state(task_id, req.request_id, terminate=False)
        try:
            self.host_cache.claim(task_id, self.adapter_pages[task_id])
        except LoraCacheFullException:
            # Undone the C++ way: a terminate, so the request leaves both sets.
            self.update_task_state(task_id, req.request_id, terminate=True, pause=False)
            self._record("add_request_peft", req, "host_full", facts)
            raise
        req.lora_weights = False
        self._record("add_request_peft", req, "ok", facts)

    def mark_request_done(self, req: Request, pause: bool = False) -> None:
        """Release the request's adapter, keeping it pinned on host if ``pause``."""
        task_id = req.lora_task_id
        facts = Facts()
        if task_id is not None:
            was_active = req.request_id in self._active.get(task_id, ())
            was_paused = req.request_id in self._paused.get(task_id, ())
            device, host = self.update_task_state(
                task_id, req.request_id, terminate=True, pause=pause
            )
            facts = Facts(
                was_active=was_active,
                was_paused=was_paused,
                released_device=device,
                released_host=host,
            )
        self._record("mark_request_done", req, None, facts, pause)

    def ensure_batch(
        self, context_requests: Iterable[Request], generation_requests: Iterable[Request]
    ) -> None:
        """Copy every adapter of the batch to the device cache and mark it in use there."""
        task_ids: list[int] = []
        for req in (*context_requests, *generation_requests):
            if req.lora_task_id is not None and req.lora_task_id not in task_ids:
                task_ids.append(req.lora_task_id)
        evicted_before = len(self.device_cache.evictions)
        try:
            for task_id in task_ids:
                if task_id not in self.host_cache:
                    raise PeftTaskNotCachedException(
                        f"LoRA task {task_id} not found in the host cache for ensure_batch"
                    )
                self.device_cache.claim(task_id, self.adapter_pages[task_id])
        except (LoraCacheFullException, PeftTaskNotCachedException) as err:
            self._record_batch(type(err).__name__, task_ids, evicted_before)
            raise
        self._record_batch("ok", task_ids, evicted_before)

    def _record_batch(self, result: str, task_ids: list[int], evicted_before: int) -> None:
        evicted = tuple(self.device_cache.evictions[evicted_before:])
        self.ledger.record(
            "peft",
            "ensure_batch",
            None,
            args=Args(tasks=tuple(task_ids)),
            result=result,
            facts=Facts(evicted=evicted),
        )

    def _record(
        self,
        method: PeftMethod,
        req: Request,
        result: Result,
        facts: Facts,
        pause: bool | None = None,
    ) -> None:
        # Every call about a request names its adapter.
        args = Args(task_id=req.lora_task_id, pause=pause)
        self.ledger.record("peft", method, req.request_id, args=args, result=result, facts=facts)
