"""What differs between vLLM releases, declared once per range of releases.

A vLLM release adds files to the chain peftlife loads, names to the modules it
stands in for, and fields to the configuration and output objects the driver
hands the scheduler, and drops files of the common chain older releases lack.
Each ``Range`` says what its releases add, the table newest first (by where a
range ends, then where it starts); ``for_version`` merges every range a
release falls in, in table order, and no two of them may declare one name
twice. A release older than
``OLDEST`` differs in kind (its engine runs another model runner) and is
refused in one line (``unsupported``); a name a supported release needs that
is missing is the loader's one-line error naming the release, the file, the
module and the name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from peftlife.sut.adapters.vllm.standins import opaque, unreached

Version = tuple[int, ...]


def parse(version: str) -> Version:
    """A release's number as a tuple, its pre-release or local tail dropped.

    >>> parse("0.34.0rc1.dev12+g62d4bc3")
    (0, 34, 0)
    """
    found = re.match(r"\d+(\.\d+)*", version)
    if found is None:
        raise ValueError(f"{version!r} is not a vLLM version number")
    return tuple(int(part) for part in found.group(0).split("."))


def package_version(package: Path) -> str | None:
    """The version ``vllm/_version.py`` records (written at build time), read without running it.

    A source checkout that was never built has no ``_version.py``: None.

    >>> package_version(Path("/nowhere/vllm")) is None
    True
    """
    file = package / "_version.py"
    if not file.is_file():
        return None
    found = re.search(
        r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", file.read_text()
    )
    return found.group(1) if found else None


@attrs.frozen
class Range:
    """Releases from ``first`` up to, not including, ``until`` (None: to the newest)."""

    first: Version
    until: Version | None
    files: tuple[tuple[str, str], ...] = ()  # (file under vllm/, module), loaded before request.py
    # Files of the common chain (checkout.FILES, by path under vllm/) the releases lack.
    without: tuple[str, ...] = ()
    standins: Mapping[str, Mapping[str, object]] = attrs.field(factory=dict)
    # The driver's configuration and output objects, by name: the fields added.
    fields: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)

    def holds(self, version: Version) -> bool:
        return self.first <= version and (self.until is None or version < self.until)


RANGES = (
    # 0.34.0: request.py keeps its tokens in vllm.v1.token_buffer (numpy), the
    # KV chain untracks its lists from the garbage collector (gc_utils), the
    # scheduler reads its cache-aware admission, KV-load and watermark fields,
    # the output its request ids as a list.
    Range(
        first=(0, 34, 0),
        until=None,
        files=(
            ("utils/collection_utils.py", "vllm.utils.collection_utils"),
            ("utils/gc_utils.py", "vllm.utils.gc_utils"),
            ("v1/token_buffer.py", "vllm.v1.token_buffer"),
        ),
        fields={
            # vLLM's defaults (vllm/config/scheduler.py): no cache-aware reordering.
            "scheduler_config": {
                "cache_aware_admission_window": 0,
                "cache_aware_admission_threshold": 0.5,
                "max_num_inflight_kv_loads": None,
            },
            "vllm_config": {"watermark_config": None},
            "model_runner_output": {"req_ids": None},  # filled per step by the driver
        },
    ),
    # 0.30.0 to 0.32.0: kv_cache_utils.py lays out HiSparse KV groups with
    # vllm.v1.hisparse.layout (kv_transfer config, HiSparse runtime); only a
    # HiSparse attention config, which the tiny one lacks, reaches them.
    Range(
        first=(0, 30, 0),
        until=(0, 33, 0),
        standins={
            "vllm.v1.hisparse.layout": {
                name: unreached(name)
                for name in (
                    "get_hisparse_gpu_memory_usage",
                    "get_hisparse_host_pool_bytes",
                    "get_hisparse_kv_cache_config",
                    "get_hisparse_kv_cache_groups",
                )
            }
        },
    ),
    # To 0.32.0: kv_cache_utils.py formats its out-of-memory message with
    # vllm.utils.mem_utils (torch, psutil).
    Range(
        first=(0,),
        until=(0, 33, 0),
        standins={"vllm.utils.mem_utils": {"format_gib": unreached("format_gib")}},
    ),
    # To 0.30.0: the scheduler imports the MoE routed-experts capturer (torch),
    # used only with model_config.enable_return_routed_experts, and reads the
    # output's routed_experts; 0.30.0 alone reads Mamba's fine-grained prefix
    # cache switch (vLLM's defaults: off, none).
    Range(
        first=(0,),
        until=(0, 31, 0),
        standins={
            "vllm.model_executor.layers.fused_moe.routed_experts_capturer": {
                "RoutedExpertsManager": opaque("RoutedExpertsManager")
            }
        },
        fields={
            "cache_config": {"enable_mamba_fine_grained_prefix_cache": False},
            "model_config": {"enable_return_routed_experts": False},
            "model_runner_output": {"routed_experts": None},
        },
    ),
    # 0.28.0 and 0.29.0: the scheduler reads the model's XD-RoPE switch and
    # whether the engine is encoder-only (vLLM's defaults for a decoder: off).
    Range(
        first=(0, 28, 0),
        until=(0, 30, 0),
        fields={"model_config": {"uses_xdrope": False}, "vllm_config": {"is_encoder_only": False}},
    ),
    # 0.26.0 to 0.29.0: the scheduler asserts the structured-output grammar's
    # type (isinstance, on a grammar's path: no request here has one).
    Range(
        first=(0, 26, 0),
        until=(0, 30, 0),
        standins={
            "vllm.v1.structured_output": {
                "StructuredOutputGrammar": opaque("StructuredOutputGrammar")
            }
        },
    ),
    # To 0.29.0: no HiSparse block pool yet.
    Range(first=(0,), until=(0, 30, 0), without=("v1/hisparse/block_pool.py",)),
    # To 0.28.0: no kv_cache_layout.py yet (the KV specs carry no layout).
    Range(first=(0,), until=(0, 29, 0), without=("v1/kv_cache_layout.py",)),
    # To 0.27.1: the KV specs size NVFP4 caches with torch_utils (fp16 here: unused).
    Range(
        first=(0,),
        until=(0, 28, 0),
        standins={
            "vllm.utils.torch_utils": {
                "nvfp4_kv_cache_full_dim": unreached("nvfp4_kv_cache_full_dim")
            }
        },
    ),
    # To 0.22.1: no KV spec registry yet (kv_cache_interface.py holds the specs).
    Range(first=(0,), until=(0, 23, 0), without=("v1/kv_cache_spec_registry.py",)),
)


# The oldest release the driver steps. Up to 0.21.0 the scheduler takes its
# model runner from VLLM_USE_V2_MODEL_RUNNER, off by default: the engine runs
# the V1 runner (gpu_model_runner.py, its InputBatch's adapter mapping, resumed
# requests sent as cached ones), a different runner from the V2 one runner.py
# stands for; and 0.14.1 and older have no V2 runner's LoraState at all.
OLDEST: Version = (0, 22, 0)
BEFORE_OLDEST = (
    "the scheduler defaults to the V1 model runner (VLLM_USE_V2_MODEL_RUNNER off), "
    "which peftlife's vLLM driver does not model; the oldest release it drives is 0.22.0"
)


def unsupported(version: str | None) -> str | None:
    """Why the driver cannot step ``version``, or None when it can (an unversioned: newest).

    >>> unsupported("0.34.0") is None
    True
    >>> unsupported("0.21.0").startswith("the scheduler defaults to the V1")
    True
    """
    if version is not None and parse(version) < OLDEST:
        return BEFORE_OLDEST
    return None


@attrs.frozen
class Additions:
    """What one release adds over the common chain, every range it falls in merged."""

    version: str
    files: tuple[tuple[str, str], ...]
    without: frozenset[str]
    standins: Mapping[str, Mapping[str, object]]
    fields: Mapping[str, Mapping[str, Any]]

    def fields_of(self, name: str) -> dict[str, Any]:
        """The fields the release adds to the driver's object ``name`` (``"vllm_config"``)."""
        return dict(self.fields.get(name, {}))


def _merged(maps: list[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for one in maps:
        for name, values in one.items():
            merged.setdefault(name, {}).update(values)
    return merged


def for_version(version: str | None) -> Additions:
    """The additions of ``version``; None (an unbuilt checkout) is taken as the newest.

    >>> [f for f, _ in for_version("0.34.0").files][-1]
    'v1/token_buffer.py'
    >>> for_version("0.33.0").files
    ()
    """
    number = parse(version) if version else (10**6,)
    ranges = [r for r in RANGES if r.holds(number)]
    return Additions(
        version=version or "an unversioned checkout",
        files=tuple(f for r in ranges for f in r.files),
        without=frozenset(f for r in ranges for f in r.without),
        standins=_merged([r.standins for r in ranges]),
        fields=_merged([r.fields for r in ranges]),
    )
