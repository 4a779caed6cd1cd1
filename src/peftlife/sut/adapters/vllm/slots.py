"""vLLM's worker-side LoRA slot managers, unmodified, on a CPU without torch.

``Slots(path, max_loras=2, max_cpu_loras=3)`` executes a release's (or a
checkout's) ``vllm/lora/request.py``, ``vllm/utils/cache.py``, its model
manager and ``vllm/lora/worker_manager.py`` under their real module names over
the stand-ins of ``slot_standins``, then builds vLLM's own
``LRUCacheWorkerLoRAManager`` and, through its ``create_lora_manager``,
``LRUCacheLoRAModelManager`` over a model with no LoRA layers. Only the weight
loader (``_load_adapter``, an instance attribute over vLLM's method) and the
punica wrapper are peftlife's; the LRU of GPU slots and of the CPU cache, the
slot table, pins and evictions are vLLM's.

``apply`` is the model runner's per-step call (``set_active_adapters``);
``add``, ``remove`` and ``pin`` are the runner's ``add_lora``, ``remove_lora``,
``pin_lora``; ``state()`` reads the slots back as plain values. Whatever vLLM's
slot code raises comes out as ``SlotsRaised`` carrying a ``SlotError`` that
names the file and line. A release is matched to a row of ``RELEASES``: what
differs between releases in the files loaded, the stand-ins they need, and how
the model runner assembles a step's adapter set.
"""

from __future__ import annotations

import os
import re
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import attrs

from peftlife.sut.adapters.upstream import CheckoutError, Loader, find_package
from peftlife.sut.adapters.vllm import releases, slot_standins
from peftlife.sut.adapters.vllm.standins import Fields

T = TypeVar("T")

# Stand-in modules every release's slot files import.
COMMON_STANDINS = (
    "torch",
    "torch.nn",
    "vllm.config",
    "vllm.config.lora",
    "vllm.logger",
    "vllm.lora.layers",
    "vllm.lora.lora_weights",
    "vllm.lora.peft_helper",
    "vllm.lora.punica_wrapper",
    "vllm.lora.utils",
    "vllm.model_executor.models",
    "vllm.model_executor.models.module_mapping",
    "vllm.model_executor.models.utils",
)

# How the model runner turns the step's scheduled requests into the set it
# passes to ``set_active_adapters`` (see ``step_lora_requests``).
INPUT_BATCH = "v1/worker/gpu_input_batch.py InputBatch.make_lora_inputs"
LORA_STATE = "v1/worker/gpu/lora_utils.py LoraState.get_activate_loras"


@attrs.frozen
class Release:
    """What one range of releases loads and needs; a row holds from ``first`` to the next row."""

    first: tuple[int, int, int]
    model_manager: tuple[str, str]  # (file under vllm/, module name)
    standins: tuple[str, ...]  # stand-in modules beyond COMMON_STANDINS
    padding_modules: bool  # WorkerLoRAManager takes embedding_padding_modules
    manager_takes_config: bool  # create_lora_manager(model, vllm_config)
    step_set: str  # INPUT_BATCH or LORA_STATE


def _next(
    row: Release,
    first: tuple[int, int, int],
    *,
    add: tuple[str, ...] = (),
    drop: tuple[str, ...] = (),
    **changed: Any,
) -> Release:
    """``row`` as it holds from ``first`` on: stand-in modules added and dropped, fields changed."""
    unknown = set(drop) - set(row.standins)
    assert not unknown, f"{first}: drops stand-ins the row before lacks: {unknown}"
    standins = tuple(sorted((set(row.standins) - set(drop)) | set(add)))
    return attrs.evolve(row, first=first, standins=standins, **changed)


