"""Stand-ins for every ``vllm`` module the scheduler files import.

vLLM's v1 scheduler (``vllm/v1/core/sched/scheduler.py``) and the files the
spike loads with it (``interface.py``, ``request_queue.py``, ``output.py``,
``sched/utils.py`` and ``vllm/v1/request.py``) import configuration, the
connectors, metrics, multimodal helpers, the engine's message types and the
KV cache manager. Most of those pull in torch, CUDA or msgspec; the
scheduler needs only a few names from each, and with connectors, multimodal
inputs, speculative decoding and statistics switched off in the tiny
configuration, most of those names are touched only in annotations or
``isinstance`` checks. ``build()`` makes fresh module objects holding exactly
those names; a name they lack is recorded as a miss (as for TensorRT-LLM).

The KV cache manager is not stood in by vLLM's own (its block pool reaches
torch through ``kv_cache_interface``): it is served by ``blocks.py``, peftlife's
model of it.
"""

from __future__ import annotations

import contextlib
import enum
import sys
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from peftlife.sut.adapters.tensorrt_llm.standins import MissingStandIn, StandInModule

ROOT = "vllm"
SCHED_PACKAGE = "vllm.v1.core.sched"


class _SilentLogger:
    """``init_logger(...)``'s logger: every level accepted, nothing printed."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def init_logger(name: str) -> _SilentLogger:
    return _SilentLogger()


class _Opaque:
    """A type the files name in annotations, ``isinstance`` checks or unused defaults."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass


def _opaque(name: str) -> type:
    return type(name, (_Opaque,), {})


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


class FinishReason(enum.IntEnum):
    STOP = 0
    LENGTH = 1
    ABORT = 2
    ERROR = 3
    REPETITION = 4


class EngineCoreEventType(enum.IntEnum):
    QUEUED = 1
    SCHEDULED = 2
    PREEMPTED = 3


