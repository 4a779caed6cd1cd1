"""The executor loops: one iteration of upstream's ``PyExecutor``, step by step.

``simple_iteration`` mirrors ``PyExecutor._executor_loop`` and
``overlap_iteration`` mirrors ``_executor_loop_overlap``
(``tensorrt_llm/_torch/pyexecutor/py_executor.py``). Each is a list of named
steps in upstream's order, each step naming the upstream function it stands
for, so that a reader can hold this file against upstream's and see where the
world follows it and where it decides. The overlap loop's nine steps are the
ones docs/protocol.md lists.

Why a module of its own: the order of these steps *is* the world a scheduler
is judged in (a teardown before or after ``prepare_resources`` decides what a
scheduler must free itself), so it should read as upstream's loop and not be
spread through the engine's bookkeeping. ``Engine`` keeps the world's state;
the loops are its iterations and ask it for what they need only by the
services ``peftlife.world.services`` names (asking the untrusted scheduler,
``prepare_resources``, freeing a request, closing the iteration), so this
module does not import the engine.

Limits: only what a scheduler can observe is modelled. There is no sampler,
no response queue, no pipeline parallelism and no attention DP ranks: a
"forward step" moves context cursors on and hands out tokens, and a held
batch (``OverlapState.hold_next``) stands for the world's ``hold_reason``
(attention DP, batch waiting, the context KV cap), under the overlap loop
only, though upstream's simple loop can hold one too. Cancellations are
applied at the start of an iteration, before the pass, where upstream's
``_handle_canceled_requests`` ran at the end of the previous one: nothing a
scheduler sees happens in between.
"""

from __future__ import annotations

import attrs

from peftlife.world.immutable import copied_by_field
from peftlife.world.output import runnable
from peftlife.world.request import LlmRequestState, Request
from peftlife.world.services import ExecutorServices
from peftlife.world.snapshot import Outcome, OverlapStep, ScheduledView, Snapshot, StepError


@copied_by_field
@attrs.define
class OverlapState:
    """What the overlap loop carries from one iteration to the next (upstream's
    ``previous_batch`` and the flags around it); the simple loop carries nothing.

    ``batch`` is batch N: launched, not read back yet. ``emitting`` are the ids
    of the members its read-back gives a token, in launch order (a dict as an
    ordered set: the read-back asks it of every member). ``end_at_read_back``
    are the members that end then whatever their count (end-of-sequence, or a
    cancellation that must wait for the device). ``hold_next``: the next
    iteration's batch is one the executor holds.
    """

    batch: tuple[Request, ...] = ()
    emitting: dict[int, None] = attrs.Factory(dict)
    end_at_read_back: dict[int, Outcome] = attrs.Factory(dict)
    hold_next: bool = False


# ---- the simple loop: PyExecutor._executor_loop ----


def simple_iteration(engine: ExecutorServices) -> Snapshot:
    """One iteration of ``_executor_loop``: schedule, tear down and reset the
    recompute-paused requests, ``prepare_resources``, run the batch, free what
    finished. The batch runs and is read back within the iteration."""
    engine.begin_iteration()
    errors: list[StepError] = []
    _cancel_requests(engine, on_device=frozenset(), state=None)

    # _schedule -> scheduler.schedule_request (told nothing in flight)
    pending_before = engine.recompute_pending
    lists, record = engine.schedule(errors)

    batch_ran = False
    after_prepare: tuple[ScheduledView, ...] = ()
    if lists is not None and record is not None and runnable(record):
        # _terminate_recompute_paused_requests, then _pause_recompute_paused_requests:
        # both right after the pass, before prepare_resources. One request at a time
        # (a list that names a request twice sees it reset before its second free).
        for req in lists["recompute_paused"]:
            if engine.is_live(req.request_id):
                _terminate_recompute_paused_request(engine, req)
                _pause_recompute_paused_request(req)
        # resource_manager.prepare_resources
        generation = lists["generation"]
        engine.act_as("prepare_resources")
        context, ensure_error = engine.prepare_resources(lists["context"], generation, errors)
        after_prepare = engine.scheduled_views(context, generation)
        if ensure_error is None:
            # _forward_step
            emitting = _forward_step(context, generation)
            # _update_requests gives each its token; _handle_responses ->
            # _terminate_request frees each that finished, one request at a time.
            engine.act_as("free_resources")
            for req in emitting:
                req.num_generated += 1
                if req.num_generated >= req.max_new_tokens:
                    req.state = LlmRequestState.GENERATION_COMPLETE
                    engine.terminate_request(req, "finished")
            batch_ran = True
        else:
            errors.append(ensure_error)
    return engine.end_iteration(record, batch_ran, after_prepare, errors, pending_before)


