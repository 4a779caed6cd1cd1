"""Drive a loaded vLLM ``Scheduler`` through steps on a tiny configuration.

The driver plays vLLM's engine core and model runner around the real
scheduler: it builds the configuration objects the scheduler reads (only the
fields it reads, with connectors, multimodal inputs, speculative decoding,
prefix caching and statistics off), adds requests (the checkout's own
``Request`` class, optionally with a LoRA adapter), and each step calls
``schedule()``, reads the decisions back from the ``SchedulerOutput``, and
calls ``update_from_output()`` with one sampled token for every request whose
prompt is complete, as the model runner would.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from peftlife.sut.adapters.vllm.checkout import Checkout

TOKEN = 7  # every sampled token; no end-of-sequence token is set, so max_tokens ends a request


class Fields:
    """A configuration object holding exactly the given fields.

    A field the scheduler reads that is not here is an ``AttributeError``
    naming the object and the field, so a newer checkout says what it needs.

    >>> Fields("cache_config", block_size=4).block_size
    4
    >>> Fields("cache_config").num_gpu_blocks
    Traceback (most recent call last):
    ...
    AttributeError: cache_config has no field 'num_gpu_blocks' in peftlife's vLLM driver
    """

    def __init__(self, name: str, **fields: Any) -> None:
        self.__dict__.update(fields)
        self.__dict__["_name"] = name

    def __getattr__(self, field: str) -> Any:
        if field.startswith("__"):
            raise AttributeError(field)
        raise AttributeError(f"{self._name} has no field {field!r} in peftlife's vLLM driver")


@attrs.frozen
class TinyConfig:
    """The scheduler's limits: few blocks, few sequences, at most ``max_loras`` adapters."""

    block_size: int = 4
    num_blocks: int = 8
    max_num_seqs: int = 4
    max_num_batched_tokens: int = 64
    max_model_len: int = 64
    max_loras: int = 1
    enable_chunked_prefill: bool = True


@attrs.frozen
class LoRARequest:
    """The scheduler reads an adapter's id; its name and path are the worker's."""

    lora_name: str
    lora_int_id: int
    lora_path: str = ""


@attrs.frozen
class SamplingParams:
    """The fields ``Request`` and ``check_stop`` read."""

    max_tokens: int
    min_tokens: int = 0
    eos_token_id: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    extra_args: None = None
    skip_reading_prefix_cache: None = None
    repetition_detection: None = None
    num_logprobs: None = None


@attrs.frozen
class Step:
    """One ``schedule()`` as read back from its ``SchedulerOutput`` and the scheduler's queues."""

    tokens: dict[str, int]  # request id -> tokens scheduled this step
    new: tuple[str, ...]  # scheduled for the first time
    resumed: tuple[str, ...]  # scheduled again after a preemption
    preempted: tuple[str, ...]  # preempted by this step
    finished: tuple[str, ...]  # ended by the previous step's output
    adapters: frozenset[int]  # adapter ids of the requests scheduled this step
    running_adapters: frozenset[int]  # adapter ids of every running request after schedule()
    computed: dict[str, int]  # scheduled request id -> num_computed_tokens after schedule()
    held: dict[str, int]  # request id -> blocks it holds after schedule()
    running: tuple[str, ...]  # the running queue after the step's output
    waiting: tuple[str, ...]  # the waiting queue after the step's output
    free_blocks: int  # after the step's output
    held_after: int  # blocks held by all requests after the step's output


def _adapters(requests: Iterable[Any]) -> frozenset[int]:
    return frozenset(r.lora_request.lora_int_id for r in requests if r.lora_request is not None)


def _vllm_config(config: TinyConfig) -> Fields:
    off = None
    return Fields(
        "vllm_config",
        scheduler_config=Fields(
            "scheduler_config",
            max_num_seqs=config.max_num_seqs,
            max_num_active_seqs=None,
            max_num_scheduled_tokens=None,
            max_num_batched_tokens=config.max_num_batched_tokens,
            long_prefill_token_threshold=0,
            long_prefill_token_threshold_adaptive=False,
            enable_chunked_prefill=config.enable_chunked_prefill,
            policy="fcfs",
            prefill_schedule_interval=1,
            scheduler_reserve_full_isl=False,
            watermark=0.0,
            async_scheduling=False,
            disable_chunked_mm_input=False,
        ),
        cache_config=Fields(
            "cache_config",
            num_gpu_blocks=config.num_blocks,
            enable_prefix_caching=False,
            enable_mamba_shared_prefix_checkpoint=False,
            mamba_cache_mode="none",
        ),
        lora_config=Fields("lora_config", max_loras=config.max_loras),
        model_config=Fields(
            "model_config",
            uses_mrope=False,
            is_encoder_decoder=False,
            max_model_len=config.max_model_len,
            runner_type="generate",
            is_diffusion=False,
            supports_multimodal_inputs=False,
            return_sampling_mask=False,
        ),
        parallel_config=Fields(
            "parallel_config",
            data_parallel_index=0,
            data_parallel_size=1,
            pipeline_parallel_size=1,
            decode_context_parallel_size=1,
            prefill_context_parallel_size=1,
        ),
        observability_config=Fields(
            "observability_config",
            per_request_spec_decode_metrics="none",
            kv_cache_metrics=False,
            enable_mfu_metrics=False,
            enable_logging_iteration_details=False,
        ),
        ec_manager_config=Fields("ec_manager_config", get_encoder_cache_manager_obj=lambda: None),
        aux_output_config=Fields("aux_output_config", enabled=False),
        kv_events_config=off,
        kv_transfer_config=off,
        ec_transfer_config=off,
        speculative_config=off,
        is_mm_encoder_only=False,
        num_speculative_tokens=0,
        num_lookahead_tokens=0,
        num_prefill_lookahead_tokens=0,
        num_hash_lookahead_tokens=0,
        max_in_flight_tokens=None,
        max_concurrent_batches=1,
        use_v2_model_runner=False,
    )