class _Record:
    """An engine message (``EngineCoreOutput(s)``, stats): keeps whatever it is given."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.__dict__.update(kwargs)


class EngineCoreEvent(_Record):
    @classmethod
    def new_event(cls, event_type: object, timestamp: object = None) -> EngineCoreEvent:
        return cls(type=event_type, timestamp=timestamp)


class PrefillStats:
    """Per-request prefill statistics; the scheduler sets and finalizes them."""

    def set(self, **kwargs: object) -> None:
        pass

    def finalize(self, *args: object) -> None:
        pass


class ConstantList(list):  # type: ignore[type-arg]
    """A read-only view of a list (upstream's ``ConstantList``)."""

    def __init__(self, items: list[Any]) -> None:
        super().__init__()
        self._items = items

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def copy(self) -> list[Any]:
        return list(self._items)


def length_from_prompt_token_ids_or_embeds(token_ids: Any, embeds: Any) -> int:
    return len(token_ids) if token_ids is not None else len(embeds)


class StructuredOutputRequest:
    @staticmethod
    def from_sampling_params(sampling_params: object) -> None:
        return None  # the spike sends no grammar-constrained request


class StructuredOutputManager:
    """Grammar handling: every token accepted, no bitmask (no structured requests)."""

    def accept_tokens(self, request: object, tokens: object) -> bool:
        return True

    def validate_tokens(self, request: object, tokens: list[int]) -> list[int]:
        return tokens

    def grammar_bitmask(self, *args: object, **kwargs: object) -> None:
        return None


class _EventPublisher:
    def publish(self, batch: object) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def get_publisher_config(self) -> None:
        return None


class EventPublisherFactory:
    @staticmethod
    def create(config: object, data_parallel_rank: int = 0) -> _EventPublisher:
        return _EventPublisher()


class EncoderCacheManager:
    """The multimodal encoder cache: empty, since the spike's requests are text only."""

    @classmethod
    def create_manager(cls, cache_size: int, vllm_config: object) -> EncoderCacheManager:
        return cls()

    def free(self, request: object) -> None:
        pass

    def get_freed_mm_hashes(self) -> list[str]:
        return []

    def get_manager_metadata(self) -> None:
        return None

    def reset(self) -> None:
        pass


class MultiModalRegistry(_Opaque):
    pass


def strip_covered_mm_data(mm_features: list[Any], *args: object, **kwargs: object) -> list[Any]:
    return mm_features


def record_function_or_nullcontext(name: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def _package(module: types.ModuleType) -> types.ModuleType:
    module.__path__ = []  # a package, so that submodules resolve
    return module


PACKAGES = (
    "vllm",
    "vllm.compilation",
    "vllm.config",
    "vllm.distributed",
    "vllm.distributed.aux_output_connector",
    "vllm.distributed.ec_transfer",
    "vllm.distributed.ec_transfer.ec_connector",
    "vllm.distributed.kv_transfer",
    "vllm.distributed.kv_transfer.kv_connector",
    "vllm.distributed.kv_transfer.kv_connector.v1",
    "vllm.multimodal",
    "vllm.utils",
    "vllm.v1",
    "vllm.v1.core",
    "vllm.v1.core.sched",
    "vllm.v1.engine",
    "vllm.v1.metrics",
    "vllm.v1.spec_decode",
    "vllm.v1.spec_decode.dynamic",
    "vllm.v1.structured_output",
)


def _names(kv_manager: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """Each stood-in module's names. Only those the loaded files import are here."""
    opaque = _opaque
    return {
        "vllm.compilation.cuda_graph": {"CUDAGraphStat": opaque("CUDAGraphStat")},
        "vllm.config": {
            "KVEventsConfig": opaque("KVEventsConfig"),
            "VllmConfig": opaque("VllmConfig"),
        },
        "vllm.config.ec_manager_config": {
            "EncoderCacheManagerMetadata": opaque("EncoderCacheManagerMetadata")
        },
        "vllm.distributed.aux_output_connector.connector": {
            "AuxOutputSchedulerConnector": opaque("AuxOutputSchedulerConnector")
        },
        "vllm.distributed.ec_transfer.ec_connector.base": {
            "ECConnectorBase": opaque("ECConnectorBase"),
            "ECConnectorMetadata": opaque("ECConnectorMetadata"),
            "ECConnectorRole": opaque("ECConnectorRole"),
        },
        "vllm.distributed.ec_transfer.ec_connector.factory": {
            "ECConnectorFactory": opaque("ECConnectorFactory")
        },
        "vllm.distributed.ec_transfer.ec_connector.metrics": {
            "ECConnectorStats": opaque("ECConnectorStats")
        },
        "vllm.distributed.kv_events": {
            "EventPublisherFactory": EventPublisherFactory,
            "KVEventBatch": _Record,
        },
        "vllm.distributed.kv_transfer.kv_connector.factory": {
            "KVConnectorFactory": opaque("KVConnectorFactory")
        },
        "vllm.distributed.kv_transfer.kv_connector.v1": {
            "KVConnectorBase_V1": opaque("KVConnectorBase_V1"),
            "KVConnectorRole": opaque("KVConnectorRole"),
            "SupportsHMA": opaque("SupportsHMA"),
        },
        "vllm.distributed.kv_transfer.kv_connector.v1.base": {
            "KVConnectorMetadata": opaque("KVConnectorMetadata")
        },
        "vllm.distributed.kv_transfer.kv_connector.v1.metrics": {
            "KVConnectorStats": opaque("KVConnectorStats")
        },
        "vllm.logger": {"init_logger": init_logger},
        "vllm.multimodal": {
            "MULTIMODAL_REGISTRY": MultiModalRegistry(),
            "MultiModalRegistry": MultiModalRegistry,
        },
        "vllm.multimodal.encoder_budget": {"MultiModalBudget": opaque("MultiModalBudget")},
        "vllm.multimodal.inputs": {
            "MultiModalKwargsItem": opaque("MultiModalKwargsItem"),
            "MultiModalFeatureSpec": opaque("MultiModalFeatureSpec"),
        },
        "vllm.multimodal.utils": {
            "get_mm_features_in_window": lambda *a, **k: [],
            "strip_covered_mm_data": strip_covered_mm_data,
        },
        "vllm.outputs": {"RequestError": opaque("RequestError")},
        "vllm.pooling_params": {"PoolingParams": opaque("PoolingParams")},
        "vllm.sampling_params": {
            "SamplingParams": opaque("SamplingParams"),
            "RepetitionDetectionParams": opaque("RepetitionDetectionParams"),
        },
        "vllm.utils": {
            "length_from_prompt_token_ids_or_embeds": length_from_prompt_token_ids_or_embeds
        },
        "vllm.utils.math_utils": {"cdiv": cdiv},
        "vllm.v1.core.encoder_cache_manager": {
            "EncoderCacheManager": EncoderCacheManager,
            "EncoderDecoderCacheManager": EncoderCacheManager,
        },
        "vllm.v1.core.kv_cache_manager": dict(kv_manager),
        "vllm.v1.core.kv_cache_metrics": {
            "KVCacheMetricsCollector": opaque("KVCacheMetricsCollector")
        },
        "vllm.v1.core.kv_cache_utils": {
            "KVCacheBlock": kv_manager["KVCacheBlock"],
            "KVCacheBlockCopy": opaque("KVCacheBlockCopy"),
        },
        "vllm.v1.engine": {
            "EngineCoreEvent": EngineCoreEvent,
            "EngineCoreEventType": EngineCoreEventType,
            "EngineCoreOutput": _Record,
            "EngineCoreOutputs": _Record,
            "EngineCoreRequest": opaque("EngineCoreRequest"),
            "FinishReason": FinishReason,
        },
        "vllm.v1.kv_cache_interface": {
            "KVCacheConfig": opaque("KVCacheConfig"),
            "MambaSpec": opaque("MambaSpec"),
            "get_mamba_prefill_checkpoint_position": lambda *a, **k: None,
            "is_mamba_prefill_checkpoint_valid": lambda *a, **k: False,
        },
        "vllm.v1.kv_hints": {"KvHintsEnvelope": opaque("KvHintsEnvelope")},
        "vllm.v1.metrics.perf": {
            "ModelMetrics": opaque("ModelMetrics"),
            "PerfStats": opaque("PerfStats"),
        },
        "vllm.v1.metrics.stats": {
            "KV_FETCH_COMPLETED_WAITING": "completed_waiting",
            "KV_FETCH_IN_PROGRESS": "in_progress",
            "KV_FETCH_STAGES": ("waiting_to_start", "in_progress", "completed_waiting"),
            "KV_FETCH_WAITING_TO_START": "waiting_to_start",
            "PrefixCacheStats": opaque("PrefixCacheStats"),
            "PrefillStats": PrefillStats,
            "RequestSpecDecodeMetrics": opaque("RequestSpecDecodeMetrics"),
            "SchedulerStats": _Record,
        },
        "vllm.v1.outputs": {
            "DraftTokenIds": opaque("DraftTokenIds"),
            "KVConnectorOutput": opaque("KVConnectorOutput"),
            "ModelRunnerOutput": opaque("ModelRunnerOutput"),
        },
        "vllm.v1.spec_decode.dynamic.utils": {
            "build_dynamic_sd_schedule_lookup": lambda *a, **k: None
        },
        "vllm.v1.spec_decode.metrics": {"SpecDecodingStats": opaque("SpecDecodingStats")},
        "vllm.v1.structured_output": {"StructuredOutputManager": StructuredOutputManager},
        "vllm.v1.structured_output.request": {"StructuredOutputRequest": StructuredOutputRequest},
        "vllm.v1.structured_output.utils": {"strip_speculative_padding": lambda *a, **k: None},
        "vllm.v1.utils": {
            "ConstantList": ConstantList,
            "record_function_or_nullcontext": record_function_or_nullcontext,
        },
    }


def build(
    kv_manager: Mapping[str, object], misses: list[MissingStandIn]
) -> dict[str, types.ModuleType]:
    """Fresh stand-in modules by name; ``kv_manager`` serves ``vllm.v1.core.kv_cache_manager``.

    >>> mods = build({"KVCacheBlock": object}, [])
    >>> mods["vllm.utils.math_utils"].cdiv(5, 2)
    3
    """
    modules: dict[str, types.ModuleType] = {
        name: StandInModule(name, names, misses) for name, names in _names(kv_manager).items()
    }
    for name in PACKAGES:
        modules[name] = _package(modules.get(name) or StandInModule(name, {}, misses))
    # The torch names request.py touches at import: an annotation, nothing more.
    modules["torch"] = StandInModule("torch", {"Tensor": _opaque("Tensor")}, misses)
    return modules


_ABSENT = object()


@contextmanager
def installed(modules: Mapping[str, types.ModuleType]) -> Iterator[None]:
    """Put ``modules`` in ``sys.modules`` for the block, then restore what was there.

    >>> with installed({"vllm.example": types.ModuleType("vllm.example")}):
    ...     "vllm.example" in sys.modules
    True
    >>> "vllm.example" in sys.modules
    False
    """
    saved = {name: sys.modules.get(name, _ABSENT) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, previous in saved.items():
            if previous is _ABSENT:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous  # type: ignore[assignment]
