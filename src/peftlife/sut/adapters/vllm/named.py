"""A ``vllm:`` SUT string, resolved to a loaded ``Checkout``.

Three forms, as for ``trtllm:``:

* ``vllm:PATH``: a checkout's root, or an installed or unpacked ``vllm`` package;
* ``vllm:``: the installed ``vllm`` package, found without importing it;
* ``vllm:==X.Y.Z``: a release, fetched once from the package registry (each
  file checked against the wheel's ``RECORD``) into ``$PEFTLIFE_CACHE``
  (default ``~/.cache/peftlife``); with ``PEFTLIFE_OFFLINE`` set a release
  not yet there is refused, not fetched.

Whatever cannot be loaded is one ``CheckoutError`` line saying how to fix it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import attrs

from peftlife.sut.adapters.upstream import CheckoutError, package_locations
from peftlife.sut.adapters.upstream.release import COMPLETE
from peftlife.sut.adapters.vllm import releases
from peftlife.sut.adapters.vllm.checkout import SCHEDULER_FILE, Checkout
from peftlife.sut.adapters.vllm.release import cache_dir, release_files

PREFIX = "vllm:"
POINT_AT = "point at a checkout or an unpacked vllm package instead, vllm:PATH"


@attrs.frozen(eq=False)
class VllmSut:
    """A ``vllm:`` SUT string and the checkout it loaded (compared by identity, as ``Resolved``)."""

    spec: str
    checkout: Checkout

    def __str__(self) -> str:
        return self.spec


def resolve(spec: str) -> VllmSut:
    """Load the vLLM a ``vllm:`` string names; ``CheckoutError`` (one line) if it cannot.

    >>> try:
    ...     resolve("vllm:/nowhere")
    ... except CheckoutError as err:
    ...     print(str(err).split(":")[0])
    no scheduler.py at /nowhere/vllm/v1/core/sched/scheduler.py
    """
    where = spec.removeprefix(PREFIX)
    if where.startswith("=="):
        path = _release(where.removeprefix("=="))
    elif where:
        path = Path(where).expanduser()
    else:
        path = _installed()
    return VllmSut(spec, Checkout(path))


def _release(version: str) -> Path:
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise CheckoutError(f"vllm:=={version}: name a release as X.Y.Z, e.g. vllm:==0.34.0")
    if why := releases.unsupported(version):  # refused before its wheel is fetched
        raise CheckoutError(f"vLLM {version}: {why}")
    cache = cache_dir()
    if os.environ.get("PEFTLIFE_OFFLINE") and not (cache / f"vllm-{version}" / COMPLETE).is_file():
        raise CheckoutError(
            f"vllm=={version} is not in {cache} and PEFTLIFE_OFFLINE is set: fetch it once "
            f"online, or {POINT_AT}"
        )
    try:
        return release_files(version, cache)
    except CheckoutError as err:
        if "pip download" not in str(err):
            raise
        raise CheckoutError(
            f"cannot fetch vllm=={version} from the package registry (offline, or no such "
            f"release): {POINT_AT}"
        ) from err


def _installed() -> Path:
    for location in package_locations("vllm"):
        if (location / SCHEDULER_FILE).is_file():
            return location
    raise CheckoutError(
        "no installed vllm package with v1/core/sched/scheduler.py was found on this "
        f"Python's path: name a release, vllm:==X.Y.Z, or {POINT_AT}"
    )
