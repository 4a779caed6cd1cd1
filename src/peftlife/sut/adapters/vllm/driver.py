"""Drive a loaded vLLM scheduler and its real KV cache manager as vLLM's engine core does.

The driver plays vLLM's engine core (``vllm/v1/engine/core.py``,
``EngineCore``) around the real scheduler, with the model runner of
``runner.py``: it builds the configuration objects the scheduler reads (only
the fields it reads, with connectors, multimodal inputs, speculative decoding
and statistics off), the ``KVCacheConfig`` of one full-attention group, and,
with prefix caching on, the engine core's block hasher (``init_none_hash`` and
``get_request_block_hasher`` over sha256). The scheduler is vLLM's
``Scheduler``, or its ``AsyncScheduler`` with async scheduling on, as
``SchedulerConfig.get_scheduler_cls`` picks. A user's actions are
``submit`` (the release's own ``Request``, ``SamplingParams`` and
``LoRARequest``; an adapter or the base model, a prompt, a cache salt, a
token budget, a priority), ``abort`` (between steps or during one) and
``draw_eos``; an operator's are ``add_lora``, ``reload_lora``, ``remove_lora``
and ``pin_lora`` on the worker's LoRA slot managers, vLLM's own
(``slots.py``), to which each launched batch's adapter set is applied as the
model runner applies it; each ``step()`` is one
call of the engine core's step function: ``EngineCore.step`` (schedule,
execute, update from the output) or, when more than one batch may be in
flight, ``EngineCore.step_with_batch_queue``. Each step reads back what the
scheduler decided, the real pool after ``schedule()`` and after the output,
every cache fill and prefix hit in between (``observe.py``), and the
worker's slots after they applied the step's adapter set.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeVar

import attrs

from peftlife.sut.adapters.vllm.checkout import Checkout
from peftlife.sut.adapters.vllm.observe import (
    CacheEvent,
    Identity,
    Pool,
    read_pool,
    watch_cache,
)
from peftlife.sut.adapters.vllm.releases import Additions
from peftlife.sut.adapters.vllm.runner import EOS, Batch, ModelRunner
from peftlife.sut.adapters.vllm.slots import Slots, SlotState, raised_at
from peftlife.sut.adapters.vllm.standins import Fields, StructuredOutputManager

T = TypeVar("T")

HASH = "sha256"  # the prefix-caching hash vLLM's engine core picks by this name


@attrs.frozen
class TinyConfig:
    """The engine's limits and modes: few blocks, few sequences, at most ``max_loras`` adapters."""

    block_size: int = 4
    num_blocks: int = 8
    max_num_seqs: int = 4
    max_num_batched_tokens: int = 64
    max_model_len: int = 64
    max_loras: int = 1
    max_cpu_loras: int | None = None  # adapters the worker's CPU cache holds; max_loras if None
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    policy: Literal["fcfs", "priority"] = "fcfs"
    async_scheduling: bool = False
    pipeline_parallel_size: int = 1


def max_concurrent_batches(config: TinyConfig) -> int:
    """How many batches the engine core keeps in flight: its batch queue's size.

    Stands for ``vllm/config/vllm.py``'s ``VllmConfig.max_concurrent_batches``
    (0.34.0; 0.33.0 with the V2 model runner): pipeline parallelism needs one
    batch per stage to fill the pipeline, async scheduling one more to overlap.
    One means no batch queue (``EngineCore.step``).

    >>> max_concurrent_batches(TinyConfig(async_scheduling=True, pipeline_parallel_size=3))
    4
    """
    pp_size = config.pipeline_parallel_size
    return pp_size + 1 if config.async_scheduling else pp_size


