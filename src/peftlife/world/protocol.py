"""The SUT protocol: what the executor hands a scheduler, and what it must return.

A scheduler factory receives an ``Environment`` (the KV pools, the PEFT
manager and the ``SchedulerConfig``) and returns a ``Scheduler``, whose
``schedule_request`` returns a ``SchedulerOutput`` each iteration. This is the
public, stable contract between the world and any scheduler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

import attrs

from peftlife.world.immutable import immutable
from peftlife.world.kv import KVCacheManager
from peftlife.world.peft import PeftCacheManager
from peftlife.world.request import Request

ContextChunkingPolicy = Literal["FIRST_COME_FIRST_SERVED", "EQUAL_PROGRESS"]
CHUNKING_POLICIES: tuple[ContextChunkingPolicy, ...] = ("FIRST_COME_FIRST_SERVED", "EQUAL_PROGRESS")


@immutable
@attrs.frozen
class SchedulerConfig:
    """What a scheduler may read; it learns the rest through the managers."""

    max_num_tokens: int
    max_batch_size: int
    enable_chunked_context: bool
    chunk_unit_size: int
    enable_recompute_pause: bool
    tokens_per_block: int
    # Upstream's ContextChunkingPolicy name: how a pass shares the token budget
    # among chunked context requests.
    context_chunking_policy: ContextChunkingPolicy = "FIRST_COME_FIRST_SERVED"


@attrs.frozen
class Environment:
    """What a scheduler factory is given. ``attrs.evolve`` it to wrap a manager."""

    kv_cache_manager: KVCacheManager
    draft_kv_cache_manager: KVCacheManager | None
    peft_cache_manager: PeftCacheManager | None
    config: SchedulerConfig


@attrs.define
class SchedulerOutput:
    """What one scheduling pass decides: four pairwise disjoint lists."""

    context_requests: list[Request] = attrs.field(factory=list)
    generation_requests: list[Request] = attrs.field(factory=list)
    paused_requests: list[Request] = attrs.field(factory=list)
    recompute_paused_requests: list[Request] = attrs.field(factory=list)


class Scheduler(Protocol):
    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput: ...


SchedulerFactory = Callable[[Environment], Scheduler]

# The optional attribute by which a scheduler declares that it keeps no state
# between passes. Only the bool ``True`` declares it; anything else, and a
# declaration that raises when read, means the scheduler keeps state. Every
# reader goes through ``Engine.state_declaration``, which reads it with
# ``untrusted.state_declaration`` (world/untrusted.py).
STATELESS_DECLARATION = "keeps_no_state_between_passes"
