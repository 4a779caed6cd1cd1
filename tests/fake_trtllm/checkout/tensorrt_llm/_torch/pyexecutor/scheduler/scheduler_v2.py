"""Fake of TensorRT-LLM's scheduler_v2.py, written for peftlife's tests.

Same module path and imports as upstream's file, and the same manager surface
(request attributes, KVCacheManagerV2 and PEFT manager calls), in far less
code. One MAX_UTILIZATION pass: generation requests first (evict a victim,
recompute-pause a victim, evict itself), then context requests (preempt a
victim when a started chunk cannot grow).

``KVCacheV2Scheduler`` has the defect of TensorRT-LLM issue #18407: a
suspended request keeps its adapter active. ``CorrectKVCacheV2Scheduler``
releases it with pause, as the lifecycle requires, and (under the overlap
executor) takes no retiring request as a victim.
"""

from tensorrt_llm.llmapi.llm_args import CapacitySchedulerPolicy, ContextChunkingPolicy
from tensorrt_llm.logger import logger

from ..llm_request import (
    LlmRequest,
    LlmRequestState,
    get_draft_token_length,
    rewind_context_after_cache_drop,
)
from .scheduler import (
    RequestList,
    RequestScheduler,
    SchedulerOutput,
    _get_lora_task_id,
    drop_decoder_context_requests_waiting_for_encoder_output,
)


class _Pass:
    """Budgets, frontiers and output lists of one scheduling pass."""

    def __init__(self, requests, inflight, max_tokens, max_requests, peft):
        self.requests = requests
        self.inflight = inflight
        self.tokens_left = max_tokens
        self.requests_left = max_requests
        self.peft = peft
        self.peft_pages_left = 0 if peft is None else peft.max_device_pages
        self.charged = set()
        self.frontier = len(requests)
        self.recompute_frontier = len(requests)
        self.context: RequestList = []
        self.generation: RequestList = []
        self.paused: RequestList = []
        self.recompute_paused: RequestList = []
        self.taken = set()  # scheduled, recompute-paused or preempted this pass

    def peft_pages_needed(self, req: LlmRequest):
        task = getattr(req, "lora_task_id", None)
        if self.peft is None or task is None or task in self.charged:
            return 0
        pages = self.peft.determine_num_pages(req)
        return pages if pages <= self.peft_pages_left else None

    def claim(self, req: LlmRequest):
        task = getattr(req, "lora_task_id", None)
        if self.peft is not None and task is not None and task not in self.charged:
            self.charged.add(task)
            self.peft_pages_left -= self.peft.determine_num_pages(req)

    def commit(self, req: LlmRequest, tokens: int, into: RequestList):
        self.tokens_left -= tokens
        self.requests_left -= 1
        self.claim(req)
        self.taken.add(req.py_request_id)
        into.append(req)

    def last_after(self, index, stop, accept):
        for j in range(stop - 1, index, -1):
            req = self.requests[j]
            if (
                req.request_id not in self.inflight
                and req.py_request_id not in self.taken
                and accept(req)
            ):
                return j
        return None


def _is_started(req: LlmRequest) -> bool:
    return (
        req.is_context_init_state and not req.is_first_context_chunk
    ) or req.is_generation_in_progress_state


