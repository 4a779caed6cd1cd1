"""The snapshot: the world after one executor iteration, as a plain value.

Everything here is frozen and hashable, so a snapshot can be compared, kept in
a trace, hashed to detect a repeating world, and handed to the checker's pure
functions. It holds the world's state *and* the iteration's step record (the
scheduler's output, the state right after ``prepare_resources``, the calls and
the errors), because some invariants judge what happened, not only what is.
"""

from __future__ import annotations

from typing import Literal

import attrs

from peftlife.world.fields import QUIET_AT_DEFAULT
from peftlife.world.immutable import immutable
from peftlife.world.kv import CacheView, PoolView
from peftlife.world.ledger import Call
from peftlife.world.peft import CacheEntryView
from peftlife.world.request import LlmRequestState
from peftlife.world.residency import Residency

Outcome = Literal["finished", "failed", "cancelled"]
OutputList = Literal["context", "generation", "paused", "recompute_paused"]


@immutable
@attrs.frozen
class RequestView:
    request_id: int
    lora_task_id: int | None
    state: LlmRequestState
    position: int
    context_len: int
    num_generated: int
    max_new_tokens: int
    started: bool
    ever_registered: bool
    recompute_pending: bool
    target: CacheView
    draft: CacheView | None
    # For the livelock fingerprint: two worlds differing here are not the same world.
    prompt_len: int = 0
    lora_weights: bool = False
    lora_path: bool = attrs.field(default=False, metadata={QUIET_AT_DEFAULT: True})


@immutable
@attrs.frozen
class AdapterView:
    task_id: int
    active: frozenset[int]
    paused: frozenset[int]
    device: CacheEntryView | None
    host: CacheEntryView | None


@immutable
@attrs.frozen
class LoraCacheView:
    name: str
    capacity: int
    free: int
    entries: tuple[tuple[int, CacheEntryView], ...]
    # The done entries, oldest done (the next evicted) first.
    eviction_order: tuple[int, ...] = ()


@immutable
@attrs.frozen
class ListedView:
    """A request the scheduler listed, as it stood when the scheduler returned."""

    request_id: int
    output_list: OutputList
    live: bool
    schedulable: bool
    state: LlmRequestState
    started: bool
    target: Residency
    draft: Residency | None
    # Context requests only: the chunk the scheduler set and what was left to prefill.
    chunk_size: int = 0
    context_remaining: int = 0
    # As the request stood before the pass: started, and holding a cache in some pool.
    started_before: bool = False
    cache_before: bool = False


@immutable
@attrs.frozen
class ScheduledView:
    """A scheduled request right after ``prepare_resources``."""

    request_id: int
    lora_task_id: int | None
    owned_active: bool
    target: CacheView
    draft: CacheView | None
    # KV tokens this iteration's work needs in every pool.
    tokens_needed: int


@immutable
@attrs.frozen
class StepError:
    """Something the engine met: a scheduler fault, or a manager call that raised.

    ``kind`` is one of ``scheduler_raised``, ``scheduler_hung``,
    ``malformed_output``, ``add_request_peft_failed``, ``ensure_batch_failed``.
    """

    kind: str
    message: str
    request_id: int | None = None
    exception: str = ""
    registered_before: bool = False
    # Where an exception went in the scheduler's code, innermost first (path:line in function).
    frames: tuple[str, ...] = ()


@immutable
@attrs.frozen
class FieldWrite:
    """A request field the scheduler changed that is not its own (invariant 8b), as text."""

    request_id: int
    field: str
    before: str
    after: str


@immutable
@attrs.frozen
class OutputRecord:
    context: tuple[int, ...]
    generation: tuple[int, ...]
    paused: tuple[int, ...]
    recompute_paused: tuple[int, ...]
    listed: tuple[ListedView, ...]
    # The pass's budgets, which the batch must keep (invariant 8); None where not recorded.
    max_batch_size: int | None = None
    max_num_tokens: int | None = None
    chunking: bool = True

    def lists(self) -> tuple[tuple[OutputList, tuple[int, ...]], ...]:
        return (
            ("context", self.context),
            ("generation", self.generation),
            ("paused", self.paused),
            ("recompute_paused", self.recompute_paused),
        )


