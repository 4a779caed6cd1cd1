"""Stand-ins for the modules vLLM's worker-side LoRA slot code imports.

``vllm/lora/worker_manager.py`` and the model manager (``lora/model_manager.py``,
``lora/models.py`` before it) import torch, the LoRA layers, the punica
kernels' wrapper and the model registry. On a model with no LoRA layers
(``modules == {}``) none of those runs: the slot code touches them only in
annotations, ``isinstance`` checks and loops over the model's modules. What
does run is named here, each with the vLLM code it stands for: the model, the
weight loader (``_load_adapter``, in ``slots.py``), the loaded ``LoRAModel``
and the punica wrapper's metadata update. The LRU caches, the slot table,
pins and evictions stay vLLM's own (``vllm/utils/cache.py``, the model
manager, the worker manager).

``build()`` makes fresh module objects; a name they lack is a recorded miss
(as for the scheduler's stand-ins), which the loader turns into one line.
"""

from __future__ import annotations

import contextlib
import enum
import re
import types
from collections.abc import Collection, Iterator
from typing import Any

import attrs

from peftlife.sut.adapters.upstream import MissingStandIn, StandInModule, as_package
from peftlife.sut.adapters.vllm.standins import init_logger


class _Opaque:
    """A type the slot code names in annotations, ``isinstance`` checks or unused defaults."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass


def _opaque(name: str) -> type:
    return type(name, (_Opaque,), {})


class Module:
    """``torch.nn.Module``: a model here has no submodules, so no layer gets a LoRA wrapper."""

    def named_modules(self, *args: object, **kwargs: object) -> Iterator[tuple[str, Any]]:
        return iter(())


class SupportsLoRA:
    """``vllm/model_executor/models/interfaces.py`` ``SupportsLoRA``, the protocol
    ``create_lora_manager`` checks with ``isinstance``."""

    supports_lora = True


class LoRAFreeModel(Module, SupportsLoRA):
    """The model runner's model (``GPUModelRunner.model``) without a single linear layer.

    vLLM's model manager wraps each supported layer it finds; with none,
    ``modules`` stays ``{}`` and activating an adapter is the slot
    bookkeeping alone, which is the part that runs on a CPU.
    """


class LoRAMappingType(enum.IntEnum):
    """``vllm/lora/layers/utils.py`` ``LoRAMappingType``."""

    LANGUAGE = 1
    TOWER = 2
    CONNECTOR = 3


@attrs.frozen
class LoRAMapping:
    """``vllm/lora/layers/utils.py`` ``LoRAMapping``: each token's and sampled row's adapter id."""

    index_mapping: tuple[int, ...]
    prompt_mapping: tuple[int, ...]
    is_prefill: bool = False
    type: LoRAMappingType = LoRAMappingType.LANGUAGE


@attrs.frozen
class Tensor:
    """A ``torch.Tensor`` of LoRA weights: where it lives, nothing of its values."""

    device: str = "cpu"

    def pin_memory(self) -> Tensor:
        return self


@attrs.define
class LoRALayerWeights:
    """``vllm/lora/lora_weights.py`` ``LoRALayerWeights``: one layer's A and B matrices."""

    lora_a: Tensor = Tensor()
    lora_b: Tensor = Tensor()

    def optimize(self) -> LoRALayerWeights:
        return self


# The layer an adapter's weights name; the model has no such layer, so they never reach a slot.
WEIGHTS_LAYER = "model.layers.0.self_attn.qkv_proj"


def _weights() -> dict[str, LoRALayerWeights]:
    return {WEIGHTS_LAYER: LoRALayerWeights()}


@attrs.define
class LoRAModel:
    """``vllm/lora/lora_model.py`` ``LoRAModel`` (``lora/models.py`` before it): an
    adapter's weights read from its path, here only which weights (``version``)."""

    id: int
    name: str
    path: str
    version: int
    rank: int = 8
    # A real adapter has weights for at least one layer, which the manager's
    # _create_merged_loras_inplace reads (0.34.0: next(iter(loras.values()))).
    loras: dict[str, LoRALayerWeights] = attrs.field(factory=_weights)
    modules_to_save: dict[str, Any] = attrs.field(factory=dict)
    is_3d_lora_weight: bool = False

    def get_lora(self, module_name: str) -> None:
        return None  # no layer of the model has LoRA weights

    def check_lora_name(self, module_name: str) -> bool:
        return False

    def get_module_to_save(self, module_name: str) -> None:
        return None


