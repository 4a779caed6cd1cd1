"""The world's configuration: pools, adapters and the scheduler's budgets, validated.

An ``EngineConfig`` is a plain frozen value: scenarios draw it, the shrinker
simplifies it, a case file stores it, and the engine builds its world from it.
Its fields are checked on construction because a case file may be hand-edited.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import attrs

from peftlife.world.fields import (
    QUIET_AT_DEFAULT,
    InvalidField,
    boolean,
    is_whole,
    one_of,
    whole,
)
from peftlife.world.immutable import immutable
from peftlife.world.protocol import CHUNKING_POLICIES, ContextChunkingPolicy, SchedulerConfig

# The executor's knobs: each one's values are written here once, in the order a
# shrinker prefers them (the first is the simpler), and read with ``get_args``.
RecomputeTeardown = Literal["executor_frees", "scheduler_only"]
Executor = Literal["simple", "overlap"]
InflightIds = Literal["batch", "empty"]
HoldReason = Literal["none", "attention_dp", "batch_waiting", "context_kv_cap"]
InFlightPin = Literal["when_told", "always"]


def values(kind: Any) -> tuple[str, ...]:
    """The values a knob's ``Literal`` allows, in order.

    >>> values(Executor)
    ('simple', 'overlap')
    """
    return get_args(kind)


# The values ``recompute_teardown`` had before they were named after what they do; a
# report or a scenario written then still loads, with the same meaning.
LEGACY_TEARDOWN = {"spec": "scheduler_only", "upstream": "executor_frees"}


def _teardown(value: object) -> object:
    return LEGACY_TEARDOWN.get(value, value) if isinstance(value, str) else value


def _adapter_pages(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    pairs = isinstance(value, tuple) and all(
        isinstance(p, tuple) and len(p) == 2 and all(is_whole(n) and n >= 1 for n in p)
        for p in value
    )
    if not pairs or len({p[0] for p in value}) != len(value):  # type: ignore[attr-defined,arg-type]
        raise InvalidField(
            attribute.name,
            f"must be distinct (task id, pages) pairs of positive ints, not {value!r}",
        )


class ExecutorKnobs:
    """What the executor's knobs mean, for a world and for a scenario that fixes them.

    The one place that reads a knob's value as a mode: every other layer asks these.

    >>> EngineConfig(executor="overlap", inflight_ids="empty").in_flight_checked
    False
    """

    __slots__ = ()

    recompute_teardown: RecomputeTeardown
    executor: Executor
    inflight_ids: InflightIds
    hold_reason: HoldReason
    in_flight_pin: InFlightPin

    @property
    def overlap(self) -> bool:
        """Whether the overlap executor runs (batch N+1 scheduled while batch N runs)."""
        return self.executor == "overlap"

    @property
    def in_flight_told(self) -> bool:
        """Whether the scheduler is told batch N."""
        return self.overlap and self.inflight_ids == "batch"

    @property
    def in_flight_checked(self) -> bool:
        """Whether invariant 14 is checked: the scheduler is told batch N, or the world
        opts in to checking it anyway (``in_flight_pin = "always"``)."""
        return self.in_flight_told or (self.overlap and self.in_flight_pin == "always")

    @property
    def holds_batches(self) -> bool:
        """Whether a batch can be held or trimmed after scheduling (``hold_reason``)."""
        return self.overlap and self.hold_reason != "none"

    @property
    def scheduler_tears_down(self) -> bool:
        """Whether the executor leaves a recompute-paused request's teardown to the
        scheduler (peftlife's stricter, opt-in rule)."""
        return self.recompute_teardown == "scheduler_only"


@immutable
@attrs.frozen
class EngineConfig(ExecutorKnobs):
    """The whole world's configuration.

    ``draft_device_pages=None`` means no draft pool; ``host_pages=0`` means
    no lower tier. ``adapter_pages`` lists ``(task id, pages)``; with none,
    the engine runs without a PEFT manager.

    >>> EngineConfig(device_pages=8, adapter_pages=((1, 2),)).scheduler_config().max_num_tokens
    64
    """

    device_pages: int = attrs.field(default=16, validator=whole(1))
    host_pages: int = attrs.field(default=0, validator=whole(0))
    draft_device_pages: int | None = attrs.field(default=None, validator=whole(1, optional=True))
    draft_host_pages: int = attrs.field(default=0, validator=whole(0))
    tokens_per_block: int = attrs.field(default=4, validator=whole(1))
    lora_device_pages: int = attrs.field(default=4, validator=whole(1))
    lora_host_pages: int = attrs.field(default=8, validator=whole(1))
    adapter_pages: tuple[tuple[int, int], ...] = attrs.field(default=(), validator=_adapter_pages)
    max_num_tokens: int = attrs.field(default=64, validator=whole(1))
    max_batch_size: int = attrs.field(default=8, validator=whole(1))
    enable_chunked_context: bool = attrs.field(default=False, validator=boolean)
    chunk_unit_size: int = attrs.field(default=4, validator=whole(1))
    enable_recompute_pause: bool = attrs.field(default=True, validator=boolean)
    context_chunking_policy: ContextChunkingPolicy = attrs.field(
        default="FIRST_COME_FIRST_SERVED", validator=one_of(*CHUNKING_POLICIES)
    )
    # How the executor tears down a recompute-paused request. "executor_frees" is
    # TensorRT-LLM's PyExecutor (py_executor.py, _terminate_recompute_paused_requests):
    # every resource manager's free_resources, the PEFT one's mark_request_done without
    # pause, before prepare_resources. "scheduler_only" frees nothing: the scheduler's
    # own frees and releases are the whole teardown (peftlife's stricter, opt-in rule,
    # under which a scheduler must release a recompute-paused request with pause).
    recompute_teardown: RecomputeTeardown = attrs.field(
        default="executor_frees",
        converter=_teardown,
        validator=one_of(*values(RecomputeTeardown)),
    )
    # Which executor loop runs: "simple" schedules, runs and frees one batch at a
    # time; "overlap" (TensorRT-LLM's default) schedules batch N+1 while batch N is
    # on the device (docs/protocol.md, "The overlap executor").
    executor: Executor = attrs.field(
        default="simple",
        validator=one_of(*values(Executor)),
        metadata={QUIET_AT_DEFAULT: True},
    )
    # Under overlap, what ``inflight_request_ids`` holds: batch N's ids ("batch"), or
    # always nothing ("empty", upstream's PyExecutor at pipeline-parallel size 1).
    inflight_ids: InflightIds = attrs.field(
        default="batch",
        validator=one_of(*values(InflightIds)),
        metadata={QUIET_AT_DEFAULT: True},
    )

    # Why a batch the scheduler produced may not run as scheduled (upstream's
    # py_executor.py): "none" on a single rank without attention DP, where a non-empty
    # batch is always queued (_can_queue); "attention_dp", another rank's batch is empty
    # and the whole batch is held (_can_queue, _revert_gen_alloc); "batch_waiting", the
    # context requests wait for a fuller batch (_waiting_requests); "context_kv_cap",
    # context requests after the first exceed the context KV cap
    # (_cap_context_by_total_kv_len). The last two drop context requests whose KV the
    # scheduler already grew. The world's hold_batch action exists only with a reason.
    hold_reason: HoldReason = attrs.field(
        default="none",
        validator=one_of(*values(HoldReason)),
        metadata={QUIET_AT_DEFAULT: True},
    )
    # Whether invariant 14 is checked when the scheduler is not told batch N
    # ("always", opt-in: a correct scheduler told nothing must remember what it ran;
    # upstream's scheduler at pipeline-parallel size 1 does not, and its free is a
    # hazard only when device work not ordered after batch N's forward reuses what
    # was freed). "when_told" checks it under inflight_ids = "batch" only.
    in_flight_pin: InFlightPin = attrs.field(
        default="when_told",
        validator=one_of(*values(InFlightPin)),
        metadata={QUIET_AT_DEFAULT: True},
    )

    def scheduler_config(self) -> SchedulerConfig:
        return SchedulerConfig(
            max_num_tokens=self.max_num_tokens,
            max_batch_size=self.max_batch_size,
            enable_chunked_context=self.enable_chunked_context,
            chunk_unit_size=self.chunk_unit_size,
            enable_recompute_pause=self.enable_recompute_pause,
            tokens_per_block=self.tokens_per_block,
            context_chunking_policy=self.context_chunking_policy,
        )