# ---- the overlap loop: PyExecutor._executor_loop_overlap ----


def overlap_iteration(engine: ExecutorServices, state: OverlapState) -> Snapshot:
    """One iteration of ``_executor_loop_overlap``, in the nine steps of
    docs/protocol.md: batch N+1 is scheduled, prepared and launched while
    batch N (``state.batch``) is still on the device; batch N is read back
    afterwards (``_process_previous_batch``)."""
    engine.begin_iteration()
    errors: list[StepError] = []
    batch_n = state.batch
    in_flight = frozenset(r.request_id for r in batch_n)
    hold, state.hold_next = state.hold_next, False
    _cancel_requests(engine, on_device=in_flight, state=state)

    # 1. _schedule -> scheduler.schedule_request(active, inflight_request_ids)
    pending_before = engine.recompute_pending
    # A retiring request was launched with its last token: it is a member of batch N.
    retiring = tuple(sorted(r.request_id for r in batch_n if r.is_generation_to_complete_state))
    told = set(in_flight) if engine.config.in_flight_told else set()
    lists, record = engine.schedule(errors, inflight=told)
    runs = lists is not None and record is not None and runnable(record)
    context: list[Request] = []
    generation: list[Request] = []
    recompute_paused: list[Request] = []
    after_prepare: tuple[ScheduledView, ...] = ()
    launched = False
    if lists is not None and runs and hold and engine.config.hold_reason != "attention_dp":
        # Upstream's _schedule drops context requests after the scheduler grew
        # their KV: they stay active with their KV, unregistered, and do not run.
        lists = dict(lists)
        lists["context"] = _kept_context(engine, lists["context"], lists["generation"])
        hold = False
    if lists is not None and runs:
        recompute_paused = lists["recompute_paused"]
        # 2. _terminate_recompute_paused_requests
        for req in recompute_paused:
            if engine.is_live(req.request_id):
                _terminate_recompute_paused_request(engine, req)
        # 3. resource_manager.prepare_resources. A held batch is prepared too (the
        # decision on open question 1 in docs/protocol.md: the scheduler's resumes
        # and the executor's registrations stand), except its first chunks:
        # upstream prepares only a batch it can queue (_can_queue), so a held first
        # chunk, which has not started, is never registered there. Then the held
        # batch's generation allocations are undone and it is not launched.
        engine.act_as("prepare_resources")
        generation = lists["generation"]
        registered = [r for r in lists["context"] if not hold or r.is_started]
        context, ensure_error = engine.prepare_resources(registered, generation, errors)
        after_prepare = engine.scheduled_views(context, generation)
        if ensure_error is not None:
            errors.append(ensure_error)
        if hold:
            for req in generation:
                if engine.is_live(req.request_id):
                    for pool in engine.pools:
                        pool.revert_allocate_generation(req)
        # 4. _forward_step: launch batch N+1
        launched = ensure_error is None and not hold
        if not launched:
            context, generation = [], []

    # 5. _process_previous_batch: read batch N back
    finished = _read_back(engine, state)
    ending = {r.request_id for r, _ in finished}
    eos = tuple(
        r.request_id
        for r, outcome in finished
        if outcome == "finished" and r.num_generated < r.max_new_tokens
    )
    # 6. _pause_recompute_paused_requests: reset the ones that live on unfinished
    for req in recompute_paused:
        if engine.is_live(req.request_id) and req.request_id not in ending:
            _pause_recompute_paused_request(req)
    # 7. batch N+1's context members advance (the launch's state update)
    emitting = _launch(context, generation)
    # 8. _handle_responses -> _terminate_request for batch N's finished members,
    # after this iteration's ensure_batch
    engine.act_as("free_resources")
    for req, outcome in finished:
        if engine.is_live(req.request_id):
            engine.terminate_request(req, outcome)
    # 9. _update_generation_requests_that_will_complete_next_iteration
    for req in generation:
        if engine.is_live(req.request_id):
            req.state = _state_before_token(req)
    state.batch = tuple(r for r in (*context, *generation) if engine.is_live(r.request_id))
    state.emitting = dict.fromkeys(r.request_id for r in emitting if engine.is_live(r.request_id))
    step = OverlapStep(
        in_flight=tuple(sorted(in_flight)),
        in_flight_told=engine.config.in_flight_told,
        in_flight_checked=engine.config.in_flight_checked,
        held=hold,
        retiring=retiring,
        eos=eos,
    )
    return engine.end_iteration(
        record, launched, after_prepare, errors, pending_before, overlap=step
    )


# ---- the steps ----