_0_11 = Release(
    first=(0, 11, 1),
    model_manager=("lora/models.py", "vllm.lora.models"),
    standins=(
        "regex",
        "safetensors.torch",
        "vllm.model_executor.model_loader.tensorizer",
        "vllm.model_executor.models.interfaces",
        "vllm.utils.platform_utils",
    ),
    padding_modules=True,
    manager_takes_config=False,
    step_set=INPUT_BATCH,
)
# 0.12.0: WorkerLoRAManager takes no embedding_padding_modules; models.py imports FusedMoE.
_0_12 = _next(
    _0_11, (0, 12, 0), add=("vllm.model_executor.layers.fused_moe",), padding_modules=False
)
# 0.13.0: models.py splits into model_manager.py and lora_model.py (LoRAModel, stood in),
# which takes the safetensors and tensorizer imports with it.
_0_13 = _next(
    _0_12,
    (0, 13, 0),
    add=("vllm.lora.lora_model",),
    drop=("safetensors.torch", "vllm.model_executor.model_loader.tensorizer"),
    model_manager=("lora/model_manager.py", "vllm.lora.model_manager"),
)
# 0.14.0: create_lora_manager(model, vllm_config); the model manager sizes a
# multimodal model's tower (MULTIMODAL_REGISTRY, v1/worker/utils.py MultiModalBudget).
_0_14 = _next(
    _0_13,
    (0, 14, 0),
    add=("vllm.multimodal", "vllm.v1.worker.utils"),
    manager_takes_config=True,
)
# 0.16.0: MultiModalBudget moves to vllm/multimodal/encoder_budget.py.
_0_16 = _next(
    _0_14, (0, 16, 0), add=("vllm.multimodal.encoder_budget",), drop=("vllm.v1.worker.utils",)
)
# 0.18.0: is_pooling_model comes from vllm.model_executor.models, not its
# interfaces module; the worker raises vllm.exceptions' LoRAAdapterNotFoundError.
_0_18 = _next(
    _0_16, (0, 18, 0), add=("vllm.exceptions",), drop=("vllm.model_executor.models.interfaces",)
)
# 0.19.0: the model manager no longer imports regex.
_0_19 = _next(_0_18, (0, 19, 0), drop=("regex",))
# 0.24.0: pinned memory is vllm.utils.torch_utils' PIN_MEMORY, not platform_utils'.
_0_24 = _next(
    _0_19, (0, 24, 0), add=("vllm.utils.torch_utils",), drop=("vllm.utils.platform_utils",)
)
# 0.28.0: the worker manager imports vllm.utils.gpu_sync_debug.
_0_28 = _next(_0_24, (0, 28, 0), add=("vllm.utils.gpu_sync_debug",))
# 0.33.0: the model manager imports the token pooler (pooler/tokwise.py).
_0_33 = _next(_0_28, (0, 33, 0), add=("vllm.model_executor.layers.pooler.tokwise",))
# 0.34.0 has no v1/worker/gpu_model_runner.py: its model runner is the
# former V2 one (v1/worker/gpu/model_runner.py), with its own LoraState.
_0_34 = _next(_0_33, (0, 34, 0), step_set=LORA_STATE)

# Each row checked on its first release and every release up to the next
# (bench/vllm_releases.py --slots-only loads and exercises all of them); a
# release after the newest row takes that row, and a file or name it lacks is
# named by the loader (CheckoutError).
RELEASES = (_0_11, _0_12, _0_13, _0_14, _0_16, _0_18, _0_19, _0_24, _0_28, _0_33, _0_34)

# The files loaded, in order; the model manager's place is the release's row.
REQUEST = ("lora/request.py", "vllm.lora.request")
CACHE = ("utils/cache.py", "vllm.utils.cache")
WORKER = ("lora/worker_manager.py", "vllm.lora.worker_manager")


def release_of(version: str) -> Release:
    """The row of ``RELEASES`` that ``version`` falls in.

    >>> release_of("0.33.1").step_set == INPUT_BATCH
    True
    >>> release_of("0.34.0rc1").first
    (0, 34, 0)
    """
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if found is None:
        raise CheckoutError(f"vLLM version {version!r} is not X.Y.Z")
    key = tuple(int(part) for part in found.groups())
    rows = [row for row in RELEASES if row.first <= key]
    if not rows:
        raise CheckoutError(
            f"vLLM {version}: peftlife loads the LoRA slot code from "
            f"{'.'.join(map(str, RELEASES[0].first))} on"
        )
    return rows[-1]


def package_version(package: Path) -> str:
    """The release a ``vllm`` package directory says it is (``vllm/_version.py``).

    >>> try:
    ...     package_version(Path("/nowhere/vllm"))
    ... except CheckoutError as err:
    ...     print(str(err).split(":")[0])
    no __version__ in /nowhere/vllm/_version.py
    """
    version = releases.package_version(package)
    if version is None:
        file = package / "_version.py"
        raise CheckoutError(f"no __version__ in {file}: give the release, Slots(path, version=...)")
    return version


@attrs.frozen
class SlotError:
    """An exception raised inside vLLM's slot code: where, in vLLM's words.

    ``file``, ``line`` and ``function`` are the innermost frame in vLLM's own
    files (``vllm/...``); ``standin`` names the peftlife stand-in that raised,
    when vLLM's code called into one that did.
    """

    exception: str
    message: str
    file: str
    line: int
    function: str
    standin: str | None = None

    def __str__(self) -> str:
        by = f" (in the stand-in {self.standin})" if self.standin else ""
        return f"{self.exception}: {self.message} at {self.file}:{self.line} in {self.function}{by}"


