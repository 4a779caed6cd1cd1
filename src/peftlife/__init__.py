"""peftlife: property-based lifecycle tests for KV-cache and LoRA-adapter schedulers."""

from peftlife.search.machine import LifecycleFailure, lifecycle_machine
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.engine import Engine, EngineConfig
from peftlife.world.protocol import Environment, Scheduler, SchedulerConfig, SchedulerOutput
from peftlife.world.request import LlmRequestState, Request

__all__ = [
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
    "lifecycle_machine",
]
