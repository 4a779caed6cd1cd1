"""The checker's rules as pure functions of a snapshot, and what a violation says.

Each function judges one invariant of docs/invariants.md and yields the
violations it finds under the invariant's stable snake_case name (reports, CI
filters and the mutant catalogue use it), each naming the request or adapter,
what was expected and what was found. Which rules run in which world, in what
order, what each means and where it comes from is the registry's
(``checker.registry``); the drain, invariant 12, needs an engine to step
(``checker.drain``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import attrs

from peftlife.world import output
from peftlife.world.ledger import Call, Method
from peftlife.world.request import LlmRequestState
from peftlife.world.residency import Residency
from peftlife.world.snapshot import AdapterView, OverlapStep, RequestView, Snapshot


@attrs.frozen
class Subject:
    """What a violation is about: the requests and adapters it marks in every rendering,
    and the words around them. The text is made from these fields, never parsed back.

    >>> str(Subject(requests=(3,), lead="scheduled", context="adapter 2"))
    'scheduled request 3 (adapter 2)'
    >>> str(Subject(adapters=(7,))), str(Subject(requests=(1,), as_list=True))
    ('adapter 7', 'requests [1]')
    >>> str(Subject(lead="target pool, device tier"))
    'target pool, device tier'
    """

    requests: tuple[int, ...] = ()
    adapters: tuple[int, ...] = ()
    # Words, which mark no row. ``lead`` comes before the ids ("scheduled"), or is the
    # whole subject when it names no request or adapter ("the batch"); ``context`` is
    # said in brackets after them ("adapter 2" after a request: its adapter, not a subject).
    lead: str = ""
    context: str = ""
    # The ids as a list even when there is one ("requests [1]": the drain's live requests).
    as_list: bool = False

    def __str__(self) -> str:
        named = [
            f"{noun} {ids[0]}" if len(ids) == 1 and not self.as_list else f"{noun}s {list(ids)}"
            for noun, ids in (("request", self.requests), ("adapter", self.adapters))
            if ids
        ]
        text = " ".join(w for w in (self.lead, *named) if w)
        return f"{text} ({self.context})" if self.context else text


@attrs.frozen
class Violation:
    """One broken rule.

    >>> str(Violation("exclusive_ownership", Subject(adapters=(2,)), "one set", "both", 7))
    'exclusive_ownership: adapter 2 at iteration 7: expected one set, found both'
    """

    invariant: str
    subject: Subject
    expected: str
    found: str
    iteration: int = 0

    def __str__(self) -> str:
        return (
            f"{self.invariant}: {self.subject} at iteration {self.iteration}: "
            f"expected {self.expected}, found {self.found}"
        )


Check = Callable[[Snapshot], Iterator[Violation]]


def _request(rid: int | None, lora: int | None, lead: str = "") -> Subject:
    """A request, with its adapter said in brackets: context, so it marks no adapter row."""
    adapter = "no adapter" if lora is None else f"adapter {lora}"
    return Subject(_ids(rid), lead=lead, context=adapter)


def _ids(rid: int | None) -> tuple[int, ...]:
    """A call's request as a subject's ids (a call on no request has none)."""
    return () if rid is None else (rid,)


def owned(view: RequestView, adapters: dict[int, AdapterView]) -> str:
    """Which of the adapter's sets hold the request: active, paused, both or none."""
    adapter = adapters.get(view.lora_task_id) if view.lora_task_id is not None else None
    if adapter is None:
        return "none"
    in_active = view.request_id in adapter.active
    in_paused = view.request_id in adapter.paused
    if in_active:
        return "both" if in_paused else "active"
    return "paused" if in_paused else "none"


# What a recompute-pending request may own after upstream's executor tore it down:
# paused (the scheduler released it with pause and the executor left it, or the C++
# runtime's pause) or nothing (upstream's PyExecutor terminates it). Never active: it
# holds no KV, so it must not pin its adapter on the device.
NOT_ACTIVE = "paused or none"
# A started context request resumed but not run in this iteration: upstream's executor
# registers every context request it runs (resource_manager.py, PeftCacheManager
# prepare_resources), so until then paused is as good as active.
ACTIVE_OR_PAUSED = "active or paused"


