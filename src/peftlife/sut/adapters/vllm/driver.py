"""Drive a loaded vLLM ``Scheduler`` and its real KV cache manager on a tiny configuration.

The driver plays vLLM's engine core and model runner around the real
scheduler: it builds the configuration objects the scheduler reads (only the
fields it reads, with connectors, multimodal inputs, speculative decoding and
statistics off; prefix caching as ``TinyConfig`` says), the ``KVCacheConfig``
of one full-attention group as the engine core does, and, with prefix caching
on, the engine core's block hasher (``init_none_hash`` and
``get_request_block_hasher`` over sha256). It adds requests (the checkout's own
``Request`` class, optionally with a LoRA adapter and a cache salt), and each
step calls ``schedule()``, reads the decisions and the block pool back, and
calls ``update_from_output()`` with one sampled token for every request whose
prompt is complete, as the model runner would.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from peftlife.sut.adapters.vllm.checkout import Checkout
from peftlife.sut.adapters.vllm.releases import Additions

HASH = "sha256"  # the prefix-caching hash vLLM's engine core picks by this name
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
    enable_prefix_caching: bool = False


@attrs.frozen
class LoRARequest:
    """Stands for ``vllm/lora/request.py``'s ``LoRARequest``.

    The scheduler's cap counts its id; the block hash keys on its name and path.
    """

    lora_name: str
    lora_int_id: int
    lora_path: str = ""


# Stands for vllm/sampling_params.py's ``SamplingParams``: the fields ``Request`` and
# ``check_stop`` read, as a ``Fields`` (a release range adds its own, releases.py).
SAMPLING = {
    "min_tokens": 0,
    "eos_token_id": None,
    "stop_token_ids": (),
    "extra_args": None,
    "skip_reading_prefix_cache": None,
    "repetition_detection": None,
    "num_logprobs": None,
}


@attrs.frozen
class Pool:
    """The real ``BlockPool`` and the full-attention manager's holdings, as plain values."""

    num_blocks: int
    null_block: int  # the block id BlockPool keeps as its null block
    num_free: int  # the free queue's own count (``num_free_blocks``)
    free_queue: tuple[int, ...]  # block ids walked from the free queue's head
    ref_counts: tuple[int, ...]  # ``ref_cnt`` by block id
    holders: dict[str, tuple[int, ...]]  # request id -> block ids in ``req_to_blocks``
    hashed: frozenset[int]  # block ids carrying a block hash (prefix-cache entries)


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
    cached_tokens: dict[str, int]  # new request id -> tokens it found in the prefix cache
    pool: Pool  # after schedule()
    live: frozenset[str]  # requests the scheduler holds after schedule()
    running: tuple[str, ...]  # the running queue after the step's output
    waiting: tuple[str, ...]  # the waiting queue after the step's output
    pool_after: Pool  # after the step's output
    live_after: frozenset[str]  # requests the scheduler holds after the step's output


def _adapters(requests: Iterable[Any]) -> frozenset[int]:
    return frozenset(r.lora_request.lora_int_id for r in requests if r.lora_request is not None)


def _read_pool(manager: Any) -> Pool:
    """The state of a real ``KVCacheManager``'s pool (one KV cache group)."""
    pool = manager.block_pool
    free_queue = []
    block = pool.free_block_queue.fake_free_list_head.next_free_block
    # Bounded by the pool's size, so a corrupt (cyclic) list cannot hang the walk.
    for _ in range(len(pool.blocks) + 1):
        if block is None or block is pool.free_block_queue.fake_free_list_tail:
            break
        free_queue.append(block.block_id)
        block = block.next_free_block
    (single_type,) = manager.coordinator.single_type_managers
    return Pool(
        num_blocks=len(pool.blocks),
        null_block=pool.null_block.block_id,
        num_free=pool.free_block_queue.num_free_blocks,
        free_queue=tuple(free_queue),
        ref_counts=tuple(b.ref_cnt for b in pool.blocks),
        holders={r: tuple(b.block_id for b in bs) for r, bs in single_type.req_to_blocks.items()},
        hashed=frozenset(b.block_id for b in pool.blocks if b.block_hash is not None),
    )


