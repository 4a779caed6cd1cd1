"""peftlife's model of vLLM's ``KVCacheManager``: a block pool the scheduler allocates from.

vLLM's own manager (``vllm/v1/core/kv_cache_manager.py``) reaches torch through
``kv_cache_interface.py``, so the spike serves the scheduler this model of the
calls it makes: a fixed number of blocks of ``block_size`` tokens, a
request's blocks growing with its computed tokens, ``allocate_slots``
answering None when the pool cannot cover the step (the scheduler's cue to
preempt), ``free`` returning every block of a request. No prefix cache: a
lookup never hits. Only the calls the scheduler makes with connectors, Mamba,
speculative decoding and statistics off are served; any other is an
``AttributeError`` the driver reports.
"""

from __future__ import annotations

from typing import Any


class KVCacheBlock:
    """One block of the pool, by id."""

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id

    def __repr__(self) -> str:
        return f"KVCacheBlock({self.block_id})"


class KVCacheBlocks:
    """The blocks of one request handed back by the manager (one KV cache group)."""

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.blocks = (blocks,)

    def get_block_ids(self, allow_none: bool = False) -> tuple[list[int], ...] | None:
        if allow_none and not self.blocks[0]:
            return None
        return ([b.block_id for b in self.blocks[0]],)


class _Coordinator:
    single_type_managers: tuple[Any, ...] = ()  # no per-type (Mamba, sliding window) managers


class KVCacheManager:
    """A pool of ``kv_cache_config.num_blocks`` blocks, first free block first."""

    def __init__(self, kv_cache_config: Any, scheduler_block_size: int, **_: Any) -> None:
        self.block_size = scheduler_block_size
        self.num_blocks = kv_cache_config.num_blocks
        self.free_ids = list(range(self.num_blocks))
        self.held: dict[str, list[KVCacheBlock]] = {}
        self.coordinator = _Coordinator()
        self.mamba_shared_prefix_checkpoint = False
        self.empty_kv_cache_blocks = KVCacheBlocks([])

    # The step's bookkeeping: nothing to reset, nothing to hand over.
    def new_step_starts(self) -> None:
        pass

    def take_boundary_state_offloads(self) -> dict[str, Any]:
        return {}

    def take_kv_cache_block_copies(self) -> tuple[list[Any], list[Any]]:
        return [], []

    def take_new_block_ids(self) -> list[int]:
        return []

    def take_events(self) -> list[Any]:
        return []

    def record_prefix_cache_stats(self, request: Any, num_hits: int) -> None:
        pass

    def cache_blocks(self, request: Any, num_tokens: int) -> None:
        pass

    def estimate_cached_tokens(self, request: Any) -> int:
        return 0

    @property
    def usage(self) -> float:
        return 1.0 - len(self.free_ids) / float(self.num_blocks)

    def get_computed_blocks(
        self, request: Any, max_cache_hit_length: int | None = None
    ) -> tuple[KVCacheBlocks, int, int]:
        return self.empty_kv_cache_blocks, 0, 0  # no prefix cache: never a hit

    def allocate_slots(
        self,
        request: Any,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: KVCacheBlocks | None = None,
        num_lookahead_tokens: int = 0,
        **_: Any,
    ) -> KVCacheBlocks | None:
        """The blocks newly added so the request covers this step, or None if they do not fit."""
        tokens = (
            request.num_computed_tokens
            + num_new_computed_tokens
            + num_new_tokens
            + num_lookahead_tokens
        )
        held = self.held.setdefault(request.request_id, [])
        needed = -(tokens // -self.block_size) - len(held)
        if needed > len(self.free_ids):
            return None
        new = [KVCacheBlock(self.free_ids.pop(0)) for _ in range(max(needed, 0))]
        held.extend(new)
        return KVCacheBlocks(new)

    def get_blocks(self, request_id: str) -> KVCacheBlocks:
        return KVCacheBlocks(list(self.held.get(request_id, [])))

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        ids = self.get_blocks(request_id).get_block_ids()
        assert ids is not None
        return ids

    def free(self, request: Any) -> None:
        for block in self.held.pop(request.request_id, []):
            self.free_ids.append(block.block_id)
