"""peftlife's invariants for vLLM, checked on the steps read back from vLLM's own code.

Pure functions of the steps the vLLM driver read back from the real scheduler
and its real ``KVCacheManager`` / ``BlockPool`` (as plain values: a checker
imports no SUT). Each finding is a ``Violation`` record: the step, the
invariant's name (``INVARIANTS``, each with its source) and a message naming
the request or block; its text is one line. The numbers are those of docs/engines.md: translated
peftlife invariants keep theirs, the vLLM ones are V1 to V5. A contract of
vLLM's, stated at the level it promises rather than by re-running its code,
names its source (vLLM file, function, releases) in its docstring.

Two checks only restate what vLLM's scheduler already enforces in its own
code (``RESTATED``): they can fire only if that code changes, so they are a
tripwire, not a contract, and their findings say so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Protocol

import attrs

# Check -> the vLLM code it restates (vllm/v1/core/sched/scheduler.py, 0.33.0 and 0.34.0).
RESTATED = {
    "V1 max_loras_cap": "Scheduler.schedule's `assert len(scheduled_loras) <= max_loras`",
    "V5 no_admission_in_a_preempting_step": (
        "Scheduler.schedule's `if not preempted_reqs` before the waiting loop"
    ),
}


# Each invariant's name -> where vLLM states the contract it checks (file, function, releases).
INVARIANTS = {
    "V1 max_loras_cap": f"restated: vllm/v1/core/sched/scheduler.py {RESTATED['V1 max_loras_cap']}",
    "V2 adapter_in_gpu_slot": (
        "vllm/lora/worker_manager.py LRUCacheWorkerLoRAManager._apply_adapters, "
        "vllm/lora/model_manager.py LRUCacheLoRAModelManager.activate_adapter (0.33.0, 0.34.0)"
    ),
    "V3 prefix_hit_within_identity": (
        "vllm/v1/core/kv_cache_utils.py generate_block_hash_extra_keys, "
        "vllm/v1/core/kv_cache_manager.py KVCacheManager.get_computed_blocks (0.33.0, 0.34.0)"
    ),
    "V4 preempted_means_empty": (
        "vllm/v1/core/sched/scheduler.py Scheduler._preempt_request: "
        "kv_cache_manager.free (0.33.0, 0.34.0)"
    ),
    "V4 ended_means_empty": (
        "vllm/v1/core/sched/scheduler.py Scheduler._free_request / finish_requests: "
        "kv_cache_manager.free (0.33.0, 0.34.0)"
    ),
    "V5 no_admission_in_a_preempting_step": (
        f"restated: vllm/v1/core/sched/scheduler.py "
        f"{RESTATED['V5 no_admission_in_a_preempting_step']}"
    ),
    "V6 raised_in_vllm": (
        "vllm/v1/engine/core.py EngineCore.run_busy_loop: an exception in the step "
        "function kills the engine core (EngineDeadError)"
    ),
    "7 scheduled_owned_and_resident": (
        "vllm/v1/core/kv_cache_manager.py KVCacheManager.allocate_slots: blocks for every "
        "computed token (0.33.0, 0.34.0)"
    ),
    "10 pages_conserved": (
        "vllm/v1/core/block_pool.py BlockPool (ref_cnt, free_block_queue, null_block), "
        "0.33.0 and 0.34.0"
    ),
    "16 dead_stay_dead": (
        "vllm/v1/core/sched/scheduler.py Scheduler.update_from_output / _free_request: "
        "a finished request leaves self.requests"
    ),
    "12 every_request_ends": (
        "vllm/v1/request.py RequestStatus.is_finished: with arrivals stopped, every request "
        "reaches a finished status within the drain's bound of steps (0.33.0, 0.34.0)"
    ),
}


@attrs.frozen
class Violation:
    """One broken rule at one step: the invariant, what qualifies it, and what broke.

    >>> str(Violation(3, "V4 preempted_means_empty", "a holds 2 block(s)"))
    'step 3: V4 preempted_means_empty: a holds 2 block(s)'
    >>> str(Violation(1, "10 pages_conserved", "block 2 ...", "after schedule()"))
    'step 1: 10 pages_conserved after schedule(): block 2 ...'
    """

    step: int
    invariant: str  # a key of INVARIANTS
    message: str
    qualifier: str = ""  # when in the step ("after schedule()"), or that it restates vLLM

    def __str__(self) -> str:
        qualified = f"{self.invariant} {self.qualifier}" if self.qualifier else self.invariant
        return f"step {self.step}: {qualified}: {self.message}"


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


class CacheEvent(Protocol):
    """A cache fill (``kind`` "fill") or a prefix hit ("hit"): the driver's ``CacheEvent``."""

    @property
    def kind(self) -> str: ...
    @property
    def request_id(self) -> str: ...
    @property
    def identity(self) -> Hashable: ...
    @property
    def blocks(self) -> tuple[int, ...]: ...