def expected_ownership(
    view: RequestView, scheduler_tears_down: bool = False, scheduled: bool = True
) -> str | None:
    """What invariant 1 says a request must own, or None where it says nothing.

    >>> from peftlife.world.kv import NO_CACHE
    >>> from peftlife.world.request import LlmRequestState
    >>> v = RequestView(1, 7, LlmRequestState.CONTEXT_INIT, 0, 4, 0, 2, False, False,
    ...                 False, NO_CACHE, None)
    >>> expected_ownership(v)
    'none'
    """
    residency = view.target.residency
    if view.recompute_pending:
        # Upstream's executor terminates the ownership (py_executor.py,
        # _terminate_recompute_paused_requests); only where the executor leaves the
        # teardown to the scheduler (opt-in) must the scheduler have paused it.
        return "paused" if scheduler_tears_down else NOT_ACTIVE
    if view.started and residency is Residency.SUSPENDED:
        return "paused"
    if view.started and residency is Residency.ACTIVE:
        if view.state is LlmRequestState.CONTEXT_INIT and not scheduled:
            return ACTIVE_OR_PAUSED
        return "active"
    if not view.started and not view.ever_registered:
        return "none"
    return None


def _owns_as_expected(expected: str, found: str) -> bool:
    if expected == NOT_ACTIVE:
        return found in ("paused", "none")
    if expected == ACTIVE_OR_PAUSED:
        return found in ("active", "paused")
    return found == expected


def ownership_follows_residency(s: Snapshot) -> Iterator[Violation]:
    adapters = {a.task_id: a for a in s.adapters}
    scheduler_tears_down = s.step is not None and s.step.scheduler_tears_down
    scheduled = {v.request_id for v in s.step.after_prepare} if s.step is not None else set()
    for view in s.requests:
        if view.lora_task_id is None:
            continue
        expected = expected_ownership(view, scheduler_tears_down, view.request_id in scheduled)
        found = owned(view, adapters)
        if expected is not None and not _owns_as_expected(expected, found):
            why = (
                "recompute-pending"
                if view.recompute_pending
                else f"{'started' if view.started else 'unstarted'}, "
                f"KV {view.target.residency.value}"
            )
            yield Violation(
                "ownership_follows_residency",
                _request(view.request_id, view.lora_task_id),
                f"{expected} ({why})",
                found,
                s.iteration,
            )


def exclusive_ownership(s: Snapshot) -> Iterator[Violation]:
    for a in s.adapters:
        for rid in sorted(a.active & a.paused):
            yield Violation(
                "exclusive_ownership",
                Subject(adapters=(a.task_id,)),
                f"request {rid} in at most one of active and paused",
                "in both",
                s.iteration,
            )


def no_phantom_owner(s: Snapshot) -> Iterator[Violation]:
    live = {v.request_id: v for v in s.requests}
    for a in s.adapters:
        for set_name, ids in (("active", a.active), ("paused", a.paused)):
            for rid in sorted(ids):
                view = live.get(rid)
                if view is None:
                    found = "a request that is no longer live"
                elif not view.ever_registered:
                    found = "a request that never registered"
                else:
                    continue
                yield Violation(
                    "no_phantom_owner",
                    Subject(adapters=(a.task_id,)),
                    f"{set_name} to hold only live, registered requests",
                    f"request {rid}, {found}",
                    s.iteration,
                )
    for call in s.step.calls if s.step else ():
        if (
            call.method == "mark_request_done"
            and call.args.pause
            and call.facts.was_active is False
            and call.facts.was_paused is False
        ):
            yield Violation(
                "no_phantom_owner",
                _request(call.request_id, call.args.task_id),
                "a release with pause only of a request that owns the adapter",
                f"mark_request_done(pause=True) by the {call.caller} on a request owning nothing",
                s.iteration,
            )


# KV calls that grow a cache (their result says whether it worked), and those that
# leave it without this pass's allocation.
_GROWS: frozenset[Method] = frozenset({"try_allocate_generation", "resize_context"})
_UNDOES: frozenset[Method] = frozenset(
    {"revert_allocate_generation", "suspend_request", "free_resources"}
)


