"""The engine: the world a scheduler runs in, and the services its loops use.

``Engine`` holds the requests, the KV pools, the PEFT manager and the call
ledger, and takes the world's inputs (submit, cancel, end-of-sequence, a
held batch). ``Engine.step()`` is one ``PyExecutor`` iteration, run by
``peftlife.world.loops``: the simple loop (``_executor_loop``) or, under
``EngineConfig.executor = "overlap"``, the overlap loop
(``_executor_loop_overlap``), each step by step in upstream's order. What
the loops share lives here, as the services ``peftlife.world.services``
names: asking the scheduler (untrusted: whatever it raises or returns is
recorded on the step as a finding and never escapes as a crash of the
harness), ``prepare_resources``, freeing a request, closing an iteration
into a step record, and the snapshot. The loops know the engine only by
those services, so the engine imports the loops and not the other way.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import operator
import weakref
from collections.abc import Iterator

import attrs

from peftlife.world import loops, untrusted, watchdog
from peftlife.world.config import EngineConfig
from peftlife.world.immutable import SharedMemo, copied_by_field
from peftlife.world.kv import KVCacheManager
from peftlife.world.ledger import Caller, CallLedger
from peftlife.world.loops import OverlapState
from peftlife.world.output import Lists, read_lists, record_output
from peftlife.world.peft import LoraCacheFullException, PeftCacheManager, PeftTaskNotCachedException
from peftlife.world.protocol import Environment, Scheduler, SchedulerFactory
from peftlife.world.request import SCHEDULER_WRITABLE_FIELDS, LlmRequestState, Request
from peftlife.world.snapshot import (
    AdapterView,
    FieldWrite,
    LoraCacheView,
    Outcome,
    OutputRecord,
    OverlapStep,
    RequestView,
    ScheduledView,
    Snapshot,
    StepError,
    StepRecord,
)
from peftlife.world.untrusted import StateDeclaration
from peftlife.world.watchdog import WATCHDOG

# Seconds the scheduler's code (its factory, each pass) may take before it is called hung;
# the environment's PEFTLIFE_SCHEDULE_DEADLINE, read when peftlife is imported, overrides it.
DEFAULT_SCHEDULE_DEADLINE = watchdog.deadline_from_env(10.0)

# The request fields the scheduler must not write (spec 8b): all but its own.
GUARDED_FIELDS = tuple(
    f.name for f in attrs.fields(Request) if f.name not in SCHEDULER_WRITABLE_FIELDS
)
_guarded = operator.attrgetter(*GUARDED_FIELDS)


# Each live request's view, by id.
RequestViews = SharedMemo[int, RequestView]
# What a request's view shows, in its fields' order after the id.
_shown = operator.attrgetter(*(f.name for f in attrs.fields(RequestView)[1:]))


def _show(value: object) -> str:
    return value.name if isinstance(value, enum.Enum) else repr(value)


@copied_by_field
class Engine:
    """The world: requests, pools, the PEFT manager and the executor loop.

    >>> from peftlife.sut.reference import ReferenceScheduler
    >>> engine = Engine(EngineConfig(adapter_pages=((1, 2),)), ReferenceScheduler)
    >>> rid = engine.submit(lora_task_id=1, lora_weights=True, prompt_len=4, max_new_tokens=2)
    >>> _ = engine.step(); _ = engine.step(); engine.is_live(rid)
    False
    """

    def __init__(
        self,
        config: EngineConfig,
        scheduler_factory: SchedulerFactory,
        *,
        schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
    ) -> None:
        self.config = config
        self.schedule_deadline = schedule_deadline
        self.ledger = CallLedger()
        self.kv_cache_manager = KVCacheManager(
            device_pages=config.device_pages,
            host_pages=config.host_pages,
            tokens_per_block=config.tokens_per_block,
            ledger=self.ledger,
            name="target",
        )
        self.draft_kv_cache_manager = (
            None
            if config.draft_device_pages is None
            else KVCacheManager(
                device_pages=config.draft_device_pages,
                host_pages=config.draft_host_pages,
                tokens_per_block=config.tokens_per_block,
                ledger=self.ledger,
                name="draft",
            )
        )
        # Every pool, target first: fixed for the engine's life.
        self._pools = (
            (self.kv_cache_manager,)
            if self.draft_kv_cache_manager is None
            else (self.kv_cache_manager, self.draft_kv_cache_manager)
        )
        self.peft_cache_manager = (
            PeftCacheManager(
                device_pages=config.lora_device_pages,
                host_pages=config.lora_host_pages,
                adapter_pages=dict(config.adapter_pages),
                ledger=self.ledger,
            )
            if config.adapter_pages
            else None
        )
        self.environment = Environment(
            kv_cache_manager=self.kv_cache_manager,
            draft_kv_cache_manager=self.draft_kv_cache_manager,
            peft_cache_manager=self.peft_cache_manager,
            config=config.scheduler_config(),
        )
        self.iteration = 0
        self._requests: dict[int, Request] = {}
        self._next_id = 1
        self._cancel_queue: list[int] = []
        self._recompute_pending: set[int] = set()
        self._ended_now: list[tuple[int, Outcome]] = []
        self._last_step: StepRecord | None = None
        self._writes: tuple[FieldWrite, ...] = ()
        # The overlap loop's state between iterations (batch N and what its read-back does).
        self._overlap = OverlapState()
        self.scheduler: Scheduler | None = None
        self._factory_error: StepError | None = None
        self._declaration: StateDeclaration | None = None
        # The last snapshot's view of each live request, with what it showed: a view is
        # reused only where it shows the same, so a copy of the engine shares them.
        self._request_views: RequestViews = SharedMemo()
        # The adapters' views, and the PEFT manager's changes when they were made.
        self._adapters_at: tuple[object, ...] | None = None
        self._adapters: tuple[tuple[AdapterView, ...], tuple[LoraCacheView, ...]] = ((), ())
        # One periodic alarm for the engine's life, not one per call (spec 8b: a hang is a finding).
        if schedule_deadline is not None and WATCHDOG.arm(schedule_deadline):
            weakref.finalize(self, WATCHDOG.disarm)
        untrusted.watch_sigints()
        environment = self.environment
        try:
            self.scheduler = untrusted.call(
                lambda: scheduler_factory(environment),
                "the scheduler factory",
                deadline=schedule_deadline,
            )
        except untrusted.Failed as failed:
            self._factory_error = failed.error

    # ---- the world's inputs ----

    @property
    def pools(self) -> tuple[KVCacheManager, ...]:
        return self._pools

    def submit(
        self,
        *,
        prompt_len: int,
        max_new_tokens: int,
        lora_task_id: int | None = None,
        lora_weights: bool = False,
        lora_path: bool = False,
    ) -> int:
        """Add a request; it is scheduled from the next step on. Returns its id."""
        if prompt_len < 1 or max_new_tokens < 1:
            raise ValueError("a request needs prompt_len >= 1 and max_new_tokens >= 1")
        if lora_task_id is not None and lora_task_id not in dict(self.config.adapter_pages):
            raise ValueError(f"unknown adapter {lora_task_id}; the world has {self.adapter_ids}")
        rid = self._next_id
        self._next_id += 1
        self._requests[rid] = Request(
            request_id=rid,
            lora_task_id=lora_task_id,
            lora_weights=lora_weights and lora_task_id is not None,
            prompt_len=prompt_len,
            max_new_tokens=max_new_tokens,
            lora_path=lora_path and lora_task_id is not None,
        )
        return rid

    def cancel(self, request_id: int) -> bool:
        """Cancel a live request at the start of the next step; False if it is not live."""
        if request_id not in self._requests or request_id in self._cancel_queue:
            return False
        self._cancel_queue.append(request_id)
        return True

    def end_of_sequence(self, request_id: int) -> bool:
        """End a member of the in-flight batch by end-of-sequence at the next read-back.

        Only a member whose read-back gives it a token can emit one; False otherwise
        (and always under the simple executor, which has no batch in flight).
        """
        if request_id not in self._overlap.emitting:
            return False
        self._overlap.end_at_read_back.setdefault(request_id, "finished")
        return True

    def hold_batch(self) -> bool:
        """Make the next iteration's batch one the executor holds for the world's
        ``hold_reason`` (overlap only): with attention DP the whole batch is not
        queued; with batch waiting or the context KV cap context requests are dropped
        from it. False in a world with no reason to hold."""
        if not self.config.holds_batches:
            return False
        self._overlap.hold_next = True
        return True

    @contextlib.contextmanager
    def inputs_withdrawn(self) -> Iterator[None]:
        """Inputs given inside (submits, cancellations, faults, end-of-sequence, a held
        batch) are withdrawn on leaving, and the world is as it was before them.

        None of them runs the scheduler's code, so a search can print the state
        one leads to, and copy it only if it needs that state, without copying the
        engine first. No iteration may run inside: its effects are not withdrawn.
        """
        requests, next_id, cancels = dict(self._requests), self._next_id, list(self._cancel_queue)
        overlap = self._overlap
        ends, hold = dict(overlap.end_at_read_back), overlap.hold_next
        faults = [pool.pending_faults for pool in self.pools]
        iteration = self.iteration
        try:
            yield
        finally:
            assert self.iteration == iteration, "an iteration ran while inputs were given"
            self._requests.clear()
            self._requests.update(requests)
            self._next_id = next_id
            self._cancel_queue[:] = cancels
            overlap.end_at_read_back.clear()
            overlap.end_at_read_back.update(ends)
            overlap.hold_next = hold
            for pool, (resumes, grows) in zip(self.pools, faults, strict=True):
                pool.clear_faults()
                pool.refuse_next_resumes(resumes)
                pool.fail_next_grows(grows)

    @property
    def in_flight_ids(self) -> tuple[int, ...]:
        """The ids of the batch on the device, not read back yet (overlap only)."""
        return tuple(r.request_id for r in self._overlap.batch)

    @property
    def emitting_ids(self) -> tuple[int, ...]:
        """The in-flight members whose read-back gives them a token: those an eos can end."""
        return tuple(self._overlap.emitting)

    @property
    def pending_read_back(self) -> tuple[object, ...]:
        """What the overlap loop still holds that a snapshot does not show: who emits at
        the read-back, who ends then and how, and whether the next batch is held."""
        state = self._overlap
        return (self.emitting_ids, tuple(sorted(state.end_at_read_back.items())), state.hold_next)

    @property
    def adapter_ids(self) -> list[int]:
        return [t for t, _ in self.config.adapter_pages]

    def is_live(self, request_id: int) -> bool:
        return request_id in self._requests

    @property
    def next_request_id(self) -> int:
        """The id the next submit will get."""
        return self._next_id

    @property
    def pending_cancels(self) -> tuple[int, ...]:
        """Cancellations waiting for the next step, in order."""
        return tuple(self._cancel_queue)

    @property
    def live_requests(self) -> list[Request]:
        return list(self._requests.values())

    def clear_faults(self) -> None:
        for pool in self.pools:
            pool.clear_faults()

    # ---- one executor iteration ----

    def step(self) -> Snapshot:
        """Run one iteration of the world's executor loop and return the snapshot after it."""
        if self.config.overlap:
            return loops.overlap_iteration(self, self._overlap)
        return loops.simple_iteration(self)

    # ---- the loops' services (peftlife.world.services, where each is described) ----

    @property
    def recompute_pending(self) -> frozenset[int]:
        return frozenset(self._recompute_pending)

    def begin_iteration(self) -> None:
        self.iteration += 1
        self.ledger.iteration = self.iteration
        self.ledger.calls.clear()
        self._ended_now = []
        self._writes = ()

    def take_cancellations(self) -> tuple[Request, ...]:
        # A queued id is live (cancel takes only those, and only an iteration ends one).
        cancelled = tuple(self._requests[rid] for rid in self._cancel_queue)
        self._cancel_queue.clear()
        return cancelled

    def end_iteration(
        self,
        record: OutputRecord | None,
        batch_ran: bool,
        after_prepare: tuple[ScheduledView, ...],
        errors: list[StepError],
        pending_before: frozenset[int],
        overlap: OverlapStep | None = None,
    ) -> Snapshot:
        """Close the iteration both loops share: note what waits for recompute, record, snapshot.

        ``overlap`` is the overlap loop's own record of the iteration.
        """
        self._note_recompute_pending()
        self.act_as("harness")
        self._last_step = StepRecord(
            iteration=self.iteration,
            output=record,
            batch_ran=batch_ran,
            after_prepare=after_prepare,
            calls=tuple(self.ledger.calls),
            errors=tuple(errors),
            writes=self._writes,
            recompute_pending_before=pending_before,
            scheduler_tears_down=self.config.scheduler_tears_down,
            overlap=overlap,
        )
        return self.snapshot()

    def schedule(
        self, errors: list[StepError], inflight: set[int] | None = None
    ) -> tuple[Lists | None, OutputRecord | None]:
        """The scheduler's lists for this pass, and the record of what it answered."""
        self.act_as("scheduler")
        target, draft = self.kv_cache_manager, self.draft_kv_cache_manager
        # Two sets of ids rather than a pair of flags per request: ints are no work for
        # the garbage collector, and a pass over 3,000 requests made 3,000 pairs.
        started = {rid for rid, r in self._requests.items() if r.is_started}
        cached = {
            rid
            for rid in self._requests
            if target.has_cache(rid) or (draft is not None and draft.has_cache(rid))
        }
        lists, error = self._schedule_request(inflight=inflight)
        if error is not None:
            errors.append(error)
        if lists is None:
            return None, None
        record = record_output(
            lists,
            started,
            cached,
            live=self._requests,
            target=self.kv_cache_manager,
            draft=self.draft_kv_cache_manager,
            config=self.config,
        )
        return lists, record

    def act_as(self, caller: Caller) -> Caller:
        before, self.ledger.caller = self.ledger.caller, caller
        return before

    def _schedule_request(
        self, inflight: set[int] | None = None
    ) -> tuple[Lists | None, StepError | None]:
        """Ask the scheduler; return its four lists, or a finding.

        ``inflight`` is what it is told is on the device. Retiring requests (the
        overlap loop's only) are among the active ones, as upstream's loop has them.
        """
        if self.scheduler is None:
            return None, self._factory_error
        # Schedulable or retiring: CONTEXT_INIT up to GENERATION_TO_COMPLETE.
        first, last = LlmRequestState.CONTEXT_INIT, LlmRequestState.GENERATION_TO_COMPLETE
        active = [r for r in self._requests.values() if first <= r.state <= last]
        # One flat list of every guarded value rather than a tuple per request: a pass
        # over 3,000 requests would keep 3,000 tuples alive for the collector to walk.
        before = list(itertools.chain.from_iterable(map(_guarded, active)))
        scheduler = self.scheduler
        told = set() if inflight is None else set(inflight)
        try:
            # The method is looked up inside: a scheduler without one is a finding too.
            output = untrusted.call(
                lambda: scheduler.schedule_request(active, told),
                "schedule_request",
                deadline=self.schedule_deadline,
            )
        except untrusted.Failed as failed:
            return None, failed.error
        finally:
            self._writes = self._undo_writes(active, before)
        lists = read_lists(output, self._requests, self._next_id, deadline=self.schedule_deadline)
        if isinstance(lists, StepError):
            return None, lists
        return lists, None

    def _undo_writes(self, active: list[Request], before: list[object]) -> tuple[FieldWrite, ...]:
        """The fields the scheduler changed that are not its own, each put back.

        Putting them back keeps the world sound (an adapter id it invented would
        crash the PEFT manager); the write itself is the finding (invariant 8b).
        The weights the PEFT manager dropped on a registration are its own write.
        """
        registered = {
            c.request_id
            for c in self.ledger.calls
            if c.caller == "scheduler" and c.method == "add_request_peft" and c.result == "ok"
        }
        writes = []
        width = len(GUARDED_FIELDS)
        for req, at in zip(active, range(0, len(before), width), strict=True):
            new, old = _guarded(req), tuple(before[at : at + width])
            if new == old:
                continue
            for name, was, now in zip(GUARDED_FIELDS, old, new, strict=True):
                if was == now or (
                    name == "lora_weights" and was and not now and req.request_id in registered
                ):
                    continue
                writes.append(FieldWrite(req.request_id, name, _show(was), _show(now)))
                setattr(req, name, was)
        return tuple(writes)

    def _registration_failure(self, err: Exception) -> StepError | None:
        """The ``add_request_peft`` that just raised, as a finding; None if it was not one.

        The manager records the call before raising, so the ledger's last call
        names the request, its caller, and whether it had registered before.
        """
        last = self.ledger.calls[-1] if self.ledger.calls else None
        if last is None or last.method != "add_request_peft":
            return None
        return StepError(
            "add_request_peft_failed",
            f"add_request_peft({last.request_id}) by the {last.caller.replace('_', ' ')} "
            f"raised {type(err).__name__}: {err}",
            request_id=last.request_id,
            exception=type(err).__name__,
            registered_before=bool(last.facts.registered_before),
        )

    def prepare_resources(
        self, context: list[Request], generation: list[Request], errors: list[StepError]
    ) -> tuple[list[Request], StepError | None]:
        """Register every context request, then ``ensure_batch``; fail what cannot register."""
        peft = self.peft_cache_manager
        if peft is None:
            return context, None
        kept = []
        for req in context:
            try:
                peft.add_request_peft(req)
                kept.append(req)
            except (PeftTaskNotCachedException, LoraCacheFullException) as err:
                failure = self._registration_failure(err)
                assert failure is not None, "the manager records a call before it raises"
                errors.append(failure)
                self.terminate_request(req, "failed")
        try:
            peft.ensure_batch(kept, generation)
        except (PeftTaskNotCachedException, LoraCacheFullException) as err:
            return kept, StepError(
                "ensure_batch_failed",
                f"ensure_batch raised {type(err).__name__}: {err}",
                exception=type(err).__name__,
            )
        return kept, None

    def scheduled_views(
        self, context: list[Request], generation: list[Request]
    ) -> tuple[ScheduledView, ...]:
        peft = self.peft_cache_manager
        draft = self.draft_kv_cache_manager
        scheduled = (*context, *generation)
        # Each adapter's owners copied once, not once per request: a batch on few
        # adapters would otherwise cost batch size x owners per adapter.
        tasks = {r.lora_task_id for r in scheduled if r.lora_task_id is not None}
        active = {} if peft is None else {t: peft.active_requests(t) for t in tasks}
        views = []
        for req in scheduled:
            task = req.lora_task_id
            views.append(
                ScheduledView(
                    request_id=req.request_id,
                    lora_task_id=task,
                    owned_active=task is not None and req.request_id in active.get(task, ()),
                    target=self.kv_cache_manager.view(req.request_id),
                    draft=None if draft is None else draft.view(req.request_id),
                    tokens_needed=(
                        req.context_current_position + req.context_chunk_size
                        if req.is_context_init_state
                        else req.num_tokens
                    ),
                )
            )
        return tuple(views)

    def free_request_resources(self, req: Request) -> None:
        for pool in self.pools:
            pool.free_resources(req)
        if self.peft_cache_manager is not None:
            self.peft_cache_manager.mark_request_done(req, pause=False)

    def terminate_request(self, req: Request, outcome: Outcome) -> None:
        self.free_request_resources(req)
        del self._requests[req.request_id]
        self._recompute_pending.discard(req.request_id)
        self._ended_now.append((req.request_id, outcome))

    def _note_recompute_pending(self) -> None:
        """Follow the calls: a started request whose KV the scheduler freed waits to
        re-register, until the executor's ``add_request_peft`` in ``prepare_resources``
        succeeds for it. A scheduler's own registration does not end the wait."""
        pending = self._recompute_pending
        for call in self.ledger.calls:
            rid = call.request_id
            if rid is None or rid not in self._requests:
                continue
            if call.frees_started_request:
                pending.add(rid)
            elif (
                call.method == "add_request_peft"
                and call.result == "ok"
                and call.caller == "prepare_resources"
            ):
                pending.discard(rid)

    # ---- observing ----

    def state_declaration(self) -> StateDeclaration:
        """The scheduler's ``keeps_no_state_between_passes``, as every reader sees it.

        Read strictly by ``untrusted.state_declaration``: only the bool ``True``
        declares a scheduler stateless, and a raise or a hang while it is read
        is a finding (``error``) with the scheduler taken to keep state. It is
        read once per engine; a copy of the engine keeps the reading.
        """
        if self._declaration is None:
            if self.scheduler is None:  # none was built: the factory's error is the finding
                self._declaration = StateDeclaration(False)
            else:
                self._declaration = untrusted.state_declaration(
                    self.scheduler, deadline=self.schedule_deadline
                )
        return self._declaration

    def _adapter_views(self) -> tuple[tuple[AdapterView, ...], tuple[LoraCacheView, ...]]:
        """The adapters and the LoRA caches as a snapshot shows them, made again only
        when the PEFT manager changed: most iterations change neither."""
        peft = self.peft_cache_manager
        if peft is None:
            return (), ()
        device, host = peft.device_cache, peft.host_cache
        # The caches' sizes are public, so they are read as they are, not trusted to change
        # only with the counts of changes.
        changes = (*peft.changes, *(c.shown_sizes for c in (device, host)))
        if self._adapters_at != changes:
            adapters = tuple(
                AdapterView(
                    task_id=t,
                    active=peft.active_requests(t),
                    paused=peft.paused_requests(t),
                    device=device.entry(t),
                    host=host.entry(t),
                )
                for t in peft.task_ids()
            )
            caches = tuple(
                LoraCacheView(c.name, c.capacity, c.num_free_pages, c.entries(), c.eviction_order())
                for c in (device, host)
            )
            self._adapters, self._adapters_at = (adapters, caches), changes
        return self._adapters

    def snapshot(self) -> Snapshot:
        """The world now, with the last iteration's step record."""
        peft = self.peft_cache_manager
        draft = self.draft_kv_cache_manager
        # What every request's view reads, held in locals: a snapshot is built after
        # every iteration and views every live request.
        target = self.kv_cache_manager
        ever_registered = () if peft is None else peft.ever_registered
        pending = self._recompute_pending
        last: RequestViews = self._request_views
        shown: RequestViews = SharedMemo()
        for r in self._requests.values():
            rid = r.request_id
            registered, recompute = rid in ever_registered, rid in pending
            kv, draft_kv = target.view(rid), None if draft is None else draft.view(rid)
            # Everything the view shows, in its fields' order after the id: the key that
            # lets a request the iteration left alone keep its view is the view itself.
            shows = (
                r.lora_task_id,
                r.state,
                r.context_current_position,
                r.context_len,
                r.num_generated,
                r.max_new_tokens,
                r.is_started,
                registered,
                recompute,
                kv,
                draft_kv,
                r.prompt_len,
                r.lora_weights,
                r.lora_path,
            )
            # Compared with what the last view shows, read back from it: a view kept
            # with the values it was made from would keep two more objects per request
            # alive, which every garbage collection walks.
            view = last.get(rid)
            if view is None or _shown(view) != shows:
                view = RequestView(rid, *shows)
            shown[rid] = view
        self._request_views = shown
        requests = tuple(shown.values())
        adapters, lora_caches = self._adapter_views()
        return Snapshot(
            iteration=self.iteration,
            requests=requests,
            ended=tuple(self._ended_now),
            adapters=adapters,
            pools=tuple(p.pool_view() for p in self.pools),
            lora_caches=lora_caches,
            step=self._last_step,
            in_flight=self.in_flight_ids,
        )
