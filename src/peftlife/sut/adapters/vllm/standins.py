"""Stand-ins for the ``vllm`` modules vLLM's scheduler and KV cache chain import.

The files peftlife loads unmodified (``checkout.py`` lists them) import
configuration, the connectors, metrics, multimodal helpers, the engine's
message types, the KV event publisher and torch. Those pull in torch, CUDA,
zmq or a GPU platform; the loaded files need only a few names from each, and
with connectors, multimodal inputs, speculative decoding, KV events and
statistics switched off in the tiny configuration, most of those names are
touched only in annotations or ``isinstance`` checks. ``build()`` makes fresh
module objects holding exactly those names; a name they lack is recorded as a
miss (``upstream.StandInModule``). Each stand-in below says which vLLM module it
stands for; names a release range adds are declared in ``releases.py``.
"""

from __future__ import annotations

import contextlib
import enum
import types
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from peftlife.sut.adapters.upstream import MissingStandIn, StandInModule, as_package

ROOT = "vllm"
SCHED_PACKAGE = "vllm.v1.core.sched"


class Fields:
    """A configuration object holding exactly the given fields.

    A field the scheduler reads that is not here is an ``AttributeError``
    naming the object and the field, so a newer checkout says what it needs.

    >>> Fields("cache_config", block_size=4).block_size
    4
    >>> Fields("cache_config").num_gpu_blocks
    Traceback (most recent call last):
    ...
    AttributeError: cache_config has no field 'num_gpu_blocks' in peftlife's vLLM driver
    """

    def __init__(self, name: str, **fields: Any) -> None:
        self.__dict__.update(fields)
        self.__dict__["_name"] = name

    def __getattr__(self, field: str) -> Any:
        if field.startswith("__"):
            raise AttributeError(field)
        raise AttributeError(f"{self._name} has no field {field!r} in peftlife's vLLM driver")


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


def opaque(name: str) -> type:
    return type(name, (_Opaque,), {})


def unreached(name: str) -> Any:
    """A function a loaded file imports but calls only on a path the tiny configuration
    never takes (a KV layout it does not use, a feature it leaves off).

    >>> unreached("format_gib")(1.0)
    Traceback (most recent call last):
    ...
    NotImplementedError: format_gib has no stand-in in peftlife's vLLM driver
    """

    def call(*args: object, **kwargs: object) -> Any:
        raise NotImplementedError(f"{name} has no stand-in in peftlife's vLLM driver")

    call.__name__ = name
    return call


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

    def should_advance(self, request: object, new_token_ids: object = None) -> bool:
        return False  # upstream's answer for a request without structured output (to 0.29.0)

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

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass  # to 0.27.1 the scheduler builds it directly, with its cache size

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
    """``vllm.multimodal.MULTIMODAL_REGISTRY``'s type: no model here takes multimodal inputs."""

    def supports_multimodal_inputs(self, model_config: object) -> bool:
        return False  # the scheduler asks it up to 0.30.0 (later, the model config)


def strip_covered_mm_data(mm_features: list[Any], *args: object, **kwargs: object) -> list[Any]:
    return mm_features


def tensor_data(tensor: object) -> bytes:
    """``vllm.v1.utils.tensor_data``: hashes prompt embeddings, which no request here has."""
    raise NotImplementedError("peftlife's vLLM requests have no prompt embeddings")


@attrs.frozen
class DType:
    """A ``torch.dtype``: the KV specs carry one, ``get_dtype_size`` reads its size."""

    name: str
    itemsize: int


def get_dtype_size(dtype: DType) -> int:
    """``vllm.utils.torch_utils.get_dtype_size``, over the stood-in dtypes."""
    return dtype.itemsize


class MambaAttentionBackendEnum(enum.Enum):
    """``vllm.v1.attention.backends.registry``'s enum: a default of ``MambaSpec`` only."""

    MAMBA1 = "mamba1"
    MAMBA2 = "mamba2"


class Platform:
    """``vllm.platforms.current_platform``: a platform without custom KV cache specs, not XPU."""

    @staticmethod
    def register_custom_kv_cache_specs(vllm_config: object) -> None:
        pass

    @staticmethod
    def is_xpu() -> bool:
        return False


class PydanticMsgspecMixin:
    """``vllm.v1.serial_utils.PydanticMsgspecMixin``, the base ``SamplingParams`` takes.

    Upstream's adds only the pydantic schema hooks the OpenAI server's request
    models use; its module imports torch, zmq and cloudpickle at its top,
    which is all that keeps ``sampling_params.py`` from loading on a CPU.
    """


def make_ndarray_with_pad(*args: object, **kwargs: object) -> object:
    """``vllm.utils.torch_utils.make_ndarray_with_pad``: only prompt-logprob ids need it."""
    raise NotImplementedError("peftlife's vLLM requests ask for no prompt logprobs")


