"""The world's configuration: pools, adapters and the scheduler's budgets, validated.

An ``EngineConfig`` is a plain frozen value: scenarios draw it, the shrinker
simplifies it, a case file stores it, and the engine builds its world from it.
Its fields are checked on construction because a case file may be hand-edited.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from peftlife.world.fields import (
    QUIET_AT_DEFAULT,
    InvalidField,
    boolean,
    is_whole,
    one_of,
    whole,
)
from peftlife.world.protocol import CHUNKING_POLICIES, ContextChunkingPolicy, SchedulerConfig

RecomputeTeardown = Literal["spec", "upstream"]
Executor = Literal["simple", "overlap"]
InflightIds = Literal["batch", "empty"]


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


@attrs.frozen
class EngineConfig:
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
    # How the executor tears down a recompute-paused request: "spec" leaves its
    # adapter as the scheduler left it (paused); "upstream" does what TensorRT-LLM's
    # PyExecutor does, free every resource with mark_request_done(pause=False).
    recompute_teardown: RecomputeTeardown = attrs.field(
        default="spec", validator=one_of("spec", "upstream")
    )
    # Which executor loop runs: "simple" schedules, runs and frees one batch at a
    # time; "overlap" (TensorRT-LLM's default) schedules batch N+1 while batch N is
    # on the device (docs/protocol.md, "The overlap executor").
    executor: Executor = attrs.field(
        default="simple",
        validator=one_of("simple", "overlap"),
        metadata={QUIET_AT_DEFAULT: True},
    )
    # Under overlap, what ``inflight_request_ids`` holds: batch N's ids ("batch"), or
    # always nothing ("empty", upstream's PyExecutor at pipeline-parallel size 1).
    inflight_ids: InflightIds = attrs.field(
        default="batch",
        validator=one_of("batch", "empty"),
        metadata={QUIET_AT_DEFAULT: True},
    )

    @property
    def overlap(self) -> bool:
        return self.executor == "overlap"

    @property
    def in_flight_told(self) -> bool:
        """Whether the scheduler is told batch N: only then is invariant 14 checked."""
        return self.overlap and self.inflight_ids == "batch"

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
