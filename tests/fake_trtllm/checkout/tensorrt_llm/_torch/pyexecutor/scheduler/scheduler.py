"""Fake of TensorRT-LLM's scheduler.py: the shared types and helpers scheduler_v2.py imports.

Written for peftlife's tests; it imports what upstream's file imports, at module level.
"""

from abc import ABC, abstractmethod
from collections import namedtuple
from typing import TypeAlias

from strenum import StrEnum
from tensorrt_llm.bindings import internal as tb_internal
from tensorrt_llm.llmapi.llm_args import CapacitySchedulerPolicy
from tensorrt_llm.logger import logger

from ..llm_request import (
    LlmRequest,
    LlmRequestState,
    get_multimodal_encoder_token_lengths,
    is_multimodal_encoder_ready,
)

RequestList = list[LlmRequest]
PrefixReuseSummary: TypeAlias = tb_internal.batch_manager.PrefixReuseSummary
DEFAULT_POLICY = CapacitySchedulerPolicy.MAX_UTILIZATION
MULTIMODAL_HELPERS = (get_multimodal_encoder_token_lengths, is_multimodal_encoder_ready)


class PolicyName(StrEnum):
    MAX_UTILIZATION = "MAX_UTILIZATION"


# Older upstream files have no recompute_paused_requests field: the adapter adds it.
SchedulerOutput = namedtuple(
    "SchedulerOutput",
    [
        "encoder_requests",
        "context_requests",
        "generation_requests",
        "paused_requests",
        "fitting_disagg_gen_init_requests",
        "num_fitting_requests",
    ],
    defaults=[0],
)


def _get_lora_task_id(req):
    task = getattr(req, "lora_task_id", None)
    return (0, 0) if task is None else (1, task)


def _get_forced_context_chunk_size(req):
    return req.context_remaining_length


def _is_forced_context_chunk_boundary(req, chunk_size):
    return chunk_size >= req.context_remaining_length


def drop_decoder_context_requests_waiting_for_encoder_output(requests):
    kept = []
    for req in requests:
        event = getattr(req, "py_encoder_output_ready_event", None)
        if req.is_context_init_state and event is not None and not event.query():
            logger.debug("request %s waits for its encoder", req.py_request_id)
            continue
        kept.append(req)
    return kept


class RequestScheduler(ABC):
    @abstractmethod
    def schedule_request(self, active_requests, inflight_request_ids): ...

    def is_schedulable(self, req):
        return (
            LlmRequestState.CONTEXT_INIT.value
            <= req.state_value
            < LlmRequestState.GENERATION_TO_COMPLETE.value
        )