class AdapterFiles:
    """The adapters' files on disk and ``WorkerLoRAManager._load_adapter``
    (``vllm/lora/worker_manager.py``), which reads one into a ``LoRAModel``.

    The files at each (name, path) have a weight version: 1 when first read,
    one more each time the operator writes new weights there (``write``), as
    before an in-place reload. ``loads`` counts the reads: one per time vLLM's
    slot code decided it had to go to disk.

    >>> files = AdapterFiles()
    >>> files.write("a", "/adapters/a")
    2
    """

    def __init__(self) -> None:
        self.versions: dict[tuple[str, str], int] = {}
        self.loads: list[tuple[int, str, str, int]] = []  # (id, name, path, version) per read

    def write(self, name: str, path: str) -> int:
        """New weights at ``path``; their version."""
        self.versions[(name, path)] = self.versions.get((name, path), 1) + 1
        return self.versions[(name, path)]

    def load(self, lora_request: Any) -> LoRAModel:
        """``_load_adapter(lora_request)``: the adapter's weights as they are on disk now."""
        name, path = lora_request.lora_name, lora_request.lora_path
        version = self.versions.setdefault((name, path), 1)
        self.loads.append((lora_request.lora_int_id, name, path, version))
        return LoRAModel(lora_request.lora_int_id, name, path, version)


@attrs.frozen
class KernelLayout:
    """What the punica kernels would index with after a step's mapping: each
    token's adapter id and the slot table it was resolved against."""

    token_ids: tuple[int, ...]
    slots: tuple[int | None, ...]


class PunicaWrapper:
    """``vllm/lora/punica_wrapper/punica_gpu.py`` ``PunicaWrapperGPU``: its
    ``update_metadata`` turns each token's adapter id into a slot index
    (``punica_wrapper/utils.py`` ``convert_mapping``) and copies them to the GPU.

    Here the lookup alone: an id with no slot fails as ``convert_mapping``'s
    ``lora_index_to_id.index`` does (0.11.1; a dict lookup, ``KeyError``, in
    0.34.0), and the layout the kernels would use is kept.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.layouts: list[KernelLayout] = []

    def update_metadata(
        self,
        mapping: LoRAMapping,
        lora_index_to_id: list[int | None],
        max_loras: int,
        vocab_size: int,
        *args: object,
        **kwargs: object,
    ) -> None:
        for lora_id in (*mapping.index_mapping, *mapping.prompt_mapping):
            if lora_id > 0:
                lora_index_to_id.index(lora_id)
        self.layouts.append(KernelLayout(tuple(mapping.index_mapping), tuple(lora_index_to_id)))


# Decoder layer names a real model's ``get_supported_lora_modules`` finds
# (``vllm/lora/utils.py``); the model has none of them, so none is wrapped.
SUPPORTED_LORA_MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


class LoRAAdapterNotFoundError(Exception):
    """``vllm/exceptions.py`` ``LoRAAdapterNotFoundError``."""


def _never(*args: object, **kwargs: object) -> bool:
    """A question about the model's layers or kind (MoE, pooling, multimodal, a
    target module) to which a model without layers answers no."""
    return False


def _names() -> dict[str, dict[str, object]]:
    """Each stood-in module's names, for every release's imports; ``build`` takes a row's."""
    opaque = _opaque
    layers = (
        "BaseClassificationHeadWithLoRA",
        "BaseLayerWithLoRA",
        "ClassificationHeadWithLoRA",
        "FusedMoE3DWithLoRA",
        "FusedMoEWithLoRA",
        "TokenClassificationHeadWithLoRA",
    )
    return {
        "torch": {
            "Tensor": Tensor,
            "device": opaque("device"),
            "dtype": opaque("dtype"),
            "is_tensor": _never,
        },
        "torch.nn": {"Module": Module},
        "safetensors.torch": {},
        "vllm.config": {"VllmConfig": opaque("VllmConfig")},
        # 0.14.0 and 0.15.x's model manager imports ModelConfig from here (an annotation).
        "vllm.config.lora": {
            "LoRAConfig": opaque("LoRAConfig"),
            "ModelConfig": opaque("ModelConfig"),
        },
        "vllm.exceptions": {"LoRAAdapterNotFoundError": LoRAAdapterNotFoundError},
        "vllm.logger": {"init_logger": init_logger},
        "vllm.lora.layers": {
            **{name: opaque(name) for name in layers},
            "LoRAMapping": LoRAMapping,
            "LoRAMappingType": LoRAMappingType,
        },
        "vllm.lora.lora_model": {"LoRAModel": LoRAModel, "MoEEPLoadSpec": opaque("MoEEPLoadSpec")},
        "vllm.lora.lora_weights": {
            "LoRAFullModuleWeights": opaque("LoRAFullModuleWeights"),
            "LoRALayerWeights": LoRALayerWeights,
            "PackedLoRALayerWeights": opaque("PackedLoRALayerWeights"),
        },
        "vllm.lora.peft_helper": {"PEFTHelper": opaque("PEFTHelper")},
        "vllm.lora.punica_wrapper": {"PunicaWrapperBase": PunicaWrapper},
        # vllm/lora/utils.py, asked about a model without layers: nothing packed,
        # nothing to wrap, and an adapter's path is already local.
        "vllm.lora.utils": {
            "get_supported_lora_modules": lambda model: list(SUPPORTED_LORA_MODULES),
            "process_packed_modules_mapping": lambda model, **kwargs: {},
            "is_moe_model": _never,
            "is_supported_lora_module": _never,
            "is_in_target_modules": _never,
            "is_regex_target_modules": _never,
            "get_adapter_absolute_path": lambda path: path,
            # 0.12.0's models.py: read by LoRAModel's checkpoint loading, which the
            # stood-in weight loader replaces.
            "is_base_embeddding_weights": _never,
            **{
                name: opaque(name)
                for name in (
                    "from_layer",
                    "from_layer_classification",
                    "from_layer_logits_processor",
                    "parse_fine_tuned_lora_name",
                    "replace_submodule",
                )
            },
        },
        # The MoE layer the manager wraps with isinstance checks: FusedMoE to
        # 0.23.0, MoERunner from 0.24.0; a model without layers has neither.
        "vllm.model_executor.layers.fused_moe": {
            "FusedMoE": opaque("FusedMoE"),
            "MoERunner": opaque("MoERunner"),
        },
        "vllm.model_executor.layers.pooler.tokwise": {"TokenPooler": opaque("TokenPooler")},
        "vllm.model_executor.model_loader.tensorizer": {
            "TensorizerConfig": opaque("TensorizerConfig")
        },
        "vllm.model_executor.models": {
            "SupportsLoRA": SupportsLoRA,
            # 0.24.0 to 0.31.0: a base of the manager's SupportsLoRAMultiModalModel annotation.
            "SupportsMultiModal": opaque("SupportsMultiModal"),
            "is_pooling_model": _never,
            "supports_multimodal": _never,
        },
        "vllm.model_executor.models.interfaces": {"is_pooling_model": _never},
        "vllm.model_executor.models.module_mapping": {"MultiModelKeys": opaque("MultiModelKeys")},
        "vllm.model_executor.models.utils": {
            "PPMissingLayer": opaque("PPMissingLayer"),
            "WeightsMapper": opaque("WeightsMapper"),
        },
        "vllm.multimodal": {"MULTIMODAL_REGISTRY": None},
        "vllm.multimodal.encoder_budget": {"MultiModalBudget": opaque("MultiModalBudget")},
        "vllm.utils.gpu_sync_debug": {"gpu_sync_allowed": contextlib.nullcontext},
        "vllm.utils.platform_utils": {"is_pin_memory_available": _never},
        "vllm.utils.torch_utils": {"PIN_MEMORY": False},
        # 0.14.0 and 0.15.x: v1/worker/utils.py's MultiModalBudget (encoder_budget.py later).
        "vllm.v1.worker.utils": {"MultiModalBudget": opaque("MultiModalBudget")},
        "regex": {},
    }


