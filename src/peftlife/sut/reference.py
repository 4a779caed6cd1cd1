"""The reference scheduler: one correct MAX_UTILIZATION pass with adapter ownership.

It walks ``active_requests`` once, generation requests first (phase 1) and
context requests second (phase 2), under token, request and PEFT-page budgets.
When KV runs short it climbs a ladder: suspend a victim, recompute-pause a
victim, suspend itself. Every KV move carries its PEFT move (docs/protocol.md):

* a started request that leaves the device releases its adapter *with pause*;
* an unstarted one owns nothing, so it releases nothing;
* a suspended request that resumes registers again, once, after its
  allocation succeeded;
* a request freed for recompute releases with pause only if it was ACTIVE
  (a suspended one is paused already).

Under the overlap executor the pass also leaves alone what is on the device:
it schedules no retiring request (``GENERATION_TO_COMPLETE``) and no member of
the in-flight batch it is told of, takes neither as a victim, and charges their
adapters to the PEFT budget before anything else, since both keep their adapter
in use through the next ``ensure_batch``. Told nothing (upstream's loop at
pipeline-parallel size 1), it remembers the batch it produced last and, while
that batch has not been read back, spares it the same way.

The mutants in ``peftlife.sut.mutants`` each override one of the small hook
methods below, so that every known defect is a few readable lines away from
the correct code.
"""

from __future__ import annotations

from collections.abc import Callable

from peftlife.world.kv import KVCacheManager
from peftlife.world.protocol import Environment, SchedulerOutput
from peftlife.world.request import LlmRequestState, Request


class _Budget:
    """Token, request and PEFT-page budgets of one pass.

    An adapter's pages are charged once per pass, the first time it is used.
    """

    def __init__(self, env: Environment) -> None:
        self.tokens_left = env.config.max_num_tokens
        self.requests_left = env.config.max_batch_size
        self._peft = env.peft_cache_manager
        self.peft_pages_left = 0 if self._peft is None else self._peft.max_device_pages
        self._charged: set[int] = set()

    def peft_pages_needed(self, req: Request) -> int | None:
        """Pages this request's adapter adds to the pass, or None if they do not fit."""
        task = req.lora_task_id
        if self._peft is None or task is None or task in self._charged:
            return 0
        pages = self._peft.determine_num_pages(req)
        return pages if pages <= self.peft_pages_left else None

    def claim_peft(self, req: Request) -> None:
        task = req.lora_task_id
        if self._peft is None or task is None or task in self._charged:
            return
        self._charged.add(task)
        self.peft_pages_left -= self._peft.determine_num_pages(req)

    def commit(self, req: Request, tokens: int) -> None:
        self.tokens_left -= tokens
        self.requests_left -= 1
        self.claim_peft(req)


class _Pass:
    """The mutable state of one scheduling pass over one list.

    ``inflight`` is what the executor told the pass is on the device (never
    scheduled); ``running`` adds what the scheduler knows is still there though it
    was not told (never a victim or a candidate, its adapter always charged).
    """

    def __init__(
        self,
        requests: list[Request],
        inflight: set[int],
        budget: _Budget,
        running: set[int] | None = None,
    ) -> None:
        self.requests = requests
        self.inflight = inflight
        self.running = inflight if running is None else inflight | running
        self.budget = budget
        # Requests at or after the frontier are not scheduled in this pass.
        self.frontier = len(requests)
        self.recompute_frontier = len(requests)
        self.context: list[Request] = []
        self.generation: list[Request] = []
        self.paused: list[Request] = []
        self.recompute_paused: list[Request] = []
        self.scheduled: set[int] = set()
        # The ids of the two paused lists, so that asking costs the same at any batch size.
        self.paused_ids: set[int] = set()
        self.recompute_paused_ids: set[int] = set()

    def is_recompute_paused(self, req: Request) -> bool:
        return req.request_id in self.recompute_paused_ids

    def last_after(
        self,
        index: int,
        stop: int,
        accept: Callable[[Request], bool],
        spare_in_flight: bool = True,
    ) -> int | None:
        """Index of the last request in ``(index, stop)`` that ``accept`` takes.

        A request on the device is never taken unless ``spare_in_flight`` is False.
        """
        for j in range(stop - 1, index, -1):
            req = self.requests[j]
            if (
                (not spare_in_flight or req.request_id not in self.running)
                and req.request_id not in self.scheduled
                and not self.is_recompute_paused(req)
                and accept(req)
            ):
                return j
        return None


def _holds_device_pages_in(pool: KVCacheManager) -> Callable[[Request], bool]:
    def holds(req: Request) -> bool:
        return req.is_started and pool.num_device_pages(req.request_id) > 0

    return holds