class SlotsRaised(Exception):
    """vLLM's slot code raised; ``error`` says what and where, ``__cause__`` is the exception."""

    def __init__(self, error: SlotError) -> None:
        super().__init__(str(error))
        self.error = error


# peftlife's own files: an exception raised in one came from a stand-in vLLM called.
_PEFTLIFE = str(Path(slot_standins.__file__).parents[3]) + os.sep


def _slot_error(err: BaseException, package: Path) -> SlotError:
    root = str(package) + os.sep
    walked = [
        (f.f_code.co_filename, line, f.f_code.co_name)
        for f, line in traceback.walk_tb(err.__traceback__)
    ]
    ours = [frame for frame in walked if frame[0].startswith(root)]
    file, line, function = ours[-1] if ours else walked[-1]
    innermost = walked[-1]
    raised_by_standin = innermost not in ours and innermost[0].startswith(_PEFTLIFE)
    shown = "vllm/" + file[len(root) :] if file.startswith(root) else file
    standin = innermost[2] if raised_by_standin else None
    return SlotError(type(err).__name__, str(err), shown, line, function, standin)


@attrs.frozen
class SlotState:
    """The slot managers read back: GPU slots, the CPU cache, pins, weight versions.

    ``gpu`` and ``cpu`` are in vLLM's LRU order, least recently used first.
    ``versions`` is the weight version of each adapter in a GPU slot (None: in
    a slot but not in the CPU cache, which vLLM's code should never leave).
    ``kernel`` is the slot table and per-token adapter ids the punica wrapper
    was last given (None before any step's mapping).
    """

    slots: tuple[int | None, ...]
    gpu: tuple[int, ...]
    cpu: tuple[int, ...]
    pinned_gpu: frozenset[int]
    pinned_cpu: frozenset[int]
    versions: dict[int, int | None]
    names: dict[int, tuple[str, str]]  # id -> (name, path) of each adapter in the CPU cache
    kernel: slot_standins.KernelLayout | None


class StepSet(set):  # type: ignore[type-arg]
    """The step's adapter set, iterated in adapter id order.

    vLLM's worker iterates the set it is given (``_apply_adapters``), and the
    order decides which adapter takes which free slot. A ``set`` of
    ``LoRARequest``s iterates in hash order, and their hashes (of the name)
    change from process to process (``PYTHONHASHSEED``); a fixed order is one
    of the orders vLLM may see and makes a run replayable.
    """

    def __iter__(self) -> Iterator[Any]:
        return iter(sorted(super().__iter__(), key=lambda r: (r.lora_int_id, r.lora_name)))


def step_lora_requests(release: Release, scheduled: Iterable[Any]) -> set[Any]:
    """The set the model runner passes to ``set_active_adapters`` for a step.

    ``scheduled`` holds each scheduled request's ``lora_request`` (None for the
    base model) in the order the requests joined the batch. Up to 0.33:
    ``InputBatch.add_request`` (``v1/worker/gpu_input_batch.py``) keeps one
    ``LoRARequest`` per adapter id, the one of the request added last, and
    ``make_lora_inputs`` returns ``set()`` of those. From 0.34.0:
    ``LoraState.get_activate_loras`` (``v1/worker/gpu/lora_utils.py``) adds
    each scheduled request's ``LoRARequest`` to a set. Either way, which two
    requests count as one adapter is vLLM's own ``LoRARequest.__eq__``.
    The batch's dict may still hold, after a request left, the
    ``LoRARequest`` of a departed request with the same id; this mirror takes
    only the scheduled ones, which is the same whenever requests sharing an id
    carry equal ``LoRARequest``s.
    """
    if release.step_set == INPUT_BATCH:
        by_id = {request.lora_int_id: request for request in scheduled if request}
        return set(by_id.values())
    return {request for request in scheduled if request is not None}


VOCAB_SIZE = 32  # read by the managers' constructors; no embedding layer uses it here
DEVICE = "cpu"  # the ``torch.device`` the managers keep; nothing is placed on it