def record_function_or_nullcontext(name: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


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
    "vllm.lora",
    "vllm.multimodal",
    "vllm.utils",
    "vllm.v1",
    "vllm.v1.attention",
    "vllm.v1.attention.backends",
    "vllm.v1.core",
    "vllm.v1.hisparse",
    "vllm.v1.core.sched",
    "vllm.v1.engine",
    "vllm.v1.metrics",
    "vllm.v1.spec_decode",
    "vllm.v1.spec_decode.dynamic",
    "vllm.v1.structured_output",
    "vllm.v1.worker",
    "vllm.v1.worker.gpu",
)


def _names() -> dict[str, dict[str, object]]:
    """Each stood-in module's names. Only those the loaded files import are here."""

    return {
        "vllm.compilation.cuda_graph": {"CUDAGraphStat": opaque("CUDAGraphStat")},
        "vllm.config": {
            "KVEventsConfig": opaque("KVEventsConfig"),
            # sampling_params.py's validation against the model, which the driver skips.
            "ModelConfig": opaque("ModelConfig"),
            "SpeculativeConfig": opaque("SpeculativeConfig"),
            "StructuredOutputsConfig": opaque("StructuredOutputsConfig"),
            "VllmConfig": opaque("VllmConfig"),
            # No current config: the KV spec registry registers vLLM's own specs only.
            "get_current_vllm_config_or_none": lambda: None,
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
        # The event records (msgspec structs over zmq upstream) are built only
        # with KV cache events on, which the tiny configuration leaves off.
        "vllm.distributed.kv_events": {
            "EventPublisherFactory": EventPublisherFactory,
            "KVEventBatch": _Record,
            "KVCacheEvent": _Record,
            "BlockStored": type("BlockStored", (_Record,), {}),
            "BlockRemoved": type("BlockRemoved", (_Record,), {}),
            "AllBlocksCleared": type("AllBlocksCleared", (_Record,), {}),
            "MEDIUM_GPU": "GPU",
            "MEDIUM_CPU": "CPU",
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
        "vllm.tokenizers": {"TokenizerLike": opaque("TokenizerLike")},
        # Only the CUDA-graph capture cases of lora_utils.py read it (lora/utils.py
        # imports torch, transformers and huggingface_hub).
        "vllm.lora.utils": {"get_captured_lora_counts": lambda *a, **k: []},
        "vllm.utils": {
            "length_from_prompt_token_ids_or_embeds": length_from_prompt_token_ids_or_embeds
        },
        "vllm.platforms": {"current_platform": Platform()},
        "vllm.utils.mistral": {"is_mistral_tokenizer": lambda tokenizer: False},
        "vllm.utils.torch_utils": {
            "get_dtype_size": get_dtype_size,
            "make_ndarray_with_pad": make_ndarray_with_pad,
        },
        "vllm.v1.attention.backends.registry": {
            "MambaAttentionBackendEnum": MambaAttentionBackendEnum
        },
        "vllm.v1.core.encoder_cache_manager": {
            "EncoderCacheManager": EncoderCacheManager,
            "EncoderDecoderCacheManager": EncoderCacheManager,
        },
        "vllm.v1.engine": {
            "EngineCoreEvent": EngineCoreEvent,
            "EngineCoreEventType": EngineCoreEventType,
            "EngineCoreOutput": _Record,
            "EngineCoreOutputs": _Record,
            "EngineCoreRequest": opaque("EngineCoreRequest"),
            "FinishReason": FinishReason,
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
            "KVCacheEvictionEvent": opaque("KVCacheEvictionEvent"),
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
        "vllm.v1.serial_utils": {"PydanticMsgspecMixin": PydanticMsgspecMixin},
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
            "tensor_data": tensor_data,
        },
    }


TORCH = {
    "Tensor": opaque("Tensor"),  # annotations only
    "dtype": DType,
    "float16": DType("float16", 2),
    "bfloat16": DType("bfloat16", 2),
    "float32": DType("float32", 4),
    "uint8": DType("uint8", 1),
    "int8": DType("int8", 1),
}


def build(
    extra: Mapping[str, Mapping[str, object]], misses: list[MissingStandIn]
) -> dict[str, types.ModuleType]:
    """Fresh stand-in modules by name, with a release range's ``extra`` names added.

    >>> mods = build({}, [])
    >>> mods["vllm.utils.torch_utils"].get_dtype_size(mods["torch"].float16)
    2
    """
    names = _names()
    names["torch"] = dict(TORCH)
    for module, added in extra.items():
        names[module] = {**names.get(module, {}), **added}
    modules: dict[str, types.ModuleType] = {
        name: StandInModule(name, held, misses) for name, held in names.items()
    }
    # Every parent of a stood-in module is a package, so a release range's
    # module (vllm.model_executor.layers...) imports without its parents listed.
    parents = {n.rpartition(".")[0] for n in names} | set(PACKAGES)
    for name in sorted(parents):
        while name:
            modules[name] = as_package(modules.get(name) or StandInModule(name, {}, misses))
            name = name.rpartition(".")[0]
    return modules
