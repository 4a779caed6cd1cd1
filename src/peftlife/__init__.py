"""peftlife: property-based lifecycle tests for KV-cache and LoRA-adapter schedulers."""

from peftlife.engine import Engine, EngineConfig, Environment, SchedulerConfig
from peftlife.machine import LifecycleFailure, lifecycle_machine
from peftlife.request import LlmRequestState, Request
from peftlife.scheduler import ReferenceScheduler
from peftlife.sut import Scheduler, SchedulerOutput

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