@attrs.frozen
class Step:
    """One call of the engine core's step function, as read back.

    A step with a batch queue may schedule a batch and take no output, or take
    the oldest batch's output; ``scheduled`` and ``processed`` say which.
    """

    scheduled: bool  # schedule() ran
    processed: bool  # a batch's output was taken (update_from_output)
    tokens: dict[str, int]  # request id -> tokens scheduled this step
    new: tuple[str, ...]  # scheduled for the first time
    resumed: tuple[str, ...]  # scheduled again after a preemption
    preempted: tuple[str, ...]  # preempted by this step
    finished: tuple[str, ...]  # ended by earlier outputs, told to the runner now
    adapters: frozenset[int]  # adapter ids of the requests scheduled this step
    running_adapters: frozenset[int]  # adapter ids of every running request after schedule()
    lora_requests: frozenset[Identity]  # the adapter set the model runner assembled
    needed: dict[str, Identity]  # scheduled request id -> the adapter its tokens run under
    slots: SlotState | None  # the worker's slots after applying the launched batch's set
    raised: str | None  # what vLLM's code raised in the step, and where (the engine died)
    weights: dict[tuple[str, str], int]  # (adapter name, path) -> newest weight version
    computed: dict[str, int]  # scheduled request id -> num_computed_tokens after schedule()
    cached_tokens: dict[str, int]  # new request id -> tokens it found in the prefix cache
    cache_events: tuple[CacheEvent, ...]  # cache fills and prefix hits, in call order
    pool: Pool  # after schedule()
    live: frozenset[str]  # requests the scheduler holds after schedule()
    in_flight: int  # batches launched and not yet taken, after the step
    taken: tuple[str, ...]  # the requests scheduled in the batch whose output was taken
    ended: dict[str, str]  # request id -> its finished status, for those the output ended
    running: tuple[str, ...]  # the running queue after the step
    waiting: tuple[str, ...]  # the waiting queue after the step
    pool_after: Pool  # after the step
    live_after: frozenset[str]  # requests the scheduler holds after the step


def _adapters(requests: Iterable[Any]) -> frozenset[int]:
    return frozenset(r.lora_request.lora_int_id for r in requests if r.lora_request is not None)


def _adapter(lora_request: Any) -> Identity:
    return Identity(lora_request.lora_name, lora_request.lora_int_id, lora_request.lora_path, None)


def _lora_identities(lora_requests: Iterable[Any]) -> frozenset[Identity]:
    return frozenset(_adapter(r) for r in lora_requests)