class KVCacheV2Scheduler(RequestScheduler):
    def __init__(
        self,
        max_batch_size,
        max_num_tokens,
        kv_cache_manager,
        scheduler_policy,
        ctx_chunk_config=None,
        peft_cache_manager=None,
        draft_kv_cache_manager=None,
        enable_prefix_aware_scheduling=True,
        enable_recompute_pause=True,
    ):
        from ..kv_cache.kv_cache_manager_v2 import BlockReusePolicy, KVCacheManagerV2

        assert isinstance(kv_cache_manager, KVCacheManagerV2)
        assert scheduler_policy == CapacitySchedulerPolicy.MAX_UTILIZATION
        assert not kv_cache_manager._has_cp_helix
        assert kv_cache_manager.kv_connector_manager is None
        self.reuse = kv_cache_manager.enable_block_reuse and (
            kv_cache_manager.block_reuse_policy == BlockReusePolicy.ALL_REUSABLE
        )
        self.kv = kv_cache_manager
        self.draft = draft_kv_cache_manager
        self.joint = kv_cache_manager.enable_joint_kv_cache_reuse
        self.peft = peft_cache_manager
        self.max_batch_size = max_batch_size
        self.max_num_tokens = max_num_tokens
        self.chunking = ctx_chunk_config is not None
        self.policy = ctx_chunk_config[0] if self.chunking else None
        self.unit = ctx_chunk_config[1] if self.chunking else 0
        self.recompute_pause = enable_recompute_pause
        self.tokens_per_block = kv_cache_manager.tokens_per_block

    # ---- the pass ----

    def schedule_request(self, active_requests, inflight_request_ids):
        requests = drop_decoder_context_requests_waiting_for_encoder_output(active_requests)
        p = _Pass(
            list(requests),
            set(inflight_request_ids),
            self.max_num_tokens,
            self.max_batch_size,
            self.peft,
        )
        for req in p.requests:
            # Retiring (the overlap executor): its adapter is freed only after this
            # iteration's prepare_resources, as upstream's pre-claim says.
            if req.state_value == LlmRequestState.GENERATION_TO_COMPLETE.value:
                p.claim(req)
            elif _is_started(req) and self.kv.is_request_active(req.py_request_id):
                p.claim(req)  # its adapter is in use on the device, scheduled or not
        self._generation_phase(p)
        self._context_phase(p)
        p.context.sort(key=lambda r: (r.is_last_context_chunk, _get_lora_task_id(r)))
        p.generation.sort(key=_get_lora_task_id)
        return SchedulerOutput(
            encoder_requests=[],
            context_requests=p.context,
            generation_requests=p.generation,
            paused_requests=p.paused,
            recompute_paused_requests=p.recompute_paused,
            fitting_disagg_gen_init_requests=[],
            num_fitting_requests=len(p.context) + len(p.generation),
        )

    def _generation_phase(self, p):
        i = 0
        while i < p.frontier:
            req = p.requests[i]
            i += 1
            if (
                not req.is_generation_in_progress_state
                or req.is_generation_to_complete_state
                or req.request_id in p.inflight
                or req.py_request_id in p.taken
            ):
                continue
            tokens = req.get_beam_width_by_iter(for_next_iteration=False)
            tokens += get_draft_token_length(req)
            if p.requests_left < 1 or p.tokens_left < tokens:
                return
            if p.peft_pages_needed(req) is None:
                continue  # skipped, not a stop: the owner of the budget must run
            if not self._admit_generation(p, i - 1, req):
                return
            p.commit(req, tokens, p.generation)

    def _admit_generation(self, p, i, req):
        resuming = req.py_request_id in self.kv.kv_cache_map and not self.kv.has_active_cache(req)
        while not self._allocate_generation(req):
            victim = p.last_after(i, p.frontier, self._evictable)
            if victim is not None:
                self._suspend(p, p.requests[victim])
                p.frontier = victim
                continue
            if self.recompute_pause:
                victim = p.last_after(i, p.recompute_frontier, self._recompute_candidate)
                if victim is not None:
                    self._recompute_pause(p, p.requests[victim])
                    p.recompute_frontier = victim
                    continue
            if self.kv.is_request_active(req.py_request_id):
                logger.debug(f"self-evicting {req.py_request_id}; can evict: {self.kv.can_evict}")
                self._suspend(p, req, owned=not resuming)
            return False
        if resuming and self.peft is not None:
            self.peft.add_request_peft(req)  # it owns its adapter again
        return True

    def _allocate_generation(self, req):
        if not self.kv.try_allocate_generation(req):
            return False
        if self.joint and not self.draft.try_allocate_generation(req):
            self.kv.revert_allocate_generation(req)
            return False
        return True

    def _evictable(self, req):
        return _is_started(req) and self.kv.is_request_active(req.py_request_id)

    def _recompute_candidate(self, req):
        if req.state_value == LlmRequestState.GENERATION_TO_COMPLETE.value:
            return False
        if req.is_generation_in_progress_state and req.py_multimodal_data is not None:
            return False
        return _is_started(req)

    def _context_phase(self, p):
        for j in range(p.frontier):
            req = p.requests[j]
            if (
                not req.is_context_init_state
                or req.request_id in p.inflight
                or req.py_request_id in p.taken
                or getattr(req, "encoder_output_len", None) is not None
            ):
                continue
            if p.requests_left < 1:
                return
            chunk = self._chunk(req, p.tokens_left)
            if chunk == 0 or p.peft_pages_needed(req) is None:
                continue
            first = req.is_first_context_chunk
            if self._admit_context(p, j, req, chunk):
                req.context_chunk_size = chunk
                p.commit(req, chunk, p.context)
            elif first:
                for manager in (self.kv, self.draft):
                    if manager is not None and req.py_request_id in manager.kv_cache_map:
                        manager.free_resources(req)
                rewind_context_after_cache_drop(req, self.tokens_per_block)

    def _chunk(self, req, tokens_left):
        remaining = req.context_remaining_length
        if remaining <= tokens_left:
            return remaining
        if not self.chunking or self.policy == ContextChunkingPolicy.FORCE_CHUNK:
            return 0
        return (tokens_left // self.unit) * self.unit

    def _admit_context(self, p, j, req, chunk):
        resuming = req.py_request_id in self.kv.kv_cache_map and not self.kv.has_active_cache(req)
        if not self._prepare(req):
            return False
        while True:
            if not self.kv.resize_context(req, chunk):
                reverted = False
            elif self.joint and not self.draft.try_allocate_draft_context(req, chunk):
                if not self.kv.revert_allocate_context(req):
                    self.draft.free_resources(req)
                reverted = True
            else:
                return True
            if req.is_first_context_chunk:
                if reverted:
                    self._suspend(p, req, was_active=True)
                return False
            # With a tier below the device, suspension frees the pages instead.
            # After a preemption, retry (resuming first if a revert suspended it).
            if (
                self.recompute_pause
                and not self.kv.has_cache_tier_below_gpu
                and self._preempt(p, j)
                and (self.kv.is_request_active(req.py_request_id) or self._prepare(req))
            ):
                continue
            self._suspend(p, req, owned=not resuming, was_active=True)
            return False

    def _prepare(self, req):
        """Create or resume the caches; the joint pairing admits the draft pool itself."""
        if not self.joint:
            return self.kv.prepare_context(req)
        if req.is_first_context_chunk:
            limit = min(self.draft.probe_context_reuse(req), self.kv.probe_context_reuse(req))
            reused = self.draft.prepare_context_cache(req, limit)
            return reused is not None and self.kv.prepare_context_cache(req, reused) is not None
        if self.kv.prepare_context(req) and self.draft.prepare_context(req):
            return True
        self.kv.suspend_request(req)
        self.draft.suspend_request(req)
        return False

    def _preempt(self, p, j):
        """Give up the last started request after ``j`` that holds a cache."""
        victim = p.last_after(
            j,
            len(p.requests),
            lambda r: self._recompute_candidate(r) and r.py_request_id in self.kv.kv_cache_map,
        )
        if victim is None:
            return False
        req = p.requests[victim]
        was_active = self.kv.is_request_active(req.py_request_id)
        logger.debug(f"preempting {req.py_request_id} ({req.state.name})")
        self.kv.preempt_request(req)
        if self.draft is not None:
            self.draft.free_resources(req)
        self._left_device(p, req, was_active)
        return True

    # ---- the moves ----

    def _suspend(self, p, req, owned=True, was_active=None):
        if was_active is None:
            was_active = self.kv.is_request_active(req.py_request_id)
        req.py_batch_idx = None
        self.kv.suspend_request(req)
        if self.draft is not None:
            self.draft.suspend_request(req)
        if owned and was_active and _is_started(req):
            self._release_on_suspend(req)
        if _is_started(req) and not any(r is req for r in p.paused):
            p.paused.append(req)

    def _release_on_suspend(self, req):
        pass  # TensorRT-LLM issue #18407: the adapter stays active on the device

    def _recompute_pause(self, p, req):
        was_active = self.kv.is_request_active(req.py_request_id)
        self.kv.free_resources(req)
        if self.draft is not None:
            self.draft.free_resources(req)
        self._left_device(p, req, was_active)

    def _left_device(self, p, req, was_active):
        req.py_batch_idx = None
        if was_active and self.peft is not None:
            self.peft.mark_request_done(req, pause=True)  # back later: keep it on host
        p.paused = [r for r in p.paused if r is not req]
        p.recompute_paused.append(req)
        p.taken.add(req.py_request_id)


class CorrectKVCacheV2Scheduler(KVCacheV2Scheduler):
    def _release_on_suspend(self, req):
        if self.peft is not None:
            self.peft.mark_request_done(req, pause=True)

    def _evictable(self, req):
        # "Started" includes GENERATION_TO_COMPLETE, as upstream's; a retiring request's
        # last token is on the device, so it is never a victim, told in flight or not.
        return not req.is_generation_to_complete_state and super()._evictable(req)