def _sort_key(req: Request) -> tuple[bool, int, int]:
    # Upstream sorts by adapter with "no adapter" first, then by request id.
    return (req.lora_task_id is not None, req.lora_task_id or 0, req.request_id)


class ReferenceScheduler:
    """A correct scheduler for the world of ``peftlife.world.engine``.

    >>> from peftlife.world.config import EngineConfig
    >>> from peftlife.world.engine import Engine
    >>> engine = Engine(EngineConfig(), ReferenceScheduler)
    >>> rid = engine.submit(prompt_len=4, max_new_tokens=1)
    >>> engine.step().step.output.context
    (1,)
    """

    # The drain may call a repeating world a livelock only for a stateless scheduler.
    # The memory of the last batch counts only under the overlap loop, where the last
    # batch is the one on the device, which the world's fingerprint holds: a repeating
    # world is met by a repeating pass.
    keeps_no_state_between_passes = True

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.kv = env.kv_cache_manager
        self.draft = env.draft_kv_cache_manager
        self.peft = env.peft_cache_manager
        self.config = env.config
        # The batch this scheduler produced last, which may still be on the device
        # (``still_running``): each member with its tokens then, and the members it
        # gives a token; the members the batch before gave one; and whether batches
        # have been seen to be read back after the next pass. Ids and counts, not a
        # pair per member: ints are no work for the garbage collector.
        self._last_batch: dict[int, int] = {}
        self._last_emits: set[int] = set()
        self._emitted_before: set[int] = set()
        self._overlapped = False

    # ---- the pass ----

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        requests = list(active_requests)
        told = set(inflight_request_ids)
        p = _Pass(requests, told, self.new_budget(), self.still_running(requests, told))
        self.pre_claim_peft(p)
        self._schedule_generation(p)
        self._schedule_context(p)
        p.context.sort(key=_sort_key)
        p.generation.sort(key=_sort_key)
        self.remember(p)
        return SchedulerOutput(
            context_requests=p.context,
            generation_requests=p.generation,
            paused_requests=p.paused,
            recompute_paused_requests=p.recompute_paused,
        )

    def still_running(self, requests: list[Request], told: set[int]) -> set[int]:
        """What is still on the device though the executor told nothing: the members
        of the batch this scheduler produced last, once it has seen that batches are
        read back after the next pass (upstream's PyExecutor at pipeline-parallel size
        1 runs its overlap loop and never fills ``inflight_req_ids``).

        The sign: a request the last batch gave its first token of that stretch (a
        last chunk, or a step after a pass without one) has not received it yet. The
        simple loop reads a batch back before the next pass, so there the sign never
        shows (unless a batch failed to run) and nothing is spared. Once seen, every
        member of the last batch is spared: never a victim or a recompute-pause
        candidate, its adapter charged first.
        """
        live = {r.request_id: r for r in requests}
        if not told and not self._overlapped:
            self._overlapped = any(r.is_generation_to_complete_state for r in requests) or any(
                rid in self._last_emits
                and rid not in self._emitted_before
                and rid in live
                and live[rid].num_generated == tokens
                for rid, tokens in self._last_batch.items()
            )
        if told or not self._overlapped:
            return set()
        return {rid for rid in self._last_batch if rid in live}

    def remember(self, p: _Pass) -> None:
        """Keep the batch this pass produced, each member with its tokens and whether
        the batch gives it one (a generation step, a last chunk)."""
        self._emitted_before = self._last_emits
        self._last_batch = {r.request_id: r.num_generated for r in (*p.context, *p.generation)}
        self._last_emits = {r.request_id for r in p.context if r.is_last_context_chunk}
        self._last_emits |= {r.request_id for r in p.generation}

    def new_budget(self) -> _Budget:
        """The pass's token, request and PEFT-page budgets, read from the configuration."""
        return _Budget(self.env)

    def pre_claim_peft(self, p: _Pass) -> None:
        """Charge every adapter still in use on the device, scheduled or not.

        Such an adapter cannot be evicted, so a budget that leaves it out lets
        ``ensure_batch`` fail. It is in use for an active owner (by ownership
        following residency, a request whose KV is ACTIVE), for a
        retiring request and for a member of the in-flight batch: the last two
        keep it until after the next ``ensure_batch``. A member of the in-flight
        batch is charged as such (``in_flight_pins``), whatever else it is.
        """
        for req in p.requests:
            on_device = req.request_id in p.running
            if self.retiring_pins(req) or (
                self.in_flight_pins(req) if on_device else self.owner_pins(req)
            ):
                p.budget.claim_peft(req)

    def owner_pins(self, req: Request) -> bool:
        # A first chunk with ACTIVE KV at the start of a pass (its batch was held before
        # it ran) owns nothing yet; charging its adapter reserves pages it will need.
        return req.is_schedulable and self.kv.is_request_active(req.request_id)

    def retiring_pins(self, req: Request) -> bool:
        return req.is_generation_to_complete_state

    def in_flight_pins(self, req: Request) -> bool:
        return True

    def _schedule_generation(self, p: _Pass) -> None:
        i = 0
        while i < p.frontier:
            req = p.requests[i]
            if (
                self.runs_as_generation(req)
                and req.request_id not in p.inflight
                and not p.is_recompute_paused(req)
            ):
                if p.budget.requests_left < 1 or p.budget.tokens_left < 1:
                    return
                # An adapter that does not fit is skipped, not a reason to stop:
                # stopping could starve the owner whose completion frees the budget.
                if p.budget.peft_pages_needed(req) is not None:
                    if not self._admit_generation(p, i, req):
                        return
                    p.generation.append(req)
                    p.scheduled.add(req.request_id)
                    p.budget.commit(req, 1)
            i += 1

    def runs_as_generation(self, req: Request) -> bool:
        """Upstream's state range: a retiring request's last token is on the device."""
        return req.is_generation_in_progress_state

    def _admit_generation(self, p: _Pass, i: int, req: Request) -> bool:
        """Allocate one token for ``req``, climbing the eviction ladder as needed."""
        resuming = self._is_suspended(req)
        self.before_generation_allocation(req, resuming)
        while not self._allocate_generation(req):
            victim = p.last_after(i, p.frontier, self.is_evictable, self.spares_in_flight_victims)
            if victim is not None:
                self.suspend(p, p.requests[victim])
                p.frontier = victim
                continue
            if self.config.enable_recompute_pause:
                victim = p.last_after(
                    i,
                    p.recompute_frontier,
                    self._is_recompute_candidate,
                    self.spares_in_flight_candidates,
                )
                if victim is not None:
                    self.recompute_pause(p, p.requests[victim])
                    p.recompute_frontier = victim
                    continue
            if self.kv.is_request_active(req.request_id) and req.request_id not in p.running:
                # A cache that is ACTIVE only because this allocation resumed it
                # belongs to a request that is paused already: it owns nothing. A
                # request whose last step is still on the device waits, ACTIVE.
                self.suspend(p, req, owned=not resuming)
            return False
        if resuming:
            self.after_resume(req)
        return True

    def _allocate_generation(self, req: Request) -> bool:
        if not self.kv.try_allocate_generation(req):
            return False
        if self.draft is not None and not self.draft.try_allocate_generation(req):
            self.kv.revert_allocate_generation(req)
            return False
        return True

    def is_evictable(self, req: Request) -> bool:
        # Not a retiring request: it is not started, and its last step is on the device.
        return req.is_started and self.kv.is_request_active(req.request_id)

    # Whether suspension victims, and recompute-pause candidates, spare the in-flight batch.
    spares_in_flight_victims = True
    spares_in_flight_candidates = True

    @staticmethod
    def _is_recompute_candidate(req: Request) -> bool:
        return req.is_started and req.state != LlmRequestState.GENERATION_TO_COMPLETE

    def _schedule_context(self, p: _Pass) -> None:
        for j in range(p.frontier):
            req = p.requests[j]
            if (
                not req.is_context_init_state
                or req.request_id in p.inflight
                or p.is_recompute_paused(req)
            ):
                continue
            if p.budget.requests_left < 1:
                return
            chunk = self._chunk_size(req, p.budget.tokens_left)
            if chunk == 0 or p.budget.peft_pages_needed(req) is None:
                continue
            if self._admit_context(p, j, req, chunk):
                req.context_chunk_size = chunk
                p.context.append(req)
                p.scheduled.add(req.request_id)
                p.budget.commit(req, chunk)

    def _chunk_size(self, req: Request, tokens_left: int) -> int:
        """The chunk to run now, or 0 when none fits the token budget."""
        remaining = req.context_remaining_length
        if remaining <= tokens_left:
            return remaining
        if not self.config.enable_chunked_context:
            return 0
        unit = self.config.chunk_unit_size
        return (tokens_left // unit) * unit

    def _admit_context(self, p: _Pass, j: int, req: Request, chunk: int) -> bool:
        """Make room for one context chunk in every pool; False means skip it."""
        first = req.is_first_context_chunk
        resuming = self._is_suspended(req)
        if not self._prepare_context(req):
            if first:
                self._free_kv(req)
            return False
        while True:
            # Upstream's argument: the chunk's tokens over the context cursor.
            reverted = False
            if not self.kv.resize_context(req, chunk):
                pool = self.kv
            elif self.draft is not None and not self.draft.resize_context(req, chunk):
                # Like upstream's, the revert may suspend the target cache: the
                # suspend helper below is told the request was ACTIVE.
                self.kv.revert_allocate_context(req)
                pool, reverted = self.draft, True
            else:
                return True
            if first:
                if reverted:
                    # Upstream suspends through the shared helper before freeing:
                    # the helper must see that this request owns nothing.
                    self.suspend(p, req, was_active=True)
                self._free_kv(req)
                return False
            # Preempt a victim when suspension cannot free pages, then retry (a
            # revert may have suspended the target: resume it first).
            if (
                not pool.can_offload(req.request_id)
                and self._preempt_for(p, j, pool)
                and (self.kv.is_request_active(req.request_id) or self._prepare_context(req))
            ):
                continue
            if req.request_id in p.running:
                # Its last chunk is still on the device: it waits, ACTIVE (undoing a
                # revert's suspension would be a resume; a revert left it suspended).
                if not self.kv.is_request_active(req.request_id):
                    self.suspend(p, req, owned=not resuming, was_active=True)
                return False
            self.suspend(p, req, owned=not resuming, was_active=True)
            return False

    def _preempt_for(self, p: _Pass, j: int, pool: KVCacheManager) -> bool:
        """Free the last started request after ``j`` holding device pages in ``pool``."""
        victim = p.last_after(j, len(p.requests), _holds_device_pages_in(pool))
        if victim is None:
            return False
        self.recompute_pause(p, p.requests[victim])
        return True

    def _prepare_context(self, req: Request) -> bool:
        """Create or resume the cache in every pool; on a refusal leave it suspended."""
        if not self.kv.prepare_context(req):
            return False
        if self.draft is not None and not self.draft.prepare_context(req):
            # The target resumed but the draft did not: keep the two in step.
            self._suspend_kv(req)
            return False
        return True

    # ---- the moves; each mutant overrides one of these ----

    def suspend(
        self, p: _Pass, req: Request, *, owned: bool = True, was_active: bool | None = None
    ) -> None:
        """The shared suspend helper: both pools, then the PEFT release.

        Only a started request that was ACTIVE owns its adapter, so only it
        releases (with pause); only started requests are listed in
        ``paused_requests``. ``owned=False`` says the cache is ACTIVE only
        because this pass resumed it without registering it; ``was_active``
        overrides the pool's residency when a revert has just suspended it.
        """
        if was_active is None:
            was_active = self.kv.is_request_active(req.request_id)
        releases = self.owns_adapter(req, owned and was_active)
        self._suspend_kv(req)
        if releases:
            self.release_on_suspend(req)
        if req.is_started and req.request_id not in p.paused_ids:
            p.paused.append(req)
            p.paused_ids.add(req.request_id)

    def owns_adapter(self, req: Request, was_active: bool) -> bool:
        """Whether a request leaving the device owns its adapter: started and was ACTIVE.

        A first chunk that never ran owns nothing, whatever its cache says.
        """
        return req.is_started and was_active

    def release_on_suspend(self, req: Request) -> None:
        self._mark_done(req, pause=True)

    def recompute_pause(self, p: _Pass, req: Request) -> None:
        """Free the request's KV in every pool; it will prefill again from the start."""
        was_active = self.kv.is_request_active(req.request_id)
        self._free_kv(req)
        if was_active:
            self.release_on_recompute_pause(req)
        if req.request_id in p.paused_ids:
            p.paused = [r for r in p.paused if r is not req]
            p.paused_ids.discard(req.request_id)
        p.recompute_paused.append(req)
        p.recompute_paused_ids.add(req.request_id)

    def release_on_recompute_pause(self, req: Request) -> None:
        # Pause, not terminate: the host copy must stay pinned for the comeback.
        self._mark_done(req, pause=True)

    def before_generation_allocation(self, req: Request, resuming: bool) -> None:
        """Nothing: registering before the allocation succeeds would be a defect."""

    def after_resume(self, req: Request) -> None:
        """A suspended request resumed and its allocation succeeded: own the adapter again."""
        if self.peft is not None and req.lora_task_id is not None:
            self.peft.add_request_peft(req)

    # ---- plumbing ----

    def _is_suspended(self, req: Request) -> bool:
        return self.kv.has_cache(req.request_id) and not self.kv.is_request_active(req.request_id)

    def _suspend_kv(self, req: Request) -> None:
        self.kv.suspend_request(req)
        if self.draft is not None:
            self.draft.suspend_request(req)

    def _free_kv(self, req: Request) -> None:
        self.kv.free_resources(req)
        if self.draft is not None:
            self.draft.free_resources(req)

    def _mark_done(self, req: Request, *, pause: bool) -> None:
        if self.peft is not None and req.lora_task_id is not None:
            self.peft.mark_request_done(req, pause=pause)