def _vllm_config(config: TinyConfig, release: Additions) -> Fields:
    off = None
    batches = max_concurrent_batches(config)
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
            policy=config.policy,
            prefill_schedule_interval=1,
            scheduler_reserve_full_isl=False,
            watermark=0.0,
            async_scheduling=config.async_scheduling,
            disable_chunked_mm_input=False,
        ),
        cache_config=Fields(
            "cache_config",
            **release.fields_of("cache_config"),
            num_gpu_blocks=config.num_blocks,
            enable_prefix_caching=config.enable_prefix_caching,
            prefix_caching_hash_algo=HASH,
            enable_mamba_shared_prefix_checkpoint=False,
            mamba_cache_mode="none",
        ),
        lora_config=Fields(
            "lora_config", **release.fields_of("lora_config"), max_loras=config.max_loras
        ),
        model_config=Fields(
            "model_config",
            **release.fields_of("model_config"),
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
            **release.fields_of("parallel_config"),
            data_parallel_index=0,
            data_parallel_size=1,
            pipeline_parallel_size=config.pipeline_parallel_size,
            decode_context_parallel_size=1,
            prefill_context_parallel_size=1,
        ),
        observability_config=Fields(
            "observability_config",
            **release.fields_of("observability_config"),
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
        max_in_flight_tokens=batches * config.max_num_batched_tokens,
        max_concurrent_batches=batches,
        # The runner peftlife stands for (runner.py): vLLM's default on both releases.
        use_v2_model_runner=True,
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
    """A checkout's scheduler on ``config``, stepped as vLLM's engine core steps it."""

    def __init__(self, checkout: Checkout, config: TinyConfig) -> None:
        self.checkout = checkout
        self.config = config
        scheduler_class = (
            checkout.async_scheduler_class if config.async_scheduling else checkout.scheduler_class
        )
        with checkout.installed():
            self.scheduler = scheduler_class(
                vllm_config=_vllm_config(config, checkout.release),
                kv_cache_config=_kv_cache_config(checkout, config),
                structured_output_manager=StructuredOutputManager(),
                block_size=config.block_size,
            )
            self.block_hasher = self._block_hasher() if config.enable_prefix_caching else None
        # The worker's slot managers (LoRAModelRunnerMixin.load_lora_model), vLLM's own.
        self.slots = Slots(
            checkout.package,
            max_loras=config.max_loras,
            max_cpu_loras=config.max_cpu_loras,
            version=checkout.release.version,
            max_num_seqs=config.max_num_seqs,
        )
        self.runner = ModelRunner(checkout, max_num_reqs=config.max_num_seqs, slots=self.slots)
        self.dead: str | None = None  # what killed the engine core, once something has
        # EngineCore.__init__: a batch queue only when more than one batch may be in
        # flight; new batches go in on the left, the oldest is taken from the right.
        self.batch_queue_size = max_concurrent_batches(config)
        self.batch_queue: deque[Batch] | None = (
            deque(maxlen=self.batch_queue_size) if self.batch_queue_size > 1 else None
        )
        self.cache_events: list[CacheEvent] = []
        self.aborts_queue: list[str] = []  # EngineCore.aborts_queue: aborts during a step
        self.input_aborts: list[str] = []  # their copies in the input queue, for after it
        watch_cache(self.scheduler.kv_cache_manager, self.cache_events)
        # Preempted and not yet scheduled again: how a resumed request is told from a
        # new one (the V2 model runner's output sends both among the new requests).
        self.preempted: set[str] = set()

    def _block_hasher(self) -> Any:
        """As ``EngineCore.__init__`` builds it when prefix caching is on."""
        utils = self.checkout.module("vllm.v1.core.kv_cache_utils")
        hash_fn = self.checkout.module("vllm.utils.hashing").get_hash_fn_by_name(HASH)
        utils.init_none_hash(hash_fn)
        # To 0.25.1 the scheduler keeps no hash_block_size: it hashes per block_size,
        # its default when the engine core passes none (as here).
        size = getattr(self.scheduler, "hash_block_size", self.config.block_size)
        return utils.get_request_block_hasher(size, hash_fn)

    @property
    def pool(self) -> Pool:
        with self.checkout.installed():
            return read_pool(self.scheduler.kv_cache_manager)

    @property
    def busy(self) -> bool:
        """What keeps the engine core's busy loop stepping: requests, or batches in flight.

        An engine core whose scheduler or worker raised has died (``EngineDeadError``):
        not busy, and not to be stepped again.
        """
        if self.dead is not None:
            return False
        with self.checkout.installed():
            return bool(self.scheduler.has_requests() or self.batch_queue)

    def lora_request(self, adapter: int, name: str | None = None, path: str | None = None) -> Any:
        """The release's ``LoRARequest`` for adapter id ``adapter`` (name and path by default)."""
        with self.checkout.installed():
            return self.checkout.lora_request_class(
                lora_name=name or f"adapter-{adapter}",
                lora_int_id=adapter,
                lora_path=path or f"/adapters/{name or adapter}",
            )

    def submit(
        self,
        request_id: str,
        prompt: Sequence[int],
        max_tokens: int,
        adapter: int = 0,
        *,
        adapter_name: str | None = None,
        adapter_path: str | None = None,
        cache_salt: str | None = None,
        priority: int = 0,
    ) -> None:
        """A request of ``prompt`` for ``max_tokens`` tokens; ``adapter`` > 0 is its LoRA id.

        Its ``SamplingParams`` is made as ``InputProcessor.process_inputs``
        (``vllm/v1/engine/input_processor.py``) makes it: the user's
        ``max_tokens``, then ``update_from_generation_config`` with the model's
        end-of-sequence token. Two prompts that start alike share a prefix.
        """
        lora = self.lora_request(adapter, adapter_name, adapter_path) if adapter else None
        with self.checkout.installed():
            sampling = self.checkout.sampling_params_class(max_tokens=max_tokens)
            sampling.update_from_generation_config({}, EOS)
            request = self.checkout.request_class(
                request_id=request_id,
                prompt_token_ids=list(prompt),
                sampling_params=sampling,
                pooling_params=None,
                lora_request=lora,
                cache_salt=cache_salt,
                priority=priority,
                arrival_time=0.0,
                block_hasher=self.block_hasher,
            )
            self.scheduler.add_request(request)

    def abort(self, request_id: str, *, during_step: bool = False) -> None:
        """The client went away: ``EngineCore.abort_requests``.

        By default between two steps, as ``EngineCoreProc._handle_client_request``
        does for an ABORT taken from its input queue. With ``during_step`` it
        arrives while the next step's model runs: vLLM puts it in both queues,
        so the aborts queue's ``_process_aborts_queue`` finishes it before that
        step's ``update_from_output`` if the step takes an output, and the
        input queue before the step after if it does not.
        """
        if during_step:
            self.aborts_queue.append(request_id)
            return
        with self.checkout.installed():
            self._abort([request_id])

    def _abort(self, request_ids: list[str]) -> None:
        status = self.checkout.request_status.FINISHED_ABORTED
        self.scheduler.finish_requests(request_ids, status)

    # ---- an operator's calls: LLMEngine's add_lora, remove_lora, pin_lora, list_loras ----
    # Each is LLMEngine -> EngineCore -> the executor's collective_rpc -> the
    # worker -> LoRAModelRunnerMixin, whose call on the slot manager runs here
    # (vllm/v1/engine/llm_engine.py, core.py; v1/worker/lora_model_runner_mixin.py,
    # 0.33.0 and 0.34.0). They reach the worker's slots only, never the
    # scheduler; what vLLM's slot code raises comes back to the caller as
    # ``SlotsRaised`` (an engine-core utility call returns its exception to the
    # client; the engine core lives on).

    def add_lora(self, adapter: int, name: str | None = None, path: str | None = None) -> bool:
        """``LLMEngine.add_lora``: the mixin's ``add_lora``, the worker's ``add_adapter``.

        A new adapter is read from disk into the CPU cache and a GPU slot; one
        already loaded is only moved to the front of both LRUs.
        """
        return self.slots.add(self.lora_request(adapter, name, path))

    def reload_lora(self, adapter: int, name: str | None = None, path: str | None = None) -> bool:
        """New weights written at the adapter's path, then ``LLMEngine.add_lora`` with
        ``LoRARequest(load_inplace=True)``: the same name and id loaded again in
        place (``add_adapter`` removes the old weights first); the weight version
        bumps."""
        lora = self.lora_request(adapter, name, path)
        return self.slots.reload(lora.lora_name, adapter, lora.lora_path)

    def remove_lora(self, adapter: int) -> bool:
        """``LLMEngine.remove_lora``: the mixin's ``remove_lora``, the worker's ``remove_adapter``.

        Out of its GPU slot and the CPU cache; a later step that needs it reads
        it from disk again.
        """
        return self.slots.remove(adapter)

    def pin_lora(self, adapter: int) -> bool:
        """``LLMEngine.pin_lora``: the mixin's ``pin_lora``, the worker's ``pin_adapter``.

        Pinned in the CPU cache and in a GPU slot (activated if it was not):
        never evicted by either LRU.
        """
        return self.slots.pin(adapter)

    def list_loras(self) -> frozenset[int]:
        """``LLMEngine.list_loras``: the mixin's ``list_loras``, the worker's
        ``list_adapters``, the ids in the CPU cache (read from vLLM's own cache)."""
        return frozenset(self.slots.state().cpu)

    def draw_eos(self, request_id: str) -> None:
        """The model draws end of sequence as the next token of ``request_id`` the engine takes.

        That is its token in the oldest batch in flight that samples for it, or,
        with none in flight, in the next batch that does.
        """
        for batch in reversed(self.batch_queue or ()):
            if batch.sampled.get(request_id):
                batch.sampled[request_id] = [EOS]
                return
        self.runner.eos_next.add(request_id)

    def step(self) -> Step:
        """One ``EngineCore.step``, or one ``EngineCore.step_with_batch_queue`` with a queue."""
        with self.checkout.installed():
            if self.input_aborts:  # the input queue, drained before the engine steps
                self._abort(self.input_aborts)
            during, self.aborts_queue = self.aborts_queue, []
            start = read_pool(self.scheduler.kv_cache_manager)
            live = frozenset(self.scheduler.requests)
            del self.cache_events[:]
            if self.batch_queue is None:
                launched = self._schedule()
                taken = launched
            else:
                launched, taken = self._step_with_batch_queue()
            scheduled = self._read_schedule(launched, start, live)
            if self.dead is not None:  # vLLM's code raised: no output comes back
                taken = None
            ended = self._take(taken, during) if taken is not None else {}
            self.input_aborts = during if taken is None else []
            return attrs.evolve(
                scheduled,
                cache_events=tuple(self.cache_events),
                in_flight=len(self.batch_queue or ()),
                ended=ended,
                running=tuple(r.request_id for r in self.scheduler.running),
                waiting=tuple(r.request_id for r in self.scheduler.waiting),
                pool_after=read_pool(self.scheduler.kv_cache_manager),
                live_after=frozenset(self.scheduler.requests),
                processed=taken is not None,
                raised=self.dead,
                taken=tuple(taken.output.num_scheduled_tokens) if taken is not None else (),
            )

    def _schedule(self) -> Batch | None:
        """``schedule()`` and the launch of its batch, if the scheduler has requests."""
        if not self.scheduler.has_requests():
            return None
        output = self._vllm("the scheduler", self.scheduler.schedule)
        if output is None:
            return None
        batch = self.runner.launch(output, self.scheduler.requests)
        if batch.slot_error is not None:
            self.dead = f"the slot manager raised {batch.slot_error}"
        return batch

    def _vllm(self, part: str, call: Callable[[], T]) -> T | None:
        """``call()``, into vLLM's ``part``; what it raises kills the engine core.

        As in vLLM, where an exception in the step function ends
        ``run_busy_loop``: it is kept in ``dead`` with vLLM's file and line.
        """
        try:
            return call()
        except Exception as err:  # vLLM's code is the system under test
            self.dead = f"{part} raised {raised_at(err, self.checkout.package)}"
            return None

    def _step_with_batch_queue(self) -> tuple[Batch | None, Batch | None]:
        """``EngineCore.step_with_batch_queue`` (both releases): the batch launched, the one taken.

        A batch is scheduled whenever the scheduler has requests; the engine
        returns without waiting while the queue has room and the batch ran
        tokens or requests remain; otherwise it waits on the oldest batch and
        updates the scheduler from its output. Its deferred sampling, for
        batches that wait on structured-output tokens, never arises: no
        request here has a grammar.
        """
        queue = self.batch_queue
        assert queue is not None and len(queue) < self.batch_queue_size
        launched = self._schedule()
        if launched is not None:
            queue.appendleft(launched)
            model_executed = launched.output.total_num_scheduled_tokens > 0
            if len(queue) < self.batch_queue_size and (
                model_executed or self.scheduler.has_requests()
            ):
                return launched, None
        elif not queue:
            return None, None
        return launched, queue.pop()

    def _take(self, batch: Batch, aborts: list[str]) -> dict[str, str]:
        """The aborts that came during the step, then ``update_from_output``; what it ended."""
        if aborts:
            self._abort(aborts)
        requests = dict(self.scheduler.requests)
        output = self.runner.model_output(batch)
        self._vllm("the scheduler", lambda: self.scheduler.update_from_output(batch.output, output))
        return {
            r: request.status.name
            for r, request in requests.items()
            if r not in self.scheduler.requests
        }

    def _read_schedule(self, batch: Batch | None, start: Pool, live: frozenset[str]) -> Step:
        """The step's schedule as read back; with none, empty and the pool as at the start."""
        requests = self.scheduler.requests
        output = batch.output if batch is not None else None
        new_ids = [r.req_id for r in output.scheduled_new_reqs] if output else []
        sent = [*new_ids, *output.scheduled_cached_reqs.req_ids] if output else []
        step_tokens: dict[str, int] = dict(output.num_scheduled_tokens) if output else {}
        scheduled = list(step_tokens)
        step = Step(
            scheduled=output is not None,
            processed=False,
            tokens=step_tokens,
            new=tuple(r for r in new_ids if r not in self.preempted),
            resumed=tuple(r for r in sent if r in self.preempted),
            preempted=tuple(sorted(output.preempted_req_ids or ())) if output else (),
            finished=tuple(sorted(output.finished_req_ids)) if output else (),
            adapters=_adapters(requests[r] for r in scheduled),
            running_adapters=_adapters(self.scheduler.running),
            lora_requests=_lora_identities(batch.lora_requests) if batch else frozenset(),
            needed={
                r: _adapter(requests[r].lora_request)
                for r in scheduled
                if requests[r].lora_request is not None and step_tokens[r]
            },
            slots=batch.slots if batch else None,
            raised=None,
            weights=dict(self.slots.files.versions),
            computed={r: requests[r].num_computed_tokens for r in scheduled},
            # A new request's computed tokens as scheduled: its prefix-cache hit.
            cached_tokens={r.req_id: r.num_computed_tokens for r in output.scheduled_new_reqs}
            if output
            else {},
            cache_events=(),
            pool=read_pool(self.scheduler.kv_cache_manager) if output else start,
            live=frozenset(requests) if output else live,
            in_flight=0,
            taken=(),
            ended={},
            running=(),
            waiting=(),
            pool_after=start,
            live_after=live,
        )
        self.preempted.difference_update(step.resumed)
        self.preempted.update(step.preempted)
        return step
