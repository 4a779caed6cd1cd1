"""Hand-built snapshots for the checker's tests: a small consistent world and its breaks.

``baseline()`` is a clean world after iteration 3 (one running request owning
adapter 7, one waiting request, one KV pool with consistent pages, both LoRA
caches); tests break one thing at a time with ``attrs.evolve`` and the ``with_*``
helpers. ``BREAKS`` breaks each invariant once; ``empty_world()`` is a drained
world. The checker's tests (tests/checker/test_invariants.py) and the renderings' tests
(tests/reports/test_subjects.py) build from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from peftlife.world.kv import NO_CACHE, CacheView, PoolView
from peftlife.world.ledger import Args, Call, Caller, Component, Facts
from peftlife.world.peft import CacheEntryView
from peftlife.world.request import LlmRequestState
from peftlife.world.residency import Residency
from peftlife.world.snapshot import (
    AdapterView,
    FieldWrite,
    ListedView,
    LoraCacheView,
    OutputRecord,
    RequestView,
    ScheduledView,
    Snapshot,
    StepError,
    StepRecord,
)

CTX = LlmRequestState.CONTEXT_INIT
GEN = LlmRequestState.GENERATION_IN_PROGRESS
DONE_STATE = LlmRequestState.GENERATION_COMPLETE
ACTIVE = Residency.ACTIVE
SUSPENDED = Residency.SUSPENDED
NONE = Residency.NONE

ITERATION = 3
TASK = 7
ADAPTER_PAGES = 2
IN_USE = CacheEntryView(ADAPTER_PAGES, True)
DONE = CacheEntryView(ADAPTER_PAGES, False)

# Request 1 runs: prompt 4, one token generated, KV capacity 5 in 2 pages of 4 tokens.
RUNNING_KV = CacheView(ACTIVE, capacity=5, device_pages=2, host_pages=0)
SUSPENDED_KV = CacheView(SUSPENDED, capacity=5, device_pages=0, host_pages=2)


# ---- a request, an adapter, a pool, a step ----


def running(request_id: int = 1, **changes: object) -> RequestView:
    """A started generation request, registered, KV ACTIVE in the target pool."""
    view = RequestView(
        request_id=request_id,
        lora_task_id=TASK,
        state=GEN,
        position=4,
        context_len=4,
        num_generated=1,
        max_new_tokens=4,
        started=True,
        ever_registered=True,
        recompute_pending=False,
        target=RUNNING_KV,
        draft=None,
    )
    return attrs.evolve(view, **changes)


def waiting(request_id: int = 2, **changes: object) -> RequestView:
    """An unstarted context request that never registered and holds no KV."""
    view = RequestView(
        request_id=request_id,
        lora_task_id=TASK,
        state=CTX,
        position=0,
        context_len=6,
        num_generated=0,
        max_new_tokens=2,
        started=False,
        ever_registered=False,
        recompute_pending=False,
        target=NO_CACHE,
        draft=None,
    )
    return attrs.evolve(view, **changes)


def adapter(
    active: Iterable[int] = (1,),
    paused: Iterable[int] = (),
    device: CacheEntryView | None = IN_USE,
    host: CacheEntryView | None = IN_USE,
    task_id: int = TASK,
) -> AdapterView:
    return AdapterView(task_id, frozenset(active), frozenset(paused), device, host)


def pool(
    name: str = "target", holders: tuple[tuple[int, int, int], ...] = ((1, 2, 0),)
) -> PoolView:
    """A pool of 8 device and 4 host pages whose free counts match ``holders``."""
    return PoolView(
        name=name,
        device_capacity=8,
        device_free=8 - sum(h[1] for h in holders),
        host_capacity=4,
        host_free=4 - sum(h[2] for h in holders),
        holders=holders,
    )


def lora_caches(entry: CacheEntryView = IN_USE) -> tuple[LoraCacheView, ...]:
    return (
        LoraCacheView("device", 4, 4 - entry.pages, ((TASK, entry),)),
        LoraCacheView("host", 8, 8 - entry.pages, ((TASK, entry),)),
    )


def listed(request_id: int, where: str, **changes: object) -> ListedView:
    """A listed request, well formed for its list unless ``changes`` say otherwise."""
    defaults: dict[str, dict[str, object]] = {
        "context": dict(state=CTX, started=False, target=NONE, chunk_size=6, context_remaining=6),
        "generation": dict(state=GEN, started=True, target=ACTIVE),
        "paused": dict(state=GEN, started=True, target=SUSPENDED),
        "recompute_paused": dict(state=GEN, started=True, target=NONE, started_before=True),
    }
    fields: dict[str, object] = dict(
        request_id=request_id,
        output_list=where,
        live=True,
        schedulable=True,
        draft=None,
        **defaults[where],
    )
    fields.update(changes)
    return ListedView(**fields)  # type: ignore[arg-type]


def output(*views: ListedView) -> OutputRecord:
    """An output record whose id lists agree with its listed views."""

    def ids(where: str) -> tuple[int, ...]:
        return tuple(v.request_id for v in views if v.output_list == where)

    return OutputRecord(
        context=ids("context"),
        generation=ids("generation"),
        paused=ids("paused"),
        recompute_paused=ids("recompute_paused"),
        listed=views,
    )


def call(
    method: str,
    request_id: int | None,
    *,
    caller: Caller = "scheduler",
    component: Component = "peft",
    args: Args | None = None,
    result: object = None,
    **facts: object,
) -> Call:
    return Call(
        iteration=ITERATION,
        caller=caller,
        component=component,
        method=method,
        request_id=request_id,
        args=Args() if args is None else args,
        result=result,
        facts=Facts(**facts),
    )


def peft_args(pause: bool | None = None) -> Args:
    return Args(task_id=TASK, pause=pause)


def baseline(*, draft: bool = False) -> Snapshot:
    """The clean world after iteration 3: request 1 generated a token, request 2 waits.

    With ``draft``, a draft pool mirrors the target pool.
    """
    r1_draft = RUNNING_KV if draft else None
    r2_draft = NO_CACHE if draft else None
    step = StepRecord(
        iteration=ITERATION,
        output=output(listed(1, "generation", draft=ACTIVE if draft else None)),
        batch_ran=True,
        after_prepare=(ScheduledView(1, TASK, True, RUNNING_KV, r1_draft, tokens_needed=5),),
        calls=(
            call("try_allocate_generation", 1, component="target", result=True),
            *((call("try_allocate_generation", 1, component="draft", result=True),) * draft),
            call(
                "ensure_batch",
                None,
                caller="prepare_resources",
                args=Args(tasks=(TASK,)),
                result="ok",
            ),
        ),
        errors=(),
    )
    return Snapshot(
        iteration=ITERATION,
        requests=(running(draft=r1_draft), waiting(draft=r2_draft)),
        ended=(),
        adapters=(adapter(),),
        pools=(pool(),) + ((pool("draft"),) if draft else ()),
        lora_caches=lora_caches(),
        step=step,
    )


def with_requests(s: Snapshot, *views: RequestView) -> Snapshot:
    return attrs.evolve(s, requests=views)


def with_adapter(s: Snapshot, a: AdapterView) -> Snapshot:
    return attrs.evolve(s, adapters=(a,))


def with_step(s: Snapshot, **changes: object) -> Snapshot:
    assert s.step is not None
    return attrs.evolve(s, step=attrs.evolve(s.step, **changes))


def with_output(s: Snapshot, *views: ListedView) -> Snapshot:
    return with_step(s, output=output(*views))


def with_calls(s: Snapshot, *calls: Call) -> Snapshot:
    return with_step(s, calls=calls)


def with_errors(s: Snapshot, *errors: StepError) -> Snapshot:
    return with_step(s, errors=errors)


# One break per invariant: (invariant, breaking function, subject). Each break
# must fire its invariant; the baseline (the near-identical clean world) must not.
BREAKS: list[tuple[str, Callable[[Snapshot], Snapshot], str]] = [
    (
        "ownership_follows_residency",
        lambda s: with_adapter(s, adapter(active=(), paused=(1,))),
        "request 1 (adapter 7)",
    ),
    (
        "exclusive_ownership",
        lambda s: with_adapter(s, adapter(active=(1,), paused=(1,))),
        "adapter 7",
    ),
    ("no_phantom_owner", lambda s: with_adapter(s, adapter(active=(1, 99))), "adapter 7"),
    (
        "no_duplicate_registration",
        lambda s: with_calls(
            s, call("add_request_peft", 1, args=peft_args(), result="ok", already_active=True)
        ),
        "request 1 (adapter 7)",
    ),
    (
        "device_pin_follows_ownership",
        lambda s: with_adapter(s, adapter(device=DONE)),
        "adapter 7",
    ),
    (
        "host_pin_follows_ownership",
        lambda s: with_adapter(s, adapter(host=DONE)),
        "adapter 7",
    ),
    (
        "scheduled_owned_and_resident",
        lambda s: with_step(s, after_prepare=(ScheduledView(1, TASK, False, RUNNING_KV, None, 5),)),
        "scheduled request 1 (adapter 7)",
    ),
    (
        "output_lists_well_formed",
        lambda s: with_output(s, listed(1, "generation"), listed(1, "paused")),
        "request 1",
    ),
    (
        "scheduler_writes_only_its_own",
        lambda s: with_step(s, writes=(FieldWrite(1, "num_generated", "1", "4"),)),
        "request 1",
    ),
    (
        "draft_mirrors_target",
        lambda s: with_requests(s, running(draft=SUSPENDED_KV), waiting()),
        "request 1 (adapter 7)",
    ),
    (
        "pages_conserved",
        lambda s: attrs.evolve(s, pools=(attrs.evolve(pool(), device_free=7),)),
        "target pool, device tier",
    ),
    (
        "no_scheduler_caused_fault",
        lambda s: with_errors(s, StepError("ensure_batch_failed", "ensure_batch raised")),
        "the batch",
    ),
    (
        "nothing_after_teardown",
        lambda s: with_calls(
            s,
            call("free_resources", 1, caller="recompute_teardown", component="target"),
            # A second free is upstream's own and idempotent; a registration is not.
            call("free_resources", 1, caller="free_resources", component="target"),
            call("add_request_peft", 1, caller="prepare_resources", args=peft_args(), result="ok"),
        ),
        "request 1",
    ),
    (
        "scheduler_protocol",
        lambda s: with_errors(s, StepError("scheduler_raised", "schedule_request raised")),
        "the scheduler",
    ),
]


def phantom_release(**detail: object) -> Call:
    defaults: dict[str, object] = dict(
        was_active=False, was_paused=False, released_device=False, released_host=False
    )
    defaults.update(detail)
    return call("mark_request_done", 2, args=peft_args(pause=True), **defaults)


def scheduled(**changes: object) -> ScheduledView:
    return attrs.evolve(ScheduledView(1, TASK, True, RUNNING_KV, None, 5), **changes)


def refused(result: str, registered_before: bool, caller: Caller = "scheduler") -> Call:
    return call(
        "add_request_peft",
        2,
        caller=caller,
        args=peft_args(),
        result=result,
        registered_before=registered_before,
    )


def empty_world(**changes: object) -> Snapshot:
    world = Snapshot(
        iteration=9,
        requests=(),
        ended=((1, "finished"),),
        adapters=(adapter(active=(), device=DONE, host=DONE),),
        pools=(pool(holders=()),),
        lora_caches=lora_caches(DONE),
        step=None,
    )
    return attrs.evolve(world, **changes)
