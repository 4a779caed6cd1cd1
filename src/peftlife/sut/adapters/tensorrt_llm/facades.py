"""Façades: peftlife's world with exactly the surface TensorRT-LLM's scheduler uses.

The upstream scheduler reads and writes ``LlmRequest`` attributes and calls
``KVCacheManagerV2`` and PEFT manager methods by their upstream names. Each
façade here serves exactly that surface from the world (its ``SURFACE``
lists it, and docs/tensorrt-llm.md says what serves each name) and nothing
else: a name outside it raises ``AttributeError`` naming it, which the
engine reports as a finding, so a checkout newer than the adapter shows up
instead of being silently mis-served.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from peftlife.sut.adapters.tensorrt_llm.standins import BlockReusePolicy, LlmRequestState
from peftlife.world.kv import KVCacheManager
from peftlife.world.peft import PeftCacheManager
from peftlife.world.request import Request

# Upstream's per-request scratch fields: written by the scheduler or the KV
# manager, read back by them, never by the world, which keeps room for them.
SCRATCH_FIELDS = ("py_batch_idx", "estimated_reusable_tokens", "py_ctx_pre_resize_cap")


def _scratch(name: str) -> property:
    def get(self: LlmRequestFacade) -> object:
        return getattr(self._request, name)

    def set_(self: LlmRequestFacade, value: object) -> None:
        setattr(self._request, name, value)

    return property(get, set_, doc=f"Upstream's scratch field ``{name}``.")


class LlmRequestFacade:
    """One world request as upstream's ``LlmRequest``.

    >>> r = LlmRequestFacade(Request(3, 7, True, prompt_len=8, max_new_tokens=2))
    >>> r.py_request_id, r.state.name, r.prompt_len, r.is_last_context_chunk
    (3, 'CONTEXT_INIT', 8, True)
    """

    __slots__ = ("_request",)

    SURFACE = (
        "request_id",
        "py_request_id",
        "state",
        "state_value",
        "lora_task_id",
        "prompt_len",
        "is_context_init_state",
        "is_first_context_chunk",
        "is_last_context_chunk",
        "is_generation_in_progress_state",
        "is_generation_to_complete_state",
        "context_remaining_length",
        "context_current_position",
        "context_chunk_size",
        "get_beam_width_by_iter",
        "set_prepopulated_prompt_len",
        "py_draft_tokens",
        "py_encoder_output_ready_event",
        "encoder_output_len",
        "py_multimodal_data",
        *SCRATCH_FIELDS,
    )

    def __init__(self, request: Request) -> None:
        self._request = request

    def __repr__(self) -> str:
        return f"LlmRequest(py_request_id={self._request.request_id})"

    @property
    def request_id(self) -> int:
        return self._request.request_id

    @property
    def py_request_id(self) -> int:
        return self._request.request_id

    @property
    def state(self) -> LlmRequestState:
        return LlmRequestState(self._request.state_value)

    @property
    def state_value(self) -> int:
        return self._request.state_value

    @property
    def lora_task_id(self) -> int | None:
        return self._request.lora_task_id

    @property
    def prompt_len(self) -> int:
        """Upstream's prompt length counts the tokens a recompute folded in."""
        return self._request.context_len

    @property
    def is_context_init_state(self) -> bool:
        return self._request.is_context_init_state

    @property
    def is_first_context_chunk(self) -> bool:
        return self._request.is_first_context_chunk

    @property
    def is_last_context_chunk(self) -> bool:
        return self._request.is_last_context_chunk

    @property
    def is_generation_in_progress_state(self) -> bool:
        """Upstream's C++ request counts a retiring request (``GENERATION_TO_COMPLETE``) as
        in progress too, and upstream's scheduler relies on it (its "started" requests,
        its own ``and not is_generation_to_complete_state``); the world's does not."""
        return (
            self._request.is_generation_in_progress_state
            or self._request.is_generation_to_complete_state
        )

    @property
    def is_generation_to_complete_state(self) -> bool:
        return self._request.is_generation_to_complete_state

    @property
    def context_remaining_length(self) -> int:
        return self._request.context_remaining_length

    @property
    def context_current_position(self) -> int:
        return self._request.context_current_position

    @context_current_position.setter
    def context_current_position(self, value: int) -> None:
        # Written through, so that a scheduler moving the cursor is seen by the checker.
        self._request.context_current_position = value

    @property
    def context_chunk_size(self) -> int:
        return self._request.context_chunk_size

    @context_chunk_size.setter
    def context_chunk_size(self, value: int) -> None:
        self._request.context_chunk_size = value

    def get_beam_width_by_iter(self, for_next_iteration: bool = False) -> int:
        return self._request.get_beam_width_by_iter(for_next_iteration)

    def set_prepopulated_prompt_len(self, prepopulated: int, tokens_per_block: int) -> None:
        """Prefix reuse is not modelled: only a prepopulated length of 0 is consistent."""
        if prepopulated:
            raise ValueError(
                f"request {self.py_request_id}: a prepopulated prompt of {prepopulated} tokens "
                "needs prefix reuse, which peftlife does not model"
            )

    @property
    def py_draft_tokens(self) -> list[int]:
        """No draft tokens: the draft pool mirrors the target's capacity exactly."""
        return []

    @property
    def py_encoder_output_ready_event(self) -> None:
        return None

    @property
    def encoder_output_len(self) -> None:
        return None

    @property
    def py_multimodal_data(self) -> None:
        return None

    py_batch_idx = _scratch("py_batch_idx")
    estimated_reusable_tokens = _scratch("estimated_reusable_tokens")
    py_ctx_pre_resize_cap = _scratch("py_ctx_pre_resize_cap")