class Adapter(Protocol):
    """An adapter as a request names it: the driver's ``Identity``."""

    @property
    def adapter_name(self) -> str | None: ...
    @property
    def adapter_id(self) -> int | None: ...
    @property
    def adapter_path(self) -> str | None: ...


class SlotState(Protocol):
    """What the checks read of the worker's slots: the slot manager's ``SlotState``."""

    @property
    def slots(self) -> tuple[int | None, ...]: ...
    @property
    def names(self) -> Mapping[int, tuple[str, str]]: ...
    @property
    def versions(self) -> Mapping[int, int | None]: ...


class Step(Protocol):
    """What the checks read of a step: the driver's ``Step``."""

    @property
    def needed(self) -> Mapping[str, Adapter]: ...
    @property
    def slots(self) -> SlotState | None: ...
    @property
    def raised(self) -> str | None: ...
    @property
    def weights(self) -> Mapping[tuple[str, str], int]: ...

    @property
    def cache_events(self) -> tuple[CacheEvent, ...]: ...
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


V2 = "V2 adapter_in_gpu_slot"
V3 = "V3 prefix_hit_within_identity"
V6 = "V6 raised_in_vllm"
DRAINED = "12 every_request_ends"


def _restated(name: str) -> str:
    return f"(restates vLLM's {RESTATED[name]})"


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


def _pool_findings(i: int, when: str, pool: Pool, live: frozenset[str]) -> Iterator[Violation]:
    for line in conservation(pool):
        yield Violation(i, "10 pages_conserved", line, when)
    for rid, blocks in sorted(pool.holders.items()):
        if blocks and rid not in live:
            yield Violation(
                i,
                "V4 ended_means_empty",
                f"{rid} has ended (finished or aborted) and holds {len(blocks)} block(s)",
                when,
            )


def _step_findings(i: int, step: Step, limits: Limits) -> Iterator[Violation]:
    if len(step.running_adapters) > limits.adapter_slots:
        name = "V1 max_loras_cap"
        yield Violation(
            i,
            name,
            f"adapters {sorted(step.running_adapters)} are running, "
            f"max_loras is {limits.adapter_slots}",
            _restated(name),
        )
    if step.preempted and (step.new or step.resumed):
        name = "V5 no_admission_in_a_preempting_step"
        yield Violation(
            i,
            name,
            f"preempted {list(step.preempted)} and admitted {list(step.new + step.resumed)}",
            _restated(name),
        )
    for rid in step.preempted:
        if step.pool.holders.get(rid):
            held = len(step.pool.holders[rid])
            yield Violation(i, "V4 preempted_means_empty", f"{rid} holds {held} block(s)")
        if rid in step.tokens:
            yield Violation(i, "V4 preempted_means_empty", f"{rid} is scheduled in the step")
    for rid, computed in step.computed.items():
        room = len(step.pool.holders.get(rid, ())) * limits.block_size
        if room < computed:
            yield Violation(
                i,
                "7 scheduled_owned_and_resident",
                f"{rid} is scheduled up to token {computed} with blocks for {room}",
            )
    yield from _pool_findings(i, "after schedule()", step.pool, step.live)
    yield from _pool_findings(i, "after the output", step.pool_after, step.live_after)


def prefix_hits_keep_identity(
    i: int, events: Sequence[CacheEvent], filled_by: dict[int, Hashable]
) -> Iterator[Violation]:
    """V3 ``prefix_hit_within_identity``: a prefix-cache hit never crosses an identity.

    Source: vLLM 0.33.0 and 0.34.0, ``vllm/v1/core/kv_cache_utils.py``
    ``generate_block_hash_extra_keys`` (with ``_gen_lora_extra_hash_keys``, the
    adapter, and the request's ``cache_salt``) keys every block hash by who
    computed it, so that ``vllm/v1/core/kv_cache_manager.py``
    ``KVCacheManager.get_computed_blocks`` hands a request only KV computed
    under its own adapter and salt. Stated on identities, not by re-running
    the hash: ``filled_by`` records, for each block, the identity (adapter
    name, id and path; cache salt) of the request whose
    ``BlockPool.cache_full_blocks`` last hashed it, and every block of a hit
    must have been filled under the hitting request's identity. vLLM's hash
    carries the adapter's name and path, not its id: two ids under one name
    and path break this rule while vLLM's hash matches.

    >>> from types import SimpleNamespace as E
    >>> record = {}
    >>> fill = E(kind="fill", request_id="a", identity="sql", blocks=(1, 2))
    >>> hit = E(kind="hit", request_id="b", identity="chat", blocks=(1,))
    >>> [str(v) for v in prefix_hits_keep_identity(3, [fill, hit], record)]
    ['step 3: V3 prefix_hit_within_identity: b (chat) hit block 1, filled by sql']
    """
    for event in events:
        if event.kind == "fill":
            filled_by.update(dict.fromkeys(event.blocks, event.identity))
            continue
        for block in event.blocks:
            who = f"{event.request_id} ({event.identity}) hit block {block}"
            if block not in filled_by:
                yield Violation(i, V3, f"{who}, which no request filled")
            elif filled_by[block] != event.identity:
                yield Violation(i, V3, f"{who}, filled by {filled_by[block]}")