@immutable
@attrs.frozen
class OverlapStep:
    """What one iteration of the overlap executor adds to its step record.

    ``in_flight``: batch N, on the device when the pass began and read back in
    this iteration; ``in_flight_told``: the scheduler was told it (``inflight_ids
    = "batch"``); ``in_flight_checked``: invariant 14 judges this step (told, or
    ``in_flight_pin = "always"``); ``held``: this iteration's batch was held (not
    queued); ``retiring``: the requests whose last token was on the device when
    the pass began; ``eos``: members of batch N its read-back ended by
    end-of-sequence.
    """

    in_flight: tuple[int, ...] = ()
    in_flight_told: bool = False
    in_flight_checked: bool = False
    held: bool = False
    retiring: tuple[int, ...] = ()
    eos: tuple[int, ...] = ()


@immutable
@attrs.frozen
class StepRecord:
    iteration: int
    output: OutputRecord | None
    batch_ran: bool
    after_prepare: tuple[ScheduledView, ...]
    calls: tuple[Call, ...]
    errors: tuple[StepError, ...]
    # Fields the scheduler wrote that are not its own (undone by the engine).
    writes: tuple[FieldWrite, ...] = ()
    # Requests recompute-pending when the pass began.
    recompute_pending_before: frozenset[int] = frozenset()
    # The executor leaves a recompute-paused request's teardown to the scheduler
    # (``recompute_teardown = "scheduler_only"``, peftlife's opt-in rule).
    scheduler_tears_down: bool = attrs.field(default=False, metadata={QUIET_AT_DEFAULT: True})
    # The overlap executor's own record of the iteration (None under the simple loop,
    # and then left out of reports).
    overlap: OverlapStep | None = attrs.field(default=None, metadata={QUIET_AT_DEFAULT: True})

    @property
    def faults(self) -> tuple[Call, ...]:
        """Calls a nemesis fault made fail."""
        return tuple(c for c in self.calls if c.facts.fault in ("refused_resume", "failed_grow"))


@immutable
@attrs.frozen
class Snapshot:
    iteration: int
    requests: tuple[RequestView, ...]
    # Requests that left the world during this iteration, with how.
    ended: tuple[tuple[int, Outcome], ...]
    adapters: tuple[AdapterView, ...]
    pools: tuple[PoolView, ...]
    lora_caches: tuple[LoraCacheView, ...]
    step: StepRecord | None
    # The overlap executor's batch on the device after this iteration (batch N+1):
    # part of the world, since its read-back is still to come.
    in_flight: tuple[int, ...] = attrs.field(default=(), metadata={QUIET_AT_DEFAULT: True})

    def request(self, request_id: int) -> RequestView | None:
        for view in self.requests:
            if view.request_id == request_id:
                return view
        return None

    @property
    def live_ids(self) -> frozenset[int]:
        return frozenset(v.request_id for v in self.requests)

    def world(self) -> Snapshot:
        """The state alone, without the clock or the step: equal worlds compare equal."""
        return attrs.evolve(self, iteration=0, ended=(), step=None)


def _id_list(ids: tuple[int, ...]) -> str:
    return str(list(ids)) if ids else "none"


def in_flight_line(s: Snapshot) -> str | None:
    """Under the overlap executor, what was on the device in this iteration; None otherwise.

    Batch N (launched by the previous iteration) is read back, batch N+1 is
    launched (or held); ``retiring`` are the requests whose last token was on
    the device when the pass began, ``end-of-sequence`` the members of batch N
    its read-back ended early.
    """
    step = None if s.step is None else s.step.overlap
    if step is None:
        return None
    read_back = _id_list(step.in_flight)
    launched = "batch held, none launched" if step.held else f"{_id_list(s.in_flight)} launched"
    parts = [f"in flight: {read_back} read back", launched]
    if step.retiring:
        parts.append(f"retiring {list(step.retiring)}")
    if step.eos:
        parts.append(f"end-of-sequence {list(step.eos)}")
    return "; ".join(parts)
