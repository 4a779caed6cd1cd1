"""Stand-ins for every ``tensorrt_llm`` module the two scheduler files import.

TensorRT-LLM's ``scheduler.py`` and ``scheduler_v2.py`` import the compiled
bindings, the logger, the request type, the LLM API's enums and the KV
manager module. None of those can load without torch and CUDA, and the
scheduler needs only a few names from each. ``build()`` makes fresh module
objects holding exactly those names (``upstream.StandInModule``: a name they
lack is recorded, so the loader can say which module and name a newer
checkout needs); the loader installs them for each call only, with any real
``tensorrt_llm`` hidden meanwhile.
"""

from __future__ import annotations

import enum
import importlib.util
import types
from collections.abc import Callable
from typing import Any

from peftlife.sut.adapters.upstream import MissingStandIn, StandInModule, as_package

ROOT = "tensorrt_llm"
PYEXECUTOR = "tensorrt_llm._torch.pyexecutor"
SCHEDULER_PACKAGE = f"{PYEXECUTOR}.scheduler"
KV_MANAGER_MODULE = f"{PYEXECUTOR}.kv_cache.kv_cache_manager_v2"


class LlmRequestState(enum.IntEnum):
    """Upstream's request states (C++ ``LlmRequestState``); the world enters four."""

    UNKNOWN = 0
    ENCODER_INIT = 1
    DISAGG_GENERATION_INIT = 8
    DISAGG_GENERATION_TRANS_IN_PROGRESS = 9
    CONTEXT_INIT = 10
    DISAGG_CONTEXT_INIT_AND_TRANS = 11
    DISAGG_CONTEXT_WAIT_SCHEDULER = 12
    GENERATION_IN_PROGRESS = 13
    GENERATION_TO_COMPLETE = 14
    GENERATION_COMPLETE = 20
    DISAGG_CONTEXT_TRANS_IN_PROGRESS = 21
    DISAGG_CONTEXT_COMPLETE = 22
    DISAGG_GENERATION_TRANS_COMPLETE = 23
    DISAGG_TRANS_ERROR = -1


class CapacitySchedulerPolicy(enum.Enum):
    MAX_UTILIZATION = "MAX_UTILIZATION"
    GUARANTEED_NO_EVICT = "GUARANTEED_NO_EVICT"
    STATIC_BATCH = "STATIC_BATCH"


class ContextChunkingPolicy(enum.Enum):
    FIRST_COME_FIRST_SERVED = "FIRST_COME_FIRST_SERVED"
    EQUAL_PROGRESS = "EQUAL_PROGRESS"
    FORCE_CHUNK = "FORCE_CHUNK"


class BlockReusePolicy(enum.Enum):
    ALL_REUSABLE = "ALL_REUSABLE"
    PER_REQUEST = "PER_REQUEST"


class _SilentLogger:
    """Upstream's logger: every level accepted, nothing printed (a search runs millions)."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


class _Opaque:
    """A binding type the scheduler names in annotations and aliases but never uses."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass


def get_draft_token_length(req: Any) -> int:
    return len(getattr(req, "py_draft_tokens", None) or ())


def rewind_context_after_cache_drop(req: Any, tokens_per_block: int) -> None:
    """A first chunk whose caches were dropped starts its prefill again from the start."""
    req.context_current_position = 0
    req.set_prepopulated_prompt_len(0, tokens_per_block)
    req.context_chunk_size = req.prompt_len
    req.estimated_reusable_tokens = 0
    req.py_ctx_pre_resize_cap = None


def _settle_context_cursor(req: Any, reused_tokens: int, tokens_per_block: int) -> None:
    """Put the context cursor after the reused prefix (always 0 here: no prefix reuse)."""
    req.context_current_position = reused_tokens
    req.set_prepopulated_prompt_len(reused_tokens, tokens_per_block)


def get_multimodal_encoder_token_lengths(req: Any) -> None:
    return None


def is_multimodal_encoder_ready(req: Any) -> bool:
    return True


def build(kv_manager_class: type, misses: list[MissingStandIn]) -> dict[str, types.ModuleType]:
    """Fresh stand-in modules by name; ``kv_manager_class`` serves ``KVCacheManagerV2``.

    >>> mods = build(object, [])
    >>> mods["tensorrt_llm.llmapi.llm_args"].ContextChunkingPolicy.EQUAL_PROGRESS.name
    'EQUAL_PROGRESS'
    """

    def module(name: str, **names: object) -> StandInModule:
        return StandInModule(name, names, misses)

    batch_manager = module(
        "tensorrt_llm.bindings.internal.batch_manager",
        PrefixReuseSummary=_Opaque,
        PeftCacheManager=_Opaque,
        ContextChunkingConfig=_Opaque,
    )
    algorithms = module(
        "tensorrt_llm.bindings.internal.algorithms",
        CapacityScheduler=_Opaque,
        MicroBatchScheduler=_Opaque,
    )
    internal = as_package(
        module("tensorrt_llm.bindings.internal", batch_manager=batch_manager, algorithms=algorithms)
    )
    modules: dict[str, types.ModuleType] = {
        ROOT: as_package(module(ROOT)),
        "tensorrt_llm.bindings": as_package(module("tensorrt_llm.bindings", internal=internal)),
        internal.__name__: internal,
        batch_manager.__name__: batch_manager,
        algorithms.__name__: algorithms,
        "tensorrt_llm.logger": module("tensorrt_llm.logger", logger=_SilentLogger()),
        "tensorrt_llm.llmapi": as_package(module("tensorrt_llm.llmapi")),
        "tensorrt_llm.llmapi.llm_args": module(
            "tensorrt_llm.llmapi.llm_args",
            CapacitySchedulerPolicy=CapacitySchedulerPolicy,
            ContextChunkingPolicy=ContextChunkingPolicy,
        ),
        "tensorrt_llm._torch": as_package(module("tensorrt_llm._torch")),
        PYEXECUTOR: as_package(module(PYEXECUTOR)),
        f"{PYEXECUTOR}.llm_request": module(
            f"{PYEXECUTOR}.llm_request",
            LlmRequest=object,
            LlmRequestState=LlmRequestState,
            get_draft_token_length=get_draft_token_length,
            rewind_context_after_cache_drop=rewind_context_after_cache_drop,
            get_multimodal_encoder_token_lengths=get_multimodal_encoder_token_lengths,
            is_multimodal_encoder_ready=is_multimodal_encoder_ready,
        ),
        SCHEDULER_PACKAGE: as_package(module(SCHEDULER_PACKAGE)),
        f"{PYEXECUTOR}.kv_cache": as_package(module(f"{PYEXECUTOR}.kv_cache")),
        KV_MANAGER_MODULE: module(
            KV_MANAGER_MODULE,
            KVCacheManagerV2=kv_manager_class,
            BlockReusePolicy=BlockReusePolicy,
            _settle_context_cursor=_settle_context_cursor,
        ),
    }
    if importlib.util.find_spec("strenum") is None:
        # Upstream's scheduler.py imports it at module level; Python 3.11 has its own.
        modules["strenum"] = module("strenum", StrEnum=enum.StrEnum)
    return modules