def _vllm_config(config: TinyConfig, release: Additions) -> Fields:
    off = None
    return Fields(
        "vllm_config",
        **release.fields_of("vllm_config"),
        scheduler_config=Fields(
            "scheduler_config",
            **release.fields_of("scheduler_config"),
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
            enable_prefix_caching=config.enable_prefix_caching,
            prefix_caching_hash_algo=HASH,
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


def _kv_cache_config(checkout: Checkout, config: TinyConfig) -> Any:
    """One full-attention group of one layer, built from the release's own classes."""
    spec = checkout.module("vllm.v1.kv_cache_interface")
    torch = checkout.module("torch")
    attention = spec.FullAttentionSpec(
        block_size=config.block_size, num_kv_heads=1, head_size=8, dtype=torch.float16
    )
    return spec.KVCacheConfig(
        num_blocks=config.num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[spec.KVCacheGroupSpec(["layer0"], attention)],
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
                vllm_config=_vllm_config(config, checkout.release),
                kv_cache_config=_kv_cache_config(checkout, config),
                structured_output_manager=StructuredOutputManager(),
                block_size=config.block_size,
            )
            self.block_hasher = self._block_hasher() if config.enable_prefix_caching else None
        # Preempted and not yet scheduled again: how a resumed request is told from
        # a new one (0.33.0 sends it among the cached requests, 0.34.0 among the new).
        self.preempted: set[str] = set()

    def _block_hasher(self) -> Any:
        """As ``EngineCore.__init__`` builds it when prefix caching is on."""
        utils = self.checkout.module("vllm.v1.core.kv_cache_utils")
        hash_fn = self.checkout.module("vllm.utils.hashing").get_hash_fn_by_name(HASH)
        utils.init_none_hash(hash_fn)
        return utils.get_request_block_hasher(self.scheduler.hash_block_size, hash_fn)

    @property
    def pool(self) -> Pool:
        with self.checkout.installed():
            return _read_pool(self.scheduler.kv_cache_manager)

    def add(
        self,
        request_id: str,
        prompt_len: int,
        max_tokens: int,
        adapter: int = 0,
        *,
        prompt: Sequence[int] | None = None,
        cache_salt: str | None = None,
    ) -> None:
        """A request of ``prompt_len`` tokens; ``adapter`` > 0 is its LoRA adapter's id.

        The prompt is ``1, 2, ..., prompt_len`` unless ``prompt`` gives it, so
        any two default prompts share a prefix.
        """
        lora = (
            LoRARequest(f"adapter-{adapter}", adapter, f"/adapters/{adapter}") if adapter else None
        )
        tokens = list(prompt) if prompt is not None else list(range(1, prompt_len + 1))
        with self.checkout.installed():
            request = self.checkout.request_class(
                request_id=request_id,
                prompt_token_ids=tokens,
                sampling_params=Fields(
                    "sampling_params",
                    max_tokens=max_tokens,
                    **SAMPLING,
                    **self.checkout.release.fields_of("sampling_params"),
                ),
                pooling_params=None,
                lora_request=lora,
                cache_salt=cache_salt,
                arrival_time=0.0,
                block_hasher=self.block_hasher,
            )
            self.scheduler.add_request(request)

    def abort(self, request_id: str) -> None:
        """The client went away: ``finish_requests(id, FINISHED_ABORTED)``, as EngineCore does."""
        with self.checkout.installed():
            status = self.checkout.request_status.FINISHED_ABORTED
            self.scheduler.finish_requests(request_id, status)

    def step(self) -> Step:
        """One ``schedule()`` and its model output; the decisions read back."""
        with self.checkout.installed():
            output = self.scheduler.schedule()
            cached = output.scheduled_cached_reqs
            new_ids = [r.req_id for r in output.scheduled_new_reqs]
            requests = self.scheduler.requests
            manager = self.scheduler.kv_cache_manager
            step = Step(
                tokens=dict(output.num_scheduled_tokens),
                new=tuple(r for r in new_ids if r not in self.preempted),
                resumed=tuple(r for r in (*new_ids, *cached.req_ids) if r in self.preempted),
                preempted=tuple(sorted(output.preempted_req_ids or ())),
                finished=tuple(sorted(output.finished_req_ids)),
                adapters=_adapters(requests[r] for r in output.num_scheduled_tokens),
                running_adapters=_adapters(self.scheduler.running),
                computed={r: requests[r].num_computed_tokens for r in output.num_scheduled_tokens},
                # A new request's computed tokens as scheduled: its prefix-cache hit.
                cached_tokens={r.req_id: r.num_computed_tokens for r in output.scheduled_new_reqs},
                pool=_read_pool(manager),
                live=frozenset(requests),
                running=(),
                waiting=(),
                pool_after=_read_pool(manager),
                live_after=frozenset(),
            )
            self.preempted.difference_update(step.resumed)
            self.preempted.update(step.preempted)
            self.scheduler.update_from_output(output, self._model_output(output))
            return attrs.evolve(
                step,
                live_after=frozenset(self.scheduler.requests),
                running=tuple(r.request_id for r in self.scheduler.running),
                waiting=tuple(r.request_id for r in self.scheduler.waiting),
                pool_after=_read_pool(manager),
            )

    def _model_output(self, output: Any) -> Fields:
        """What the model runner returns: a token for each request past its prompt."""
        ids = list(output.num_scheduled_tokens)
        requests = self.scheduler.requests
        sampled = [
            [TOKEN] if requests[r].num_computed_tokens >= requests[r].num_tokens else []
            for r in ids
        ]
        release = self.checkout.release.fields_of("model_runner_output")
        if "req_ids" in release:
            release["req_ids"] = ids
        return Fields(
            "model_runner_output",
            **release,
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