def _vllm_config(max_loras: int, max_cpu_loras: int, max_num_seqs: int) -> Fields:
    """The configuration fields the slot managers read, and only those."""
    text_config = Fields("text_config", max_position_embeddings=4096)
    return Fields(
        "vllm_config",
        scheduler_config=Fields(
            "scheduler_config", max_num_seqs=max_num_seqs, max_num_batched_tokens=8 * max_num_seqs
        ),
        model_config=Fields(
            "model_config",
            get_vocab_size=lambda: VOCAB_SIZE,
            hf_config=Fields("hf_config", get_text_config=lambda: text_config),
            is_encoder_decoder=False,
        ),
        lora_config=Fields(
            "lora_config",
            max_loras=max_loras,
            max_cpu_loras=max_cpu_loras,
            max_lora_rank=8,
            lora_dtype="auto",
            lora_extra_vocab_size=0,  # 0.11.1's extra vocabulary, off
            target_modules=None,
            fully_sharded_loras=False,
            enable_tower_connector_lora=False,
            enable_mixed_moe_lora_format=False,
            enable_moe_shared_loras=False,
        ),
        parallel_config=Fields("parallel_config", enable_expert_parallel=False),
    )


class Slots:
    """One release's LoRA slot managers, vLLM's own, with ``max_loras`` GPU slots
    and room for ``max_cpu_loras`` adapters in the CPU cache.

    >>> slots = Slots(Path("/nowhere"), max_loras=1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    peftlife.sut.adapters.upstream.loader.CheckoutError: no worker_manager.py at ...
    """

    def __init__(
        self,
        path: Path,
        max_loras: int,
        max_cpu_loras: int | None = None,
        *,
        version: str | None = None,
        max_num_seqs: int = 4,
    ) -> None:
        self.package = find_package(path, "vllm", WORKER[0], "vLLM")
        self.version = version or package_version(self.package)
        self.release = release_of(self.version)
        # vllm/config/lora.py LoRAConfig._validate_lora_config: the default and the bound.
        max_cpu_loras = max_loras if max_cpu_loras is None else max_cpu_loras
        if max_cpu_loras < max_loras:
            raise ValueError(f"max_cpu_loras ({max_cpu_loras}) must be >= max_loras ({max_loras})")
        self._wrappers: list[slot_standins.PunicaWrapper] = []
        self.loader = Loader(
            lambda misses: slot_standins.build(
                misses, COMMON_STANDINS + self.release.standins, self._wrappers
            ),
            release=f"vLLM {self.version}",
        )
        self.modules = self.loader.modules
        for relative, name in (REQUEST, CACHE, self.release.model_manager, WORKER):
            self.loader.load(self.package / relative, name)
        self.lora_request_class: type = self.modules[REQUEST[1]].LoRARequest
        self.files = slot_standins.AdapterFiles()
        config = _vllm_config(max_loras, max_cpu_loras, max_num_seqs)
        self.worker: Any = self._vllm(lambda: self._build_worker(config))

    def _build_worker(self, config: Fields) -> Any:
        # v1/worker/lora_model_runner_mixin.py LoRAModelRunnerMixin.load_lora_model
        worker_class = self.modules[WORKER[1]].LRUCacheWorkerLoRAManager
        padding: tuple[list[str], ...] = ([],) if self.release.padding_modules else ()
        worker = worker_class(config, DEVICE, {}, *padding)
        worker._load_adapter = self.files.load  # the weight loader, the one method stood in
        model = slot_standins.LoRAFreeModel()
        if self.release.manager_takes_config:
            worker.create_lora_manager(model, config)
        else:
            worker.create_lora_manager(model)
        return worker

    def installed(self) -> AbstractContextManager[None]:
        """The release's modules in ``sys.modules`` for the block, and only then."""
        return self.loader.installed()

    def _vllm(self, fn: Callable[[], T]) -> T:
        """``fn()``, a call into vLLM's slot code; what it raises becomes ``SlotsRaised``."""
        with self.installed():
            try:
                return fn()
            except Exception as err:  # vLLM's code is the system under test
                raise SlotsRaised(_slot_error(err, self.package)) from err

    # ---- the model runner's calls (v1/worker/lora_model_runner_mixin.py) ----

    def lora_request(
        self, name: str, lora_id: int, path: str | None = None, *, load_inplace: bool = False
    ) -> Any:
        """vLLM's own ``LoRARequest`` for adapter ``name`` with id ``lora_id``."""
        extra = {"load_inplace": True} if load_inplace else {}
        fields: tuple[str, ...] = getattr(self.lora_request_class, "__struct_fields__", ())
        if load_inplace and "load_inplace" not in fields:
            raise CheckoutError(
                f"vLLM {self.version}'s LoRARequest (vllm/lora/request.py) has no load_inplace"
            )
        cls = self.lora_request_class
        return self._vllm(lambda: cls(name, lora_id, path or f"/adapters/{name}", **extra))

    def apply(self, step_lora_requests: set[Any], token_lora_mapping: Sequence[int] = ()) -> None:
        """One step's ``set_active_adapters``, as ``_set_active_loras`` makes it.

        ``token_lora_mapping`` is each scheduled token's adapter id (0: the base
        model); left empty, one token per adapter of the set.
        """
        tokens = tuple(token_lora_mapping) or tuple(
            sorted(request.lora_int_id for request in step_lora_requests)
        )
        self._set_active_loras(tokens, tokens, step_lora_requests)

    def apply_step(self, scheduled: Sequence[tuple[Any, int]]) -> set[Any]:
        """A step's scheduled requests, each ``(lora_request or None, tokens)`` in
        batch order, through the model runner to the slots; returns the set applied.

        As ``set_active_loras`` / ``make_lora_inputs`` build it: each token has
        its request's adapter id, each request one sampled row.
        """
        requests = step_lora_requests(self.release, (lora for lora, _ in scheduled))
        ids = [lora.lora_int_id if lora else 0 for lora, _ in scheduled]
        tokens = tuple(
            i for i, (_, count) in zip(ids, scheduled, strict=True) for _ in range(count)
        )
        self._set_active_loras(tuple(ids), tokens, requests)
        return requests

    def _set_active_loras(
        self, prompt_mapping: tuple[int, ...], token_mapping: tuple[int, ...], requests: set[Any]
    ) -> None:
        # LoRAModelRunnerMixin._set_active_loras: is_prefill=True on every step.
        mapping = slot_standins.LoRAMapping(token_mapping, prompt_mapping, is_prefill=True)
        step = StepSet(requests)
        self._vllm(lambda: self.worker.set_active_adapters(step, mapping))

    def add(self, lora_request: Any) -> bool:
        """``add_lora``: vLLM's ``add_adapter``."""
        return bool(self._vllm(lambda: self.worker.add_adapter(lora_request)))

    def reload(self, name: str, lora_id: int, path: str | None = None) -> bool:
        """New weights written at the adapter's path, then ``add_lora`` with ``load_inplace``."""
        request = self.lora_request(name, lora_id, path, load_inplace=True)
        self.files.write(request.lora_name, request.lora_path)
        return self.add(request)

    def remove(self, lora_id: int) -> bool:
        """``remove_lora``: vLLM's ``remove_adapter``."""
        return bool(self._vllm(lambda: self.worker.remove_adapter(lora_id)))

    def pin(self, lora_id: int) -> bool:
        """``pin_lora``: vLLM's ``pin_adapter``."""
        return bool(self._vllm(lambda: self.worker.pin_adapter(lora_id)))

    def state(self) -> SlotState:
        """The slots as vLLM's managers hold them now, as plain values."""
        manager = self.worker._adapter_manager
        cpu = dict(manager.list_adapters())  # vLLM's own read: id -> LoRAModel, LRU order
        slots = tuple(manager.lora_index_to_id)
        layouts = self._wrappers[0].layouts if self._wrappers else []
        return SlotState(
            slots=slots,
            gpu=tuple(manager._active_adapters.order),
            cpu=tuple(cpu),
            pinned_gpu=frozenset(manager._active_adapters.pinned_items),
            pinned_cpu=frozenset(manager._registered_adapters.pinned_items),
            versions={i: cpu[i].version if i in cpu else None for i in slots if i is not None},
            names={i: (model.name, model.path) for i, model in cpu.items()},
            kernel=layouts[-1] if layouts else None,
        )


def set_active_loras(
    slots: Slots,
    prompt_mapping: Sequence[int],
    token_mapping: Sequence[int],
    lora_requests: set[Any],
) -> None:
    """The model runner's ``_set_active_loras`` with mappings it made itself.

    For a caller that runs the runner's own ``make_lora_inputs`` (the driver's
    ``LoraState``): its three results go to the slots as they are, where
    ``apply_step`` would assemble them again. For example, one request of
    adapter 1 with three tokens scheduled:
    ``set_active_loras(slots, (1,), (1, 1, 1), {slots.lora_request("a", 1)})``.
    """
    prompts = tuple(int(i) for i in prompt_mapping)
    tokens = tuple(int(i) for i in token_mapping)
    slots._set_active_loras(prompts, tokens, lora_requests)


def raised_at(err: BaseException, package: Path) -> SlotError:
    """Where in ``package`` (a ``vllm`` directory) an exception was raised, as ``SlotError``
    says it: for code beside the slot managers (the scheduler, the KV cache
    manager) that the same caller runs.

    >>> try:
    ...     raise ValueError("bad")
    ... except ValueError as err:
    ...     raised_at(err, Path("/nowhere")).message
    'bad'
    """
    return _slot_error(err, package)