@attrs.define
class _KvTrack:
    """One request's KV as the scheduler's calls of one pass moved it."""

    resumed: bool = False  # target went SUSPENDED -> ACTIVE in this pass
    active: bool = False  # target ACTIVE after the last target call
    allocated: dict[str, bool] = attrs.field(factory=dict)  # last allocation outcome per pool

    def follow(self, call: Call) -> None:
        pool = call.component
        if pool == "target":
            self.active = call.facts.after is Residency.ACTIVE
            self.resumed |= call.facts.before is Residency.SUSPENDED and self.active
        if call.method in _GROWS:
            self.allocated[pool] = bool(call.result)
        elif call.method in _UNDOES:
            self.allocated[pool] = False


def _registration_problem(
    call: Call, kv: _KvTrack, pools: int, pending: bool, again: bool
) -> str | None:
    """What is wrong with one registration by the scheduler, or None (invariant 4)."""
    if call.facts.already_active:
        return "the scheduler registered it again while it was in active"
    if again:
        return "the scheduler registered it a second time in one pass"
    if call.facts.started is False:
        return "the scheduler registered a request that has not started (the executor's to do)"
    if pending:
        return (
            "the scheduler registered a recompute-pending request "
            "(the executor registers it when its first chunk runs again)"
        )
    if not kv.resumed:
        return "the scheduler registered a request it did not resume in this pass"
    allocated = kv.allocated.get("target", False) and (
        pools < 2 or kv.allocated.get("draft", False)
    )
    if not (kv.active and allocated):
        return "the scheduler registered it before its allocation succeeded"
    return None


def no_duplicate_registration(s: Snapshot) -> Iterator[Violation]:
    if s.step is None:
        return
    # Only the requests the scheduler registers are followed: a pass over 3,000
    # requests that registers none would otherwise make a track for each.
    registering = {
        call.request_id
        for call in s.step.calls
        if call.caller == "scheduler"
        and call.component == "peft"
        and call.method == "add_request_peft"
        and call.args.task_id is not None
        and call.request_id is not None
    }
    if not registering:
        return
    pending = set(s.step.recompute_pending_before)
    tracks: dict[int, _KvTrack] = {}
    registered: set[int] = set()
    for call in s.step.calls:
        rid = call.request_id
        if call.caller != "scheduler" or rid is None or rid not in registering:
            continue
        if call.frees_started_request:
            pending.add(rid)
        if call.component != "peft":
            track = tracks.get(rid)
            if track is None:
                track = tracks[rid] = _KvTrack()
            track.follow(call)
        elif call.method == "add_request_peft" and call.args.task_id is not None:
            problem = _registration_problem(
                call, tracks.get(rid, _KvTrack()), len(s.pools), rid in pending, rid in registered
            )
            registered.add(rid)
            if problem is not None:
                yield Violation(
                    "no_duplicate_registration",
                    _request(rid, call.args.task_id),
                    "add_request_peft by the scheduler only for a started request it resumed "
                    "in this pass, after its allocation succeeded, once",
                    problem,
                    s.iteration,
                )


def device_pin_follows_ownership(s: Snapshot) -> Iterator[Violation]:
    for a in s.adapters:
        in_use = a.device is not None and a.device.in_use
        if bool(a.active) != in_use:
            device = "absent" if a.device is None else ("in use" if in_use else "done")
            yield Violation(
                "device_pin_follows_ownership",
                Subject(adapters=(a.task_id,)),
                "in use on the device" if a.active else "not in use on the device (no owner)",
                f"device entry {device} with active owners {sorted(a.active)}",
                s.iteration,
            )


def host_pin_follows_ownership(s: Snapshot) -> Iterator[Violation]:
    for a in s.adapters:
        if (a.active or a.paused) and not (a.host is not None and a.host.in_use):
            yield Violation(
                "host_pin_follows_ownership",
                Subject(adapters=(a.task_id,)),
                "in use on the host while it has owners",
                f"host entry {'absent' if a.host is None else 'done'} with active "
                f"{sorted(a.active)}, paused {sorted(a.paused)}",
                s.iteration,
            )