def _kv_cache_config(config: TinyConfig) -> Fields:
    return Fields(
        "kv_cache_config",
        num_blocks=config.num_blocks,
        kv_cache_groups=[],
        hisparse_host_num_blocks=None,
        has_mamba_layers=False,
        needs_kv_cache_zeroing=False,
    )


class Driver:
    """A checkout's ``Scheduler`` on ``config``, stepped as vLLM's engine core steps it."""

    def __init__(self, checkout: Checkout, config: TinyConfig) -> None:
        self.checkout = checkout
        self.config = config
        self.model_runner_output = checkout.modules["vllm.v1.outputs"]
        from peftlife.sut.adapters.vllm.standins import StructuredOutputManager

        with checkout.installed():
            self.scheduler = checkout.scheduler_class(
                vllm_config=_vllm_config(config),
                kv_cache_config=_kv_cache_config(config),
                structured_output_manager=StructuredOutputManager(),
                block_size=config.block_size,
            )

    def add(self, request_id: str, prompt_len: int, max_tokens: int, adapter: int = 0) -> None:
        """A request of ``prompt_len`` tokens; ``adapter`` > 0 is its LoRA adapter's id."""
        lora = LoRARequest(f"adapter-{adapter}", adapter) if adapter else None
        with self.checkout.installed():
            request = self.checkout.request_class(
                request_id=request_id,
                prompt_token_ids=list(range(1, prompt_len + 1)),
                sampling_params=SamplingParams(max_tokens=max_tokens),
                pooling_params=None,
                lora_request=lora,
                arrival_time=0.0,
            )
            self.scheduler.add_request(request)

    def step(self) -> Step:
        """One ``schedule()`` and its model output; the decisions read back."""
        with self.checkout.installed():
            output = self.scheduler.schedule()
            cached = output.scheduled_cached_reqs
            requests = self.scheduler.requests
            pool = self.scheduler.kv_cache_manager
            step = Step(
                tokens=dict(output.num_scheduled_tokens),
                new=tuple(r.req_id for r in output.scheduled_new_reqs),
                resumed=tuple(r for r in cached.req_ids if r in cached.resumed_req_ids),
                preempted=tuple(sorted(output.preempted_req_ids)),
                finished=tuple(sorted(output.finished_req_ids)),
                adapters=_adapters(requests[r] for r in output.num_scheduled_tokens),
                running_adapters=_adapters(self.scheduler.running),
                computed={r: requests[r].num_computed_tokens for r in output.num_scheduled_tokens},
                held={r: len(blocks) for r, blocks in pool.held.items() if blocks},
                running=(),
                waiting=(),
                free_blocks=0,
                held_after=0,
            )
            self.scheduler.update_from_output(output, self._model_output(output))
            return attrs.evolve(
                step,
                running=tuple(r.request_id for r in self.scheduler.running),
                waiting=tuple(r.request_id for r in self.scheduler.waiting),
                free_blocks=len(pool.free_ids),
                held_after=sum(len(blocks) for blocks in pool.held.values()),
            )

    def _model_output(self, output: Any) -> Fields:
        """What the model runner returns: a token for each request past its prompt."""
        ids = list(output.num_scheduled_tokens)
        requests = self.scheduler.requests
        sampled = [
            [TOKEN] if requests[r].num_computed_tokens >= requests[r].num_tokens else []
            for r in ids
        ]
        return Fields(
            "model_runner_output",
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=sampled,
            logprobs=None,
            prompt_logprobs_dict={},
            prompt_token_id_logprobs_dict={},
            pooler_output=None,
            num_nans_in_logits=None,
            kv_connector_output=None,
            ec_connector_output=None,
            cudagraph_stats=None,
            aux_output_connector_output=None,
        )
