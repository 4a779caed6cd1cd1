"""Stand-ins for every ``tensorrt_llm`` module the two scheduler files import.

TensorRT-LLM's ``scheduler.py`` and ``scheduler_v2.py`` import the compiled
bindings, the logger, the request type, the LLM API's enums and the KV
manager module. None of those can load without torch and CUDA, and the
scheduler needs only a few names from each. ``build()`` makes fresh module
objects holding exactly those names; ``installed()`` puts them in
``sys.modules`` for the duration of a call and takes them out again, so
nothing is left behind and a real installed ``tensorrt_llm`` is never
shadowed outside the call.

A name the stand-ins lack raises ``MissingStandIn`` (an ``AttributeError``,
so ``from m import name`` turns it into an ``ImportError`` as Python does),
and is remembered so the loader can say which module and name a newer
checkout needs.
"""

from __future__ import annotations

import enum
import importlib.abc
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

ROOT = "tensorrt_llm"
PYEXECUTOR = "tensorrt_llm._torch.pyexecutor"
SCHEDULER_PACKAGE = f"{PYEXECUTOR}.scheduler"
KV_MANAGER_MODULE = f"{PYEXECUTOR}.kv_cache.kv_cache_manager_v2"


class MissingStandIn(AttributeError):
    """An upstream module asked a stand-in for a name it does not provide."""

    def __init__(self, module: str, name: str) -> None:
        super().__init__(f"module {module!r} has no attribute {name!r}")
        self.module = module
        self.name = name


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


class StandInModule(types.ModuleType):
    """A module with a fixed set of names; any other name is a recorded miss."""

    def __init__(self, name: str, names: Mapping[str, object], misses: list[MissingStandIn]):
        super().__init__(name, f"peftlife stand-in for {name}")
        self.__dict__.update(names)
        self.__dict__["_misses"] = misses

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        miss = MissingStandIn(self.__name__, name)
        self.__dict__["_misses"].append(miss)
        raise miss


def _package(module: types.ModuleType) -> types.ModuleType:
    module.__path__ = []  # a package, so that submodules resolve
    return module


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
    internal = _package(
        module("tensorrt_llm.bindings.internal", batch_manager=batch_manager, algorithms=algorithms)
    )
    modules: dict[str, types.ModuleType] = {
        ROOT: _package(module(ROOT)),
        "tensorrt_llm.bindings": _package(module("tensorrt_llm.bindings", internal=internal)),
        internal.__name__: internal,
        batch_manager.__name__: batch_manager,
        algorithms.__name__: algorithms,
        "tensorrt_llm.logger": module("tensorrt_llm.logger", logger=_SilentLogger()),
        "tensorrt_llm.llmapi": _package(module("tensorrt_llm.llmapi")),
        "tensorrt_llm.llmapi.llm_args": module(
            "tensorrt_llm.llmapi.llm_args",
            CapacitySchedulerPolicy=CapacitySchedulerPolicy,
            ContextChunkingPolicy=ContextChunkingPolicy,
        ),
        "tensorrt_llm._torch": _package(module("tensorrt_llm._torch")),
        PYEXECUTOR: _package(module(PYEXECUTOR)),
        f"{PYEXECUTOR}.llm_request": module(
            f"{PYEXECUTOR}.llm_request",
            LlmRequest=object,
            LlmRequestState=LlmRequestState,
            get_draft_token_length=get_draft_token_length,
            rewind_context_after_cache_drop=rewind_context_after_cache_drop,
            get_multimodal_encoder_token_lengths=get_multimodal_encoder_token_lengths,
            is_multimodal_encoder_ready=is_multimodal_encoder_ready,
        ),
        SCHEDULER_PACKAGE: _package(module(SCHEDULER_PACKAGE)),
        f"{PYEXECUTOR}.kv_cache": _package(module(f"{PYEXECUTOR}.kv_cache")),
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


class _BlockOtherTrtllm(importlib.abc.MetaPathFinder):
    """While stand-ins are installed, no real ``tensorrt_llm`` submodule may load under them."""

    def __init__(self, known: Sequence[str]) -> None:
        self.known = frozenset(known)

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if (fullname == ROOT or fullname.startswith(ROOT + ".")) and fullname not in self.known:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


_ABSENT = object()


@contextmanager
def installed(modules: Mapping[str, types.ModuleType]) -> Iterator[None]:
    """Put ``modules`` in ``sys.modules`` for the block, then restore what was there.

    >>> import sys
    >>> with installed({"tensorrt_llm.example": types.ModuleType("tensorrt_llm.example")}):
    ...     "tensorrt_llm.example" in sys.modules
    True
    >>> "tensorrt_llm.example" in sys.modules
    False
    """
    saved = {name: sys.modules.get(name, _ABSENT) for name in modules}
    # Anything else already imported under tensorrt_llm (a real install) is hidden too.
    hidden = {
        name: mod
        for name, mod in sys.modules.items()
        if (name == ROOT or name.startswith(ROOT + ".")) and name not in modules
    }
    for name in hidden:
        del sys.modules[name]
    blocker = _BlockOtherTrtllm(list(modules))
    sys.meta_path.insert(0, blocker)
    sys.modules.update(modules)
    try:
        yield
    finally:
        sys.meta_path.remove(blocker)
        for name, previous in saved.items():
            if previous is _ABSENT:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous  # type: ignore[assignment]
        sys.modules.update(hidden)