def adapters_in_gpu_slots(i: int, step: Step) -> Iterator[Violation]:
    """V2 ``adapter_in_gpu_slot``: every adapter a scheduled token needs is in a GPU slot.

    Source: vLLM 0.33.0 and 0.34.0, ``vllm/lora/worker_manager.py``
    ``LRUCacheWorkerLoRAManager._apply_adapters`` (with
    ``vllm/lora/model_manager.py`` ``LRUCacheLoRAModelManager.activate_adapter``),
    which ``vllm/v1/worker/lora_model_runner_mixin.py``
    ``LoRAModelRunnerMixin._set_active_loras`` calls before each forward pass:
    once the step's adapter set is applied, each adapter of it sits in one of
    ``max_loras`` GPU slots (``lora_index_to_id``) with the weights its
    ``LoRARequest`` names, the newest written at its path (an in-place reload,
    ``add_adapter`` with ``load_inplace``, replaces them). Read from the slot
    state after vLLM's own slot manager applied the step's set; a step whose
    apply raised never ran, and the raise is its finding (V6).

    >>> from types import SimpleNamespace as S
    >>> sql = S(adapter_name="sql", adapter_id=1, adapter_path="/sql")
    >>> state = S(slots=(2, None), names={2: ("chat", "/chat")}, versions={2: 1})
    >>> step = S(needed={"a": sql}, slots=state, raised=None, weights={})
    >>> print(*map(str, adapters_in_gpu_slots(4, step)))  # doctest: +NORMALIZE_WHITESPACE
    step 4: V2 adapter_in_gpu_slot: a runs under sql (id 1),
    which is in no GPU slot of (2, None)
    """
    state = step.slots
    if state is None or step.raised is not None:
        return
    for rid, adapter in sorted(step.needed.items()):
        lora_id = adapter.adapter_id or 0
        files = (adapter.adapter_name or "", adapter.adapter_path or "")
        newest = step.weights.get(files, 1)  # the weight loader's first version
        who = f"{rid} runs under {files[0]} (id {lora_id})"
        if lora_id not in state.slots:
            yield Violation(i, V2, f"{who}, which is in no GPU slot of {state.slots}")
        elif state.names.get(lora_id) != files:
            yield Violation(i, V2, f"{who}, whose slot holds {state.names.get(lora_id)}")
        elif state.versions.get(lora_id) != newest:
            held = state.versions.get(lora_id)
            yield Violation(i, V2, f"{who}, whose slot holds weight version {held}, not {newest}")


class Checker:
    """The checks of one run, step by step: what a prefix hit and a rescheduled
    request are judged against (the blocks' fillers, the requests ended) is kept
    between steps.

    >>> Checker(Limits(adapter_slots=1, block_size=4)).steps
    0
    """

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.steps = 0
        self.ended: set[str] = set()
        self.filled_by: dict[int, Hashable] = {}

    def check(self, step: Step) -> list[Violation]:
        """Every rule the next step broke, in order; empty when it held."""
        i = self.steps
        self.steps += 1
        found = list(_step_findings(i, step, self.limits))
        found.extend(prefix_hits_keep_identity(i, step.cache_events, self.filled_by))
        found.extend(adapters_in_gpu_slots(i, step))
        if step.raised is not None:
            found.append(Violation(i, V6, step.raised))
        # A step reports the requests the previous step's output ended.
        self.ended.update(step.finished)
        for rid in sorted(self.ended & set(step.tokens)):
            found.append(Violation(i, "16 dead_stay_dead", f"{rid} ended and is scheduled again"))
        return found


def violations(steps: Sequence[Step], limits: Limits) -> list[Violation]:
    """Every broken rule of ``steps``, in order; empty when the run held.

    >>> violations([], Limits(adapter_slots=1, block_size=4))
    []
    """
    checker = Checker(limits)
    return [v for step in steps for v in checker.check(step)]


def findings(steps: Sequence[Step], limits: Limits) -> list[str]:
    """``violations`` as lines of text.

    >>> findings([], Limits(adapter_slots=1, block_size=4))
    []
    """
    return [str(v) for v in violations(steps, limits)]
