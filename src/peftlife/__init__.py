"""peftlife: property-based lifecycle tests for KV-cache and LoRA-adapter schedulers.

The names below are loaded on first use (a module ``__getattr__``, as attrs
does): importing any part of peftlife imports this package first, and an
eager import here would make ``import peftlife.world.kv`` pay for Hypothesis,
rich and the whole search.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from peftlife.reports import CaseFailed, check_case
    from peftlife.search.failure import LifecycleFailure
    from peftlife.search.hunt import lifecycle_machine
    from peftlife.sut.reference import ReferenceScheduler
    from peftlife.world.config import EngineConfig
    from peftlife.world.engine import Engine
    from peftlife.world.kv import KVCacheManager
    from peftlife.world.peft import PeftCacheManager
    from peftlife.world.protocol import Environment, Scheduler, SchedulerConfig, SchedulerOutput
    from peftlife.world.request import LlmRequestState, Request

    __version__: str

__all__ = [
    "CaseFailed",
    "Engine",
    "EngineConfig",
    "Environment",
    "KVCacheManager",
    "LifecycleFailure",
    "LlmRequestState",
    "PeftCacheManager",
    "ReferenceScheduler",
    "Request",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerOutput",
    "check_case",
    "lifecycle_machine",
]

# The module each public name lives in.
_HOMES = {
    "CaseFailed": "peftlife.reports",
    "check_case": "peftlife.reports",
    "LifecycleFailure": "peftlife.search.failure",
    "lifecycle_machine": "peftlife.search.hunt",
    "ReferenceScheduler": "peftlife.sut.reference",
    "EngineConfig": "peftlife.world.config",
    "Engine": "peftlife.world.engine",
    "KVCacheManager": "peftlife.world.kv",
    "PeftCacheManager": "peftlife.world.peft",
    "Environment": "peftlife.world.protocol",
    "Scheduler": "peftlife.world.protocol",
    "SchedulerConfig": "peftlife.world.protocol",
    "SchedulerOutput": "peftlife.world.protocol",
    "LlmRequestState": "peftlife.world.request",
    "Request": "peftlife.world.request",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        # Read from the installed metadata only when asked: importlib.metadata is slow to load.
        from importlib.metadata import version

        value: Any = version("peftlife")
    elif name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # the next lookup finds it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})