def scheduled_owned_and_resident(s: Snapshot) -> Iterator[Violation]:
    for view in s.step.after_prepare if s.step else ():
        if view.lora_task_id is not None and s.lora_caches and not view.owned_active:
            yield Violation(
                "scheduled_owned_and_resident",
                _request(view.request_id, view.lora_task_id, lead="scheduled"),
                "in active after prepare_resources",
                "not in active",
                s.iteration,
            )
        for pool, cache in (("target", view.target), ("draft", view.draft)):
            if cache is None:
                continue
            if cache.residency is not Residency.ACTIVE:
                yield Violation(
                    "scheduled_owned_and_resident",
                    Subject((view.request_id,), lead="scheduled"),
                    f"{pool} KV active",
                    f"{pool} KV {cache.residency.value}",
                    s.iteration,
                )
            elif cache.capacity < view.tokens_needed:
                yield Violation(
                    "scheduled_owned_and_resident",
                    Subject((view.request_id,), lead="scheduled"),
                    f"{pool} KV capacity of at least {view.tokens_needed} tokens",
                    f"capacity {cache.capacity}",
                    s.iteration,
                )


def output_lists_well_formed(s: Snapshot) -> Iterator[Violation]:
    out = s.step.output if s.step else None
    if out is None:
        return
    # The rules of the output are the world's (world/output.py): the engine refuses
    # to run a batch by the same ones.
    for flaw in output.flaws(out):
        rid = flaw.request_id
        subject = Subject(lead="the batch") if rid is None else Subject((rid,))
        yield Violation("output_lists_well_formed", subject, flaw.expected, flaw.found, s.iteration)
    # This one needs the pass's calls, which the output alone does not show.
    recompute_paused = set(out.recompute_paused)
    for call in s.step.calls if s.step else ():
        if call.frees_started_request and call.request_id not in recompute_paused:
            yield Violation(
                "output_lists_well_formed",
                Subject((call.request_id or 0,)),
                "a started request whose KV the scheduler freed listed as recompute-paused",
                "freed but not listed",
                s.iteration,
            )


def scheduler_writes_only_its_own(s: Snapshot) -> Iterator[Violation]:
    for w in s.step.writes if s.step else ():
        yield Violation(
            "scheduler_writes_only_its_own",
            Subject((w.request_id,)),
            f"{w.field} left as it was ({w.before}): only context_chunk_size is the scheduler's",
            f"the scheduler changed {w.field} from {w.before} to {w.after}",
            s.iteration,
        )


def draft_mirrors_target(s: Snapshot) -> Iterator[Violation]:
    for view in s.requests:
        if view.draft is not None and view.draft.residency != view.target.residency:
            yield Violation(
                "draft_mirrors_target",
                _request(view.request_id, view.lora_task_id),
                f"draft KV {view.target.residency.value}, as the target",
                f"draft KV {view.draft.residency.value}",
                s.iteration,
            )


def pages_conserved(s: Snapshot) -> Iterator[Violation]:
    live = s.live_ids
    for pool in s.pools:
        # One pass over the holders: both tiers' sums, and any holder that is not live.
        device_held = host_held = 0
        dead = []
        for holder in pool.holders:
            rid, device, host = holder
            device_held += device
            host_held += host
            if rid not in live:
                dead.append(holder)
        for tier, free, capacity, held in (
            ("device", pool.device_free, pool.device_capacity, device_held),
            ("host", pool.host_free, pool.host_capacity, host_held),
        ):
            if free + held != capacity or free < 0:
                yield Violation(
                    "pages_conserved",
                    Subject(lead=f"{pool.name} pool, {tier} tier"),
                    f"free + held = {capacity}",
                    f"{free} free + {held} held",
                    s.iteration,
                )
        for rid, device, host in dead:
            yield Violation(
                "pages_conserved",
                Subject(lead=f"{pool.name} pool"),
                "no cache for a request that is not live",
                f"request {rid} holds {device} device and {host} host pages",
                s.iteration,
            )
    for cache in s.lora_caches:
        held = sum(e.pages for _, e in cache.entries)
        if cache.free + held != cache.capacity:
            yield Violation(
                "pages_conserved",
                Subject(lead=f"{cache.name} LoRA cache"),
                f"free + held = {cache.capacity}",
                f"{cache.free} free + {held} held",
                s.iteration,
            )


