"""The call ledger: every manager call of one executor iteration, with who made it.

The KV pools and the PEFT manager append to one shared ledger; the engine
moves its ``iteration`` and ``caller`` on as the executor loop goes from the
scheduler to ``prepare_resources`` to freeing finished requests, and clears it
when the next iteration begins, once the step record holds its calls. The call
rules of the checker (duplicate registration, phantom release) read those, so
each entry also carries the facts *at call time* that those rules need,
which a later snapshot can no longer see.
"""

from __future__ import annotations

from typing import Literal

import attrs

from peftlife.world.immutable import copied_by_field, immutable
from peftlife.world.residency import Residency

# Who made a call: the scheduler's pass; the executor preparing the batch, tearing
# down the pass's recompute-paused requests (recompute_teardown = "upstream"), or
# freeing what ended; or the harness (a cancel, a drain).
Caller = Literal[
    "scheduler", "prepare_resources", "recompute_teardown", "free_resources", "harness"
]
Component = Literal["target", "draft", "peft"]
# Every manager call the ledger records, by upstream's name: a KV pool's, then the PEFT
# manager's. Written once here; mypy's strict equality refuses a comparison of a call's
# method with any other name, so a misspelt one cannot silently never match.
KvMethod = Literal[
    "prepare_context",
    "resize_context",
    "try_allocate_draft_context",
    "revert_allocate_context",
    "try_allocate_generation",
    "revert_allocate_generation",
    "suspend_request",
    "free_resources",
    "preempt_request",
]
PeftMethod = Literal["add_request_peft", "mark_request_done", "ensure_batch"]
Method = Literal[KvMethod, PeftMethod]
# The KV calls that free a request's cache.
_FREES: frozenset[Method] = frozenset({"free_resources", "preempt_request"})
# Why a KV allocation failed: a fault the nemesis injected, or no room on the device.
Fault = Literal["refused_resume", "failed_grow", "no_device_room"]
# What a call returned: a KV allocation's success, a PEFT call's word ("ok", or why
# not), None for a call that returns nothing.
Result = bool | str | None


@immutable
@attrs.frozen
class Args:
    """The arguments of a PEFT call that the checker and the reports read.

    None where the call was not given one (a KV call records none of these).
    """

    task_id: int | None = None  # the request's adapter, on every call about a request
    pause: bool | None = None  # mark_request_done: keep the adapter pinned on host
    tasks: tuple[int, ...] | None = None  # ensure_batch: the batch's adapters, in order


# Backed by a dict, not slots: a frozen record with slots sets each field through
# ``object.__setattr__``, and one of these is built for every manager call.
@immutable
@attrs.frozen(slots=False)
class Facts:
    """What a manager saw when it was called, which a later snapshot can no longer see.

    A record, not string keys: reading a fact no writer sets is a mypy error (or an
    AttributeError), never a silent None that turns a check off. A fact is None
    where the call has none of it.
    """

    # KV calls: the request's residency in the pool before and after the call
    # (SUSPENDED then ACTIVE is a resume).
    before: Residency | None = None
    after: Residency | None = None
    # A failed KV allocation: what stopped it.
    fault: Fault | None = None
    created: bool | None = None  # prepare_context made a new cache
    num_tokens: int | None = None  # context growth: the tokens asked for
    # Context growth: the capacity aimed for; revert_allocate_context: the one restored.
    capacity: int | None = None
    moved_to_host: bool | None = None  # suspend_request moved the pages to the lower tier
    # free_resources and preempt_request: the request had a cache in this pool, started.
    had_cache: bool | None = None
    started: bool | None = None  # also add_request_peft: the request had started
    # KV frees: the cache was ACTIVE; mark_request_done: the request was in the
    # adapter's active set.
    was_active: bool | None = None
    # PEFT calls about a request with an adapter: was it in the active / paused set.
    was_paused: bool | None = None
    already_active: bool | None = None
    registered_before: bool | None = None  # add_request_peft: registered at some point before
    # mark_request_done: the adapter's device / host cache entry went done.
    released_device: bool | None = None
    released_host: bool | None = None
    evicted: tuple[int, ...] | None = None  # ensure_batch: adapters the device cache evicted
    # add_request_peft: the adapter was not cached and was loaded from the LoRA path.
    reloaded: bool | None = None


# The facts of the calls that carry nothing but residency and a fault, by those: a
# one-token grow is made for every generation request in every iteration, and sharing
# its few kinds of facts leaves the garbage collector fewer objects to walk.
# Keyed by the residencies' values: an enum member hashes through a Python call.
_RESIDENCY_FACTS: dict[tuple[str, str, Fault | None], Facts] = {}


def residency_facts(before: Residency, after: Residency, fault: Fault | None = None) -> Facts:
    """``Facts(before=before, after=after, fault=fault)``, one shared record for each.

    >>> residency_facts(Residency.ACTIVE, Residency.ACTIVE) is residency_facts(
    ...     Residency.ACTIVE, Residency.ACTIVE)
    True
    """
    key = (before._value_, after._value_, fault)
    facts = _RESIDENCY_FACTS.get(key)
    if facts is None:
        facts = _RESIDENCY_FACTS[key] = Facts(before=before, after=after, fault=fault)
    return facts


def given(record: Args | Facts) -> dict[str, object]:
    """The fields a call set, by name in the record's order: what a report shows.

    >>> given(Facts(fault="failed_grow", had_cache=False))
    {'fault': 'failed_grow', 'had_cache': False}
    """
    return {k: v for k, v in attrs.asdict(record, recurse=False).items() if v is not None}


@immutable
@attrs.frozen
class Call:
    """One manager call: who made it, its arguments and result, and the facts at call time.

    >>> call = Call(3, "scheduler", "peft", "add_request_peft", 1, Args(task_id=7))
    >>> call.args.task_id, call.facts.already_active
    (7, None)
    """

    iteration: int
    caller: Caller
    component: Component
    method: Method
    request_id: int | None
    args: Args = attrs.field(factory=Args)
    result: Result = None
    facts: Facts = attrs.field(factory=Facts)

    @property
    def frees_started_request(self) -> bool:
        """The scheduler freed a started request's target cache: a recompute pause
        or a preemption (an unstarted first chunk being rewound is not one)."""
        return (
            self.caller == "scheduler"
            and self.component == "target"
            and self.method in _FREES
            and bool(self.facts.started)
            and bool(self.facts.had_cache)
        )


# The records of a call that sets none: frozen, so every such call can share one.
_NO_ARGS, _NO_FACTS = Args(), Facts()


@copied_by_field
@attrs.define
class CallLedger:
    """The calls of the current iteration, in order: appended as they are made, cleared
    by the engine when the next iteration begins (the step record keeps them).

    >>> ledger = CallLedger()
    >>> ledger.record("peft", "mark_request_done", 3, args=Args(task_id=1, pause=True))
    >>> ledger.calls[0].method
    'mark_request_done'
    """

    iteration: int = 0
    caller: Caller = "harness"
    calls: list[Call] = attrs.field(factory=list)

    def record(
        self,
        component: Component,
        method: Method,
        request_id: int | None,
        *,
        args: Args | None = None,
        result: Result = None,
        facts: Facts | None = None,
    ) -> None:
        self.calls.append(
            Call(
                iteration=self.iteration,
                caller=self.caller,
                component=component,
                method=method,
                request_id=request_id,
                args=_NO_ARGS if args is None else args,
                result=result,
                facts=_NO_FACTS if facts is None else facts,
            )
        )
