"""What differs between vLLM releases, declared once per range of releases.

A vLLM release adds files to the chain peftlife loads, names to the modules it
stands in for, and fields to the configuration and output objects the driver
hands the scheduler. Each ``Range`` says what its releases add; ``for_version``
merges every range a release falls in, in table order. A release outside the
table gets what the earliest range declares, and a name it needs that is
missing is the loader's one-line error naming the release, the file, the
module and the name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

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
)


@attrs.frozen
class Additions:
    """What one release adds over the common chain, every range it falls in merged."""

    version: str
    files: tuple[tuple[str, str], ...]
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
        standins=_merged([r.standins for r in ranges]),
        fields=_merged([r.fields for r in ranges]),
    )
