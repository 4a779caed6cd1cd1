"""What the driver reads of vLLM's real KV cache chain, as plain values.

``read_pool`` walks a ``KVCacheManager``'s ``BlockPool`` (its free queue, its
reference counts, each request's blocks, the hashed blocks). ``watch_cache``
records, in call order, each time the pool caches full blocks
(``BlockPool.cache_full_blocks``: the blocks it hashed and the identity of the
request that filled them) and each prefix-cache hit
(``KVCacheManager.get_computed_blocks``: the blocks it returned and the
identity of the request asking), by wrapping the two methods on the live
objects: vLLM's own code runs unchanged inside the wrappers, which only read
its arguments and its results.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal

import attrs


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


def read_pool(manager: Any) -> Pool:
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


@attrs.frozen
class Identity:
    """Whose KV a block holds: the request's adapter (name, id, path) and its cache salt.

    The base model has no adapter (all three None).

    >>> str(Identity("sql", 1, "/adapters/sql", None))
    'adapter sql (id 1, /adapters/sql)'
    >>> str(Identity(None, None, None, "user-2"))
    'the base model, salt user-2'
    """

    adapter_name: str | None
    adapter_id: int | None
    adapter_path: str | None
    cache_salt: str | None

    def __str__(self) -> str:
        if self.adapter_name is None:
            who = "the base model"
        else:
            who = f"adapter {self.adapter_name} (id {self.adapter_id}, {self.adapter_path})"
        return f"{who}, salt {self.cache_salt}" if self.cache_salt else who


def identity(request: Any) -> Identity:
    """A ``Request``'s identity, from its ``lora_request`` and ``cache_salt``."""
    lora = request.lora_request
    if lora is None:
        return Identity(None, None, None, request.cache_salt)
    return Identity(lora.lora_name, lora.lora_int_id, lora.lora_path, request.cache_salt)


@attrs.frozen
class CacheEvent:
    """A ``fill`` (``cache_full_blocks`` hashed ``blocks`` for a request of ``identity``)
    or a ``hit`` (``get_computed_blocks`` returned ``blocks`` to a request of ``identity``)."""

    kind: Literal["fill", "hit"]
    request_id: str
    identity: Identity
    blocks: tuple[int, ...]


def watch_cache(manager: Any, events: list[CacheEvent]) -> None:
    """Append to ``events`` each cache fill and each prefix hit of ``manager``'s pool.

    Instance attributes shadow the two methods on these objects only (the
    single-type managers call the pool they share); each wrapper calls vLLM's
    own method with the arguments it was given and returns its result.
    """
    pool = manager.block_pool
    cache_full_blocks: Callable[..., None] = pool.cache_full_blocks
    signature = inspect.signature(cache_full_blocks)
    get_computed_blocks: Callable[..., tuple[Any, ...]] = manager.get_computed_blocks

    def cache_full_blocks_watched(*args: Any, **kwargs: Any) -> None:
        cache_full_blocks(*args, **kwargs)
        given = signature.bind(*args, **kwargs).arguments
        request = given["request"]
        new = given["blocks"][given["num_cached_blocks"] : given["num_full_blocks"]]
        filled = tuple(b.block_id for b in new if not b.is_null and b.block_hash is not None)
        if filled:
            events.append(CacheEvent("fill", request.request_id, identity(request), filled))

    def get_computed_blocks_watched(request: Any, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        found = get_computed_blocks(request, *args, **kwargs)  # (blocks, tokens, ...)
        hit = tuple(b.block_id for group in found[0].blocks for b in group if not b.is_null)
        if hit:
            events.append(CacheEvent("hit", request.request_id, identity(request), hit))
        return found

    pool.cache_full_blocks = cache_full_blocks_watched
    manager.get_computed_blocks = get_computed_blocks_watched