PACKAGES = (
    "safetensors",
    "torch",
    "vllm",
    "vllm.config",
    "vllm.lora",
    "vllm.model_executor",
    "vllm.model_executor.layers",
    "vllm.model_executor.layers.pooler",
    "vllm.model_executor.model_loader",
    "vllm.model_executor.models",
    "vllm.multimodal",
    "vllm.utils",
    "vllm.v1",
    "vllm.v1.worker",
)


def build(
    misses: list[MissingStandIn], only: Collection[str], wrappers: list[PunicaWrapper]
) -> dict[str, types.ModuleType]:
    """Fresh stand-in modules for the names in ``only``; each punica wrapper the
    model manager creates is appended to ``wrappers``.

    >>> mods = build([], ["vllm.lora.utils"], [])
    >>> mods["vllm.lora.utils"].get_supported_lora_modules(LoRAFreeModel())[:2]
    ['qkv_proj', 'o_proj']
    >>> "vllm.exceptions" in mods
    False
    """

    def punica(*args: object, **kwargs: object) -> PunicaWrapper:
        wrappers.append(PunicaWrapper())
        return wrappers[-1]

    names = _names()
    names["vllm.lora.punica_wrapper"]["get_punica_wrapper"] = punica
    modules: dict[str, types.ModuleType] = {
        name: StandInModule(name, names[name], misses) for name in only if name != "regex"
    }
    for name in PACKAGES:
        modules[name] = as_package(modules.get(name) or StandInModule(name, {}, misses))
    modules["torch"].__dict__["nn"] = modules.get("torch.nn")  # ``from torch import nn``
    if "safetensors.torch" in modules:
        modules["safetensors"].__dict__["torch"] = modules["safetensors.torch"]
    if "regex" in only:
        # 0.11.1's models.py matches target modules with ``regex`` (a superset of
        # ``re``); a model without layers never reaches a match.
        modules["regex"] = re
    return modules
