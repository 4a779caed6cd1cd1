"""peftlife's invariants for vLLM, checked on the steps read back from vLLM's own code.

Pure functions of the steps the vLLM driver read back from the real scheduler
and its real ``KVCacheManager`` / ``BlockPool`` (as plain values: a checker
imports no SUT). Each finding is one line naming the step, the invariant and
the request or block. The numbers are those of docs/engines.md: translated
peftlife invariants keep theirs, the vLLM ones are V1 to V5.

Two checks only restate what vLLM's scheduler already enforces in its own
code (``RESTATED``): they can fire only if that code changes, so they are a
tripwire, not a contract, and their findings say so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

import attrs

# Check -> the vLLM code it restates (vllm/v1/core/sched/scheduler.py, 0.33.0 and 0.34.0).
RESTATED = {
    "V1 max_loras_cap": "Scheduler.schedule's `assert len(scheduled_loras) <= max_loras`",
    "V5 no_admission_in_a_preempting_step": (
        "Scheduler.schedule's `if not preempted_reqs` before the waiting loop"
    ),
}


class Pool(Protocol):
    """What the checks read of the block pool: the driver's ``Pool``."""

    @property
    def num_blocks(self) -> int: ...
    @property
    def null_block(self) -> int: ...
    @property
    def num_free(self) -> int: ...
    @property
    def free_queue(self) -> tuple[int, ...]: ...
    @property
    def ref_counts(self) -> tuple[int, ...]: ...
    @property
    def holders(self) -> Mapping[str, tuple[int, ...]]: ...


class Step(Protocol):
    """What the checks read of a step: the driver's ``Step``."""

    @property
    def tokens(self) -> Mapping[str, int]: ...
    @property
    def new(self) -> tuple[str, ...]: ...
    @property
    def resumed(self) -> tuple[str, ...]: ...
    @property
    def preempted(self) -> tuple[str, ...]: ...
    @property
    def finished(self) -> tuple[str, ...]: ...
    @property
    def running_adapters(self) -> frozenset[int]: ...
    @property
    def computed(self) -> Mapping[str, int]: ...
    @property
    def pool(self) -> Pool: ...
    @property
    def live(self) -> frozenset[str]: ...
    @property
    def pool_after(self) -> Pool: ...
    @property
    def live_after(self) -> frozenset[str]: ...


@attrs.frozen
class Limits:
    """What the world holds the scheduler to: its adapter slots and block size."""

    adapter_slots: int
    block_size: int


def _restated(name: str) -> str:
    return f"{name} (restates vLLM's {RESTATED[name]})"


def conservation(pool: Pool) -> Iterator[str]:
    """10 ``pages_conserved`` over vLLM's real pool; each line says what broke.

    Reference counts equal holders, the free queue's walk equals its count,
    every free block is unreferenced, and free + held + the null block is the
    pool. A freed block that keeps its hash sits in the free queue, so it is
    free here.

    >>> from types import SimpleNamespace as Pool
    >>> ok = Pool(num_blocks=3, null_block=0, num_free=1, free_queue=(2,),
    ...           ref_counts=(0, 1, 0), holders={"a": (1,)})
    >>> list(conservation(ok))
    []
    """
    held = Counter(b for blocks in pool.holders.values() for b in blocks if b != pool.null_block)
    if len(pool.free_queue) != pool.num_free:
        yield f"the free queue holds {len(pool.free_queue)} blocks, its count says {pool.num_free}"
    for block in pool.free_queue:
        if pool.ref_counts[block] or block in held or block == pool.null_block:
            yield f"block {block} is in the free queue with {pool.ref_counts[block]} reference(s)"
    for block, count in enumerate(pool.ref_counts):
        if block != pool.null_block and count != held[block]:
            yield f"block {block} has ref_cnt {count} and {held[block]} holder(s)"
    if pool.num_free + len(held) + 1 != pool.num_blocks:
        yield (f"{pool.num_free} free + {len(held)} held + 1 null != {pool.num_blocks} blocks")


def _pool_findings(i: int, when: str, pool: Pool, live: frozenset[str]) -> Iterator[str]:
    for line in conservation(pool):
        yield f"step {i}: 10 pages_conserved {when}: {line}"
    for rid, blocks in sorted(pool.holders.items()):
        if blocks and rid not in live:
            yield (
                f"step {i}: V4 ended_means_empty {when}: {rid} has ended (finished or aborted) "
                f"and holds {len(blocks)} block(s)"
            )


def _step_findings(i: int, step: Step, limits: Limits) -> Iterator[str]:
    if len(step.running_adapters) > limits.adapter_slots:
        yield (
            f"step {i}: {_restated('V1 max_loras_cap')}: adapters "
            f"{sorted(step.running_adapters)} are running, max_loras is {limits.adapter_slots}"
        )
    if step.preempted and (step.new or step.resumed):
        yield (
            f"step {i}: {_restated('V5 no_admission_in_a_preempting_step')}: preempted "
            f"{list(step.preempted)} and admitted {list(step.new + step.resumed)}"
        )
    for rid in step.preempted:
        if step.pool.holders.get(rid):
            held = len(step.pool.holders[rid])
            yield f"step {i}: V4 preempted_means_empty: {rid} holds {held} block(s)"
        if rid in step.tokens:
            yield f"step {i}: V4 preempted_means_empty: {rid} is scheduled in the step"
    for rid, computed in step.computed.items():
        room = len(step.pool.holders.get(rid, ())) * limits.block_size
        if room < computed:
            yield (
                f"step {i}: 7 scheduled_owned_and_resident: {rid} is scheduled up to token "
                f"{computed} with blocks for {room}"
            )
    yield from _pool_findings(i, "after schedule()", step.pool, step.live)
    yield from _pool_findings(i, "after the output", step.pool_after, step.live_after)


def findings(steps: Sequence[Step], limits: Limits) -> list[str]:
    """Every broken rule of ``steps``, in order; empty when the run held.

    >>> findings([], Limits(adapter_slots=1, block_size=4))
    []
    """
    found: list[str] = []
    ended: set[str] = set()
    for i, step in enumerate(steps):
        found.extend(_step_findings(i, step, limits))
        # A step reports the requests the previous step's output ended.
        ended.update(step.finished)
        for rid in sorted(ended & set(step.tokens)):
            found.append(f"step {i}: 16 dead_stay_dead: {rid} ended and is scheduled again")
    return found
