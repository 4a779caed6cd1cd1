"""A vLLM release's files, from the package registry, without installing vLLM.

The fetch and its ``RECORD`` check are the upstream kit's
(``upstream/release.py``); this names the package.
"""

from __future__ import annotations

import os
from pathlib import Path

from peftlife.sut.adapters.upstream import release
from peftlife.sut.adapters.upstream.release import COMPLETE, DOWNLOAD_SECONDS

__all__ = ["COMPLETE", "cache_dir", "release_files"]


def cache_dir() -> Path:
    """Where fetched releases are kept: ``$PEFTLIFE_CACHE``, else ``~/.cache/peftlife``.

    >>> os.environ.get("PEFTLIFE_CACHE") is not None or cache_dir().name == "peftlife"
    True
    """
    return Path(os.environ.get("PEFTLIFE_CACHE", Path.home() / ".cache" / "peftlife"))


def release_files(version: str, cache: Path, timeout: float = DOWNLOAD_SECONDS) -> Path:
    """The folder holding vLLM ``version``'s files (``vllm/...``), downloaded once into ``cache``.

    For example ``release_files("0.34.0", Path.home() / ".cache" / "peftlife")`` is
    ``~/.cache/peftlife/vllm-0.34.0``, which ``Checkout`` and ``Slots`` load.
    """
    return release.release_files("vllm", version, cache, timeout)