def no_scheduler_caused_fault(s: Snapshot) -> Iterator[Violation]:
    for err in s.step.errors if s.step else ():
        if err.kind == "ensure_batch_failed":
            yield Violation(
                "no_scheduler_caused_fault",
                Subject(lead="the batch"),
                "no PEFT fault for a batch the scheduler produced",
                err.message,
                s.iteration,
            )
    for call in s.step.calls if s.step else ():
        if (
            call.method == "add_request_peft"
            and call.result == "not_cached"
            and call.facts.registered_before
        ):
            yield Violation(
                "no_scheduler_caused_fault",
                Subject(_ids(call.request_id)),
                "no PEFT fault for a batch the scheduler produced",
                f"add_request_peft({call.request_id}) by the {call.caller.replace('_', ' ')} "
                f"raised PeftTaskNotCachedException for a request registered before",
                s.iteration,
            )


# The residencies a call leaves a cache in when it takes it off the device.
_LEAVES_DEVICE = frozenset({Residency.SUSPENDED, Residency.NONE})
# Calls that take pages from a cache and leave it ACTIVE: the executor's own undo of
# a held batch's growth is its business, a scheduler's on a request on the device is not.
_SHRINKS: frozenset[Method] = frozenset({"revert_allocate_generation", "revert_allocate_context"})


def _takes_from_device(call: Call, cache: str) -> str | None:
    """How a KV call took a request's ``cache`` (or part of it) off the device, or None."""
    if call.component == "peft":
        return None
    if call.facts.before is Residency.ACTIVE and call.facts.after in _LEAVES_DEVICE:
        return f"left {cache} {call.facts.after.value}"
    if call.caller == "scheduler" and call.method in _SHRINKS:
        return f"took pages from {cache}"
    return None


def retiring_keeps_its_place(s: Snapshot) -> Iterator[Violation]:
    step = s.step
    if step is None:
        return
    # Its last step is read back and freed within the iteration, so a retiring request
    # the pass took off the device is judged by the calls, not by the end state.
    retiring = set((step.overlap or OverlapStep()).retiring)
    for call in step.calls:
        if call.request_id not in retiring or call.caller == "free_resources":
            continue
        taken = _takes_from_device(call, f"its {call.component} KV")
        if taken is not None or call.method == "mark_request_done":
            left = f" {taken}" if taken is not None else ""
            yield Violation(
                "retiring_keeps_its_place",
                Subject(_ids(call.request_id), lead="retiring"),
                "KV active and its adapter owned until its last token is read back",
                f"{call.method} by the {call.caller.replace('_', ' ')}{left}",
                s.iteration,
            )
    adapters = {a.task_id: a for a in s.adapters}
    for view in s.requests:
        if view.state is not LlmRequestState.GENERATION_TO_COMPLETE:
            continue
        for pool, cache in (("target", view.target), ("draft", view.draft)):
            if cache is not None and cache.residency is not Residency.ACTIVE:
                yield Violation(
                    "retiring_keeps_its_place",
                    _request(view.request_id, view.lora_task_id, lead="retiring"),
                    f"{pool} KV active until its last token is read back",
                    f"{pool} KV {cache.residency.value}",
                    s.iteration,
                )
        if view.lora_task_id is not None and s.lora_caches:
            found = owned(view, adapters)
            if found != "active":
                yield Violation(
                    "retiring_keeps_its_place",
                    _request(view.request_id, view.lora_task_id, lead="retiring"),
                    "its adapter owned actively until it is freed",
                    found,
                    s.iteration,
                )


def in_flight_pin(s: Snapshot) -> Iterator[Violation]:
    step = s.step
    if step is None:
        return
    members = set((step.overlap or OverlapStep()).in_flight)
    adapters: set[int] = set()
    for call in step.calls:
        if call.caller == "free_resources" and call.component != "peft":
            # The executor frees what ended after the read-back; its recompute
            # teardown comes before it, and does count.
            continue
        if call.request_id in members and call.args.task_id is not None:
            adapters.add(call.args.task_id)
        rid = call.request_id
        taken = _takes_from_device(call, "it") if rid is not None and rid in members else None
        if rid is not None and taken is not None:
            yield Violation(
                "in_flight_pin",
                Subject((rid,), lead="in-flight"),
                f"{call.component} KV kept while its batch is on the device",
                f"{call.method} by the {call.caller.replace('_', ' ')} {taken}",
                s.iteration,
            )
    adapters |= {v.lora_task_id for v in s.requests if v.request_id in members and v.lora_task_id}
    for call in step.calls:
        for task in call.facts.evicted or () if call.method == "ensure_batch" else ():
            if task in adapters:
                yield Violation(
                    "in_flight_pin",
                    Subject(adapters=(task,)),
                    "in use on the device while the batch on it uses it",
                    "evicted from the device cache by ensure_batch",
                    s.iteration,
                )


