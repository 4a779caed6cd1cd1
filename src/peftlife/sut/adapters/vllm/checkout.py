"""Load a vLLM checkout's scheduler and KV cache chain, unmodified, over the stand-ins.

``Checkout(path)`` finds ``vllm/v1/core/sched/scheduler.py`` under ``path`` (a
checkout's root, an installed or unpacked ``vllm`` package directory), reads
the release from ``vllm/_version.py``, then executes the upstream files of
``FILES`` (with those its release range adds, ``releases.py``) under their
real module names with the stand-ins installed: ``SamplingParams``,
``LoRARequest``, the request, the KV cache manager with its coordinator,
per-type managers, block pool and block hasher, the scheduler and its async
subclass, and the V2 model runner's adapter table (``LoraState``). As for
TensorRT-LLM (``upstream.Loader``), the loaded modules are kept by the
``Checkout`` object, not in ``sys.modules``, and ``installed()`` puts them back
for each call into them.

A file that imports a name the stand-ins lack raises ``CheckoutError`` naming
the release, the file, the module and the name. ``patches`` (a mutant) maps a
file to source lines and what each becomes, applied in memory before the file
is compiled; nothing on disk changes.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from peftlife.sut.adapters.upstream import CheckoutError, Loader, find_package
from peftlife.sut.adapters.vllm import releases, standins

# The upstream files every release loads, in load order (each imports only
# stand-ins and those before it); a release range's own files come first.
BASE = (
    ("envs.py", "vllm.envs"),
    ("utils/math_utils.py", "vllm.utils.math_utils"),
    ("utils/hashing.py", "vllm.utils.hashing"),
)
FILES = (
    ("exceptions.py", "vllm.exceptions"),
    ("sampling_params.py", "vllm.sampling_params"),
    ("lora/request.py", "vllm.lora.request"),
    ("v1/request.py", "vllm.v1.request"),
    ("v1/kv_cache_layout.py", "vllm.v1.kv_cache_layout"),
    ("v1/kv_cache_spec_registry.py", "vllm.v1.kv_cache_spec_registry"),
    ("v1/kv_cache_interface.py", "vllm.v1.kv_cache_interface"),
    ("v1/core/kv_cache_metrics.py", "vllm.v1.core.kv_cache_metrics"),
    ("v1/core/kv_cache_utils.py", "vllm.v1.core.kv_cache_utils"),
    ("v1/core/block_pool.py", "vllm.v1.core.block_pool"),
    ("v1/hisparse/block_pool.py", "vllm.v1.hisparse.block_pool"),
    ("v1/core/single_type_kv_cache_manager.py", "vllm.v1.core.single_type_kv_cache_manager"),
    ("v1/core/kv_cache_coordinator.py", "vllm.v1.core.kv_cache_coordinator"),
    ("v1/core/kv_cache_manager.py", "vllm.v1.core.kv_cache_manager"),
    ("v1/core/sched/interface.py", "vllm.v1.core.sched.interface"),
    ("v1/core/sched/request_queue.py", "vllm.v1.core.sched.request_queue"),
    ("v1/core/sched/utils.py", "vllm.v1.core.sched.utils"),
    ("v1/core/sched/output.py", "vllm.v1.core.sched.output"),
    ("v1/core/sched/scheduler.py", "vllm.v1.core.sched.scheduler"),
    ("v1/core/sched/async_scheduler.py", "vllm.v1.core.sched.async_scheduler"),
    # The V2 model runner's per-request adapter table (LoraState).
    ("v1/worker/gpu/lora_utils.py", "vllm.v1.worker.gpu.lora_utils"),
)
SCHEDULER = "vllm.v1.core.sched.scheduler"
Patch = tuple[str, str]  # one line of an upstream file, and what it becomes
SCHEDULER_FILE = "v1/core/sched/scheduler.py"


class Checkout:
    """One loaded checkout: its modules (stand-ins included) and its ``Scheduler`` class."""

    def __init__(self, path: Path, patches: Mapping[str, Sequence[Patch]] = {}) -> None:
        self.path = path
        # A file's one-line source patches (a mutant), applied before it is compiled.
        self.patches = patches
        self.package = find_package(path, "vllm", SCHEDULER_FILE, "vLLM")
        version = releases.package_version(self.package)
        why = releases.unsupported(version)
        if why is not None:
            raise CheckoutError(f"vLLM {version}: {why}")
        self.release = releases.for_version(version)
        self.loader = Loader(
            lambda misses: standins.build(self.release.standins, misses),
            release=f"vLLM {self.release.version}",
        )
        self.modules = self.loader.modules
        common = tuple(f for f in FILES if f[0] not in self.release.without)
        self.files = BASE + self.release.files + common
        for relative, name in self.files:
            self._load(self.package / relative, name, self.patches.get(relative, ()))
        self.scheduler_class: type = self.modules[SCHEDULER].Scheduler
        # What EngineCore builds with async scheduling on (SchedulerConfig.get_scheduler_cls).
        self.async_scheduler_class: type = self.modules[
            "vllm.v1.core.sched.async_scheduler"
        ].AsyncScheduler
        self.lora_request_class: type = self.modules["vllm.lora.request"].LoRARequest
        self.sampling_params_class: type = self.modules["vllm.sampling_params"].SamplingParams
        self.request_class: type = self.modules["vllm.v1.request"].Request
        self.request_status: Any = self.modules["vllm.v1.request"].RequestStatus

    def installed(self) -> AbstractContextManager[None]:
        """The checkout's modules in ``sys.modules`` for the block, and only then."""
        return self.loader.installed()

    def module(self, name: str) -> types.ModuleType:
        """A loaded module by its vLLM name (``vllm.v1.core.kv_cache_utils``)."""
        return self.modules[name]

    def _load(self, file: Path, name: str, patches: Sequence[Patch] = ()) -> None:
        source = self.loader.read(file)
        for old, new in patches:
            if source.count(old) != 1:
                raise self.loader.error(
                    f"the patch of {file} finds {source.count(old)} copies of {old!r}, not one"
                )
            source = source.replace(old, new)
        self.loader.load(file, name, source)
