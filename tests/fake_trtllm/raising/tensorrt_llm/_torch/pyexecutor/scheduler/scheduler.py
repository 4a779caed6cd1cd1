"""Fake of TensorRT-LLM's scheduler.py whose SchedulerOutput is a dataclass with every field."""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from tensorrt_llm.logger import logger

from ..llm_request import LlmRequest

RequestList = list[LlmRequest]


@dataclass
class SchedulerOutput:
    context_requests: RequestList = field(default_factory=list)
    generation_requests: RequestList = field(default_factory=list)
    paused_requests: RequestList = field(default_factory=list)
    recompute_paused_requests: RequestList = field(default_factory=list)


class RequestScheduler(ABC):
    @abstractmethod
    def schedule_request(self, active_requests, inflight_request_ids): ...


def log(message):
    logger.debug(message)