# KV calls that allocate, and PEFT calls that register or pin: none is idempotent.
_NOT_IDEMPOTENT: frozenset[Method] = frozenset(
    {"prepare_context", "resize_context", "try_allocate_generation", "add_request_peft"}
)
# The executor's teardown calls: a free, or a release of the adapter.
_TEARS_DOWN: frozenset[Method] = frozenset({"free_resources", "mark_request_done"})


def nothing_after_teardown(s: Snapshot) -> Iterator[Violation]:
    step = s.step
    if step is None:
        return
    torn_down: dict[int, str] = {}
    for call in step.calls:
        rid = call.request_id
        if rid is None:
            continue
        if call.caller in ("recompute_teardown", "free_resources") and call.method in _TEARS_DOWN:
            torn_down.setdefault(rid, call.caller)
            if not (call.method == "mark_request_done" and call.args.pause):
                continue
        if rid in torn_down and (call.method in _NOT_IDEMPOTENT or call.args.pause):
            by = "recompute teardown" if torn_down[rid] == "recompute_teardown" else "free"
            yield Violation(
                "nothing_after_teardown",
                Subject((rid,)),
                "only idempotent frees after the executor's teardown",
                f"{call.method} by the {call.caller.replace('_', ' ')} after the executor's {by}",
                s.iteration,
            )


def dead_stay_dead(s: Snapshot) -> Iterator[Violation]:
    step = s.step
    if step is None:
        return
    ended = {rid for rid, _ in s.ended}
    for a in s.adapters:
        for set_name, ids in (("active", a.active), ("paused", a.paused)):
            for rid in sorted(ids & ended):
                yield Violation(
                    "dead_stay_dead",
                    Subject((rid,), context=f"adapter {a.task_id}"),
                    "in no ownership set once freed",
                    f"in {set_name} of adapter {a.task_id}",
                    s.iteration,
                )
    for view in step.output.listed if step.output else ():
        if not view.live:
            yield Violation(
                "dead_stay_dead",
                Subject((view.request_id,)),
                "a freed request in no later output list",
                f"listed in {view.output_list.replace('_', ' ')}",
                s.iteration,
            )


# The step errors that are the scheduler's own fault; the last two took its process down.
SCHEDULER_FAULTS = (
    "scheduler_raised",
    "scheduler_hung",
    "malformed_output",
    "scheduler_exited",
    "scheduler_crashed",
)


def scheduler_protocol(s: Snapshot) -> Iterator[Violation]:
    for err in s.step.errors if s.step else ():
        if err.kind in SCHEDULER_FAULTS:
            yield protocol_violation(err.message, s.iteration)


def protocol_violation(found: str, iteration: int) -> Violation:
    """The ``scheduler_protocol`` violation of one scheduler fault."""
    return Violation(
        "scheduler_protocol",
        Subject(lead="the scheduler"),
        "a SchedulerOutput of this engine's requests, returned in time",
        found,
        iteration,
    )


# Invariants a front door was told to leave out (--exclude-invariant), for the
# length of one command: the search, the shrink and the report's replay alike.
_EXCLUDED: ContextVar[frozenset[str]] = ContextVar("peftlife_excluded", default=frozenset())


@contextmanager
def excluding(names: Iterable[str]) -> Iterator[None]:
    """Leave the named invariants out of every check inside the block.

    >>> with excluding(["pages_conserved"]):
    ...     kept([Violation("pages_conserved", Subject(lead="target pool"), "x", "y")])
    []
    """
    token = _EXCLUDED.set(frozenset(names))
    try:
        yield
    finally:
        _EXCLUDED.reset(token)


def kept(violations: Iterable[Violation]) -> list[Violation]:
    """The violations of invariants not excluded."""
    excluded = _EXCLUDED.get()
    return [v for v in violations if v.invariant not in excluded]
