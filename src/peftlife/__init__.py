"""peftlife: property-based lifecycle tests for KV-cache and LoRA-adapter schedulers."""

from importlib.metadata import version as _version

from peftlife.reports import CaseFailed, check_case
from peftlife.search.machine import LifecycleFailure, lifecycle_machine
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
from peftlife.world.protocol import Environment, Scheduler, SchedulerConfig, SchedulerOutput
from peftlife.world.request import LlmRequestState, Request

__version__ = _version("peftlife")

__all__ = [
    "CaseFailed",
    "Engine",
    "EngineConfig",
    "Environment",
    "LifecycleFailure",
    "LlmRequestState",
    "ReferenceScheduler",
    "Request",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerOutput",
    "check_case",
    "lifecycle_machine",
]