def _world(req: Any) -> Any:
    """The world request behind a façade; anything else is passed on for the world to refuse."""
    return req._request if isinstance(req, LlmRequestFacade) else req


class KVCacheManagerV2:
    """One world KV pool as upstream's ``KVCacheManagerV2`` (the class the scheduler asserts).

    ``joint`` says this pool pairs with a draft pool through the joint calls.
    """

    __slots__ = ("_pool", "enable_joint_kv_cache_reuse")

    SURFACE = (
        "tokens_per_block",
        "enable_block_reuse",
        "enable_joint_kv_cache_reuse",
        "block_reuse_policy",
        "_has_cp_helix",
        "can_evict",
        "has_cache_tier_below_gpu",
        "kv_connector_manager",
        "kv_cache_map",
        "prepare_context",
        "resize_context",
        "revert_allocate_context",
        "try_allocate_generation",
        "revert_allocate_generation",
        "is_request_active",
        "has_active_cache",
        "suspend_request",
        "free_resources",
        "preempt_request",
        "probe_context_reuse",
        "prepare_context_cache",
        "try_allocate_draft_context",
    )

    def __init__(self, pool: KVCacheManager, *, joint: bool = False) -> None:
        self._pool = pool
        self.enable_joint_kv_cache_reuse = joint

    @property
    def tokens_per_block(self) -> int:
        return self._pool.tokens_per_block

    @property
    def enable_block_reuse(self) -> bool:
        return self._pool.enable_block_reuse

    @property
    def block_reuse_policy(self) -> BlockReusePolicy:
        return BlockReusePolicy.PER_REQUEST

    @property
    def _has_cp_helix(self) -> bool:
        return False

    @property
    def can_evict(self) -> bool:
        return self._pool.can_evict

    @property
    def has_cache_tier_below_gpu(self) -> bool:
        return self._pool.has_cache_tier_below_gpu

    @property
    def kv_connector_manager(self) -> None:
        return None

    @property
    def kv_cache_map(self) -> Mapping[int, object]:
        return self._pool.kv_cache_map

    def prepare_context(self, req: Any) -> bool:
        return self._pool.prepare_context(_world(req))

    def resize_context(self, req: Any, num_tokens: int) -> bool:
        return self._pool.resize_context(_world(req), num_tokens)

    def revert_allocate_context(self, req: Any) -> bool:
        return self._pool.revert_allocate_context(_world(req))

    def try_allocate_generation(self, req: Any) -> bool:
        return self._pool.try_allocate_generation(_world(req))

    def revert_allocate_generation(self, req: Any) -> None:
        self._pool.revert_allocate_generation(_world(req))

    def is_request_active(self, request_id: int) -> bool:
        return self._pool.is_request_active(request_id)

    def has_active_cache(self, req: Any) -> bool:
        return self._pool.has_active_cache(_world(req))

    def suspend_request(self, req: Any) -> None:
        self._pool.suspend_request(_world(req))

    def free_resources(self, req: Any) -> None:
        self._pool.free_resources(_world(req))

    def preempt_request(self, req: Any) -> None:
        self._pool.preempt_request(_world(req))

    def probe_context_reuse(self, req: Any) -> int:
        return self._pool.probe_context_reuse(_world(req))

    def prepare_context_cache(self, req: Any, reuse_limit: int | None) -> int | None:
        return self._pool.prepare_context_cache(_world(req), reuse_limit)

    def try_allocate_draft_context(self, req: Any, num_tokens: int) -> bool:
        return self._pool.try_allocate_draft_context(_world(req), num_tokens)


class PeftCacheManagerFacade:
    """The world's PEFT manager as the object upstream's scheduler holds."""

    __slots__ = ("_peft",)

    SURFACE = ("max_device_pages", "determine_num_pages", "mark_request_done", "add_request_peft")

    def __init__(self, peft: PeftCacheManager) -> None:
        self._peft = peft

    @property
    def max_device_pages(self) -> int:
        return self._peft.max_device_pages

    def determine_num_pages(self, req: Any) -> int:
        return self._peft.determine_num_pages(_world(req))

    def mark_request_done(self, req: Any, pause: bool = False) -> None:
        self._peft.mark_request_done(_world(req), pause=pause)

    def add_request_peft(self, req: Any, try_gpu_cache: bool = True) -> None:
        self._peft.add_request_peft(_world(req), try_gpu_cache)