def _cancel_requests(
    engine: ExecutorServices, *, on_device: frozenset[int], state: OverlapState | None
) -> None:
    """``_handle_canceled_requests``: free every cancelled request. One on the device
    (a member of batch N) ends at its read-back instead, so its KV stays put while
    the batch runs."""
    engine.act_as("free_resources")
    for req in engine.take_cancellations():
        if req.request_id in on_device and state is not None:
            state.end_at_read_back.setdefault(req.request_id, "cancelled")
        else:
            engine.terminate_request(req, "cancelled")


def _terminate_recompute_paused_request(engine: ExecutorServices, req: Request) -> None:
    """Upstream's ``_terminate_recompute_paused_requests`` -> ``_free_request_resources``
    for one request: every resource manager's ``free_resources`` (KV in every pool; the
    PEFT wrapper's ``mark_request_done`` without pause, which terminates the adapter's
    ownership). Every one of these frees is idempotent, upstream and here. Under
    ``recompute_teardown = "scheduler_only"`` the executor frees nothing: the
    scheduler's frees stand."""
    if engine.config.scheduler_tears_down:
        return
    caller = engine.act_as("recompute_teardown")
    engine.free_request_resources(req)
    engine.act_as(caller)


def _pause_recompute_paused_request(req: Request) -> None:
    """Upstream's ``_pause_recompute_paused_requests`` (``reset_for_recompute``) for one
    request: fold what was generated into the prompt and prefill again from the start.
    The loops skip a request that finished in the meantime, as upstream's guard does."""
    req.state = LlmRequestState.CONTEXT_INIT
    req.context_current_position = 0
    req.num_folded = req.num_generated
    # A fresh request's chunk is its whole prompt, as upstream's C++ default.
    req.context_chunk_size = req.context_len


def _forward_step(context: list[Request], generation: list[Request]) -> list[Request]:
    """The simple loop's ``_forward_step``, read back within the iteration: a last
    chunk turns to ``GENERATION_IN_PROGRESS``, its token given by ``_update_requests``.
    Returns the members that get a token: generation, then those."""
    last_chunks = _run_context_chunks(context)
    for req in last_chunks:
        req.state = LlmRequestState.GENERATION_IN_PROGRESS
    return [*generation, *last_chunks]


def _launch(context: list[Request], generation: list[Request]) -> list[Request]:
    """The overlap loop's ``_forward_step``, launched and read back at the next
    iteration: a last chunk turns to retiring if its first token is its last
    (``_update_generation_requests_that_will_complete_next_iteration``). Returns the
    members the read-back will give a token: generation, then those."""
    last_chunks = _run_context_chunks(context)
    for req in last_chunks:
        req.state = _state_before_token(req)
    return [*generation, *last_chunks]


def _run_context_chunks(context: list[Request]) -> list[Request]:
    """The forward step as far as context requests see it: each chunk moves its
    cursor on. Returns the requests whose last chunk ran, in batch order (a request
    the list names twice runs twice)."""
    last_chunks = []
    for req in context:
        req.context_current_position += req.context_chunk_size
        if req.context_current_position >= req.context_len:
            last_chunks.append(req)
    return last_chunks


def _read_back(engine: ExecutorServices, state: OverlapState) -> list[tuple[Request, Outcome]]:
    """``_process_previous_batch`` (``_update_requests``): batch N's members that emit
    get their token; returns those that end now (their count reached, an
    end-of-sequence, or a cancellation that waited for the device), with how."""
    finished: list[tuple[Request, Outcome]] = []
    for req in state.batch:
        if not engine.is_live(req.request_id):
            continue
        emits = req.request_id in state.emitting
        if emits:
            req.num_generated += 1
        outcome = state.end_at_read_back.get(req.request_id)
        if outcome is None and emits and req.num_generated >= req.max_new_tokens:
            outcome = "finished"
        if outcome is not None:
            if outcome == "finished":
                req.state = LlmRequestState.GENERATION_COMPLETE
            finished.append((req, outcome))
    state.end_at_read_back.clear()
    return finished


def _state_before_token(req: Request) -> LlmRequestState:
    """A launched request's state until its token is read back: retiring if it is its last
    (``_update_generation_requests_that_will_complete_next_iteration``)."""
    if req.num_generated + 1 >= req.max_new_tokens:
        return LlmRequestState.GENERATION_TO_COMPLETE
    return LlmRequestState.GENERATION_IN_PROGRESS


def _kept_context(
    engine: ExecutorServices, context: list[Request], generation: list[Request]
) -> list[Request]:
    """The context requests a held batch keeps: none while generation requests run
    (``_waiting_requests``), or the first (``_cap_context_by_total_kv_len``)."""
    if engine.config.hold_reason == "batch_waiting":
        return [] if generation else context
    return context[:1]
