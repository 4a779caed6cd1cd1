"""The executor loop (docs/protocol.md, the executor's side): chunked prefill,
completion, cancellation, recompute reset, per-chunk registration, failed
registrations, an untrusted scheduler, determinism, and submit's validation."""

from __future__ import annotations

import contextlib
import gc
import signal
import time
from typing import Any

import attrs
import pytest
from tests.bad_schedulers import OutputRaises

from peftlife.checker import registry
from peftlife.checker.invariants import Violation
from peftlife.search.trace import Action, checked_replay
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
from peftlife.world.protocol import Environment, SchedulerOutput
from peftlife.world.request import LlmRequestState, Request
from peftlife.world.residency import Residency
from peftlife.world.snapshot import Snapshot
from peftlife.world.watchdog import WATCHDOG, Watchdog

ACTIVE, SUSPENDED, NONE = Residency.ACTIVE, Residency.SUSPENDED, Residency.NONE


# ---- helpers ----


def make(**config: Any) -> Engine:
    # These tests read the scheduler's own releases; the executor's teardown of a
    # recompute-paused request is tested below, under its own heading.
    config.setdefault("recompute_teardown", "scheduler_only")
    return Engine(EngineConfig(**config), ReferenceScheduler)


def check(snap: Snapshot) -> list[Violation]:
    """Every invariant of a snapshot: every engine here runs the simple loop."""
    return registry.check(snap, EngineConfig())


def step(engine: Engine) -> Snapshot:
    """One iteration with the reference scheduler; it must leave the world clean."""
    snap = engine.step()
    assert check(snap) == []
    return snap


def invariant_names(snap: Snapshot) -> set[str]:
    return {v.invariant for v in check(snap)}


def calls_for(snap: Snapshot, rid: int) -> list[tuple[str, str, str]]:
    assert snap.step is not None
    return [(c.caller, c.component, c.method) for c in snap.step.calls if c.request_id == rid]


def owners(snap: Snapshot) -> dict[int, tuple[frozenset[int], frozenset[int]]]:
    return {a.task_id: (a.active, a.paused) for a in snap.adapters}


def held_by(snap: Snapshot, rid: int) -> list[tuple[str, int, int]]:
    return [(p.name, d, h) for p in snap.pools for (r, d, h) in p.holders if r == rid]


# ---- context chunks, completion ----


def test_context_chunks_advance_and_last_chunk_emits_first_token() -> None:
    engine = make(
        device_pages=8,
        tokens_per_block=4,
        enable_chunked_context=True,
        chunk_unit_size=4,
        max_num_tokens=4,
        adapter_pages=((1, 1),),
    )
    rid = engine.submit(prompt_len=10, max_new_tokens=3, lora_task_id=1, lora_weights=True)
    seen = []
    for _ in range(3):
        snap = step(engine)
        assert snap.step is not None and snap.step.output is not None
        (listed,) = snap.step.output.listed
        view = snap.request(rid)
        assert view is not None
        seen.append(
            (listed.output_list, listed.chunk_size, view.position, view.state, view.num_generated)
        )
    assert seen == [
        ("context", 4, 4, LlmRequestState.CONTEXT_INIT, 0),
        ("context", 4, 8, LlmRequestState.CONTEXT_INIT, 0),
        ("context", 2, 10, LlmRequestState.GENERATION_IN_PROGRESS, 1),
    ]
    snap = step(engine)
    assert snap.step is not None and snap.step.output is not None
    assert snap.step.output.generation == (rid,)
    view = snap.request(rid)
    assert view is not None and view.num_generated == 2 and view.target.capacity == 11


def test_unchunked_prompt_runs_in_one_chunk_and_emits() -> None:
    engine = make(device_pages=8, tokens_per_block=4, max_num_tokens=16)
    rid = engine.submit(prompt_len=10, max_new_tokens=3)
    snap = step(engine)
    assert snap.step is not None and snap.step.output is not None
    assert snap.step.output.listed[0].chunk_size == 10
    view = snap.request(rid)
    assert view is not None and view.position == 10 and view.num_generated == 1
    assert view.state is LlmRequestState.GENERATION_IN_PROGRESS


def test_completion_frees_everywhere_and_terminates_with_free_resources_caller() -> None:
    engine = make(
        device_pages=8,
        host_pages=4,
        draft_device_pages=8,
        draft_host_pages=4,
        tokens_per_block=4,
        adapter_pages=((1, 1),),
    )
    rid = engine.submit(prompt_len=6, max_new_tokens=3, lora_task_id=1, lora_weights=True)
    other = engine.submit(prompt_len=4, max_new_tokens=9)
    for expected_generated in (1, 2):
        snap = step(engine)
        view = snap.request(rid)
        assert view is not None and view.num_generated == expected_generated
        assert snap.ended == ()
    snap = step(engine)
    assert snap.ended == ((rid, "finished"),)
    assert not engine.is_live(rid) and engine.is_live(other)
    assert snap.request(rid) is None
    assert calls_for(snap, rid)[-3:] == [
        ("free_resources", "target", "free_resources"),
        ("free_resources", "draft", "free_resources"),
        ("free_resources", "peft", "mark_request_done"),
    ]
    assert snap.step is not None
    (done,) = [c for c in snap.step.calls if c.method == "mark_request_done"]
    assert done.request_id == rid and done.args.pause is False and done.caller == "free_resources"
    assert held_by(snap, rid) == []
    assert owners(snap) == {1: (frozenset(), frozenset())}
    adapter = snap.adapters[0]
    assert adapter.device is not None and not adapter.device.in_use
    assert adapter.host is not None and not adapter.host.in_use


# ---- cancellation in every state ----


def _assert_cancelled(snap: Snapshot, rid: int, task: int | None) -> None:
    assert snap.step is not None
    assert snap.ended == ((rid, "cancelled"),)
    assert snap.request(rid) is None
    assert held_by(snap, rid) == []
    # Freed at the start of the step, before the scheduler ran, by free_resources.
    own = [c for c in snap.step.calls if c.request_id == rid]
    assert own, "no call frees the cancelled request"
    assert snap.step.calls[: len(own)] == tuple(own)
    assert all(c.caller == "free_resources" for c in own)
    kv = [c.component for c in own if c.method == "free_resources"]
    assert kv == [p.name for p in snap.pools]
    if task is not None:
        (done,) = [c for c in own if c.method == "mark_request_done"]
        assert done.args.pause is False
        for active, paused in owners(snap).values():
            assert rid not in active | paused
    assert snap.step.output is not None
    assert rid not in {v.request_id for v in snap.step.output.listed}


def test_cancel_queued_request_never_scheduled() -> None:
    engine = make(device_pages=8, tokens_per_block=4, max_batch_size=1, adapter_pages=((1, 1),))
    runner = engine.submit(prompt_len=4, max_new_tokens=5, lora_task_id=1, lora_weights=True)
    queued = engine.submit(prompt_len=4, max_new_tokens=5, lora_task_id=1, lora_weights=True)
    first = step(engine)
    assert first.step is not None and first.step.output is not None
    assert first.step.output.context == (runner,)
    view = first.request(queued)
    assert view is not None and view.target.residency is NONE and view.position == 0
    assert engine.cancel(queued) is True
    assert engine.cancel(queued) is False  # already queued for cancellation
    snap = step(engine)
    _assert_cancelled(snap, queued, 1)
    frees = [c for c in snap.step.calls if c.request_id == queued and c.method == "free_resources"]
    assert [c.facts.had_cache for c in frees] == [False]
    assert owners(snap)[1] == (frozenset({runner}), frozenset())
    assert engine.cancel(queued) is False  # no longer live


def test_cancel_before_first_step() -> None:
    engine = make(adapter_pages=((1, 1),))
    rid = engine.submit(prompt_len=4, max_new_tokens=2, lora_task_id=1, lora_weights=True)
    assert engine.cancel(rid)
    snap = step(engine)
    _assert_cancelled(snap, rid, 1)
    assert snap.step.output is not None and snap.step.output.listed == ()
    assert engine.live_requests == []


def test_cancel_running_request_frees_device_and_releases_adapter() -> None:
    engine = make(device_pages=8, draft_device_pages=8, tokens_per_block=4, adapter_pages=((1, 1),))
    rid = engine.submit(prompt_len=4, max_new_tokens=9, lora_task_id=1, lora_weights=True)
    step(engine)
    running = step(engine)
    assert running.step.output.generation == (rid,)
    assert owners(running)[1] == (frozenset({rid}), frozenset())
    assert engine.cancel(rid)
    snap = step(engine)
    _assert_cancelled(snap, rid, 1)
    frees = [c for c in snap.step.calls if c.request_id == rid and c.method == "free_resources"]
    assert [c.facts.was_active for c in frees] == [True, True]
    assert owners(snap)[1] == (frozenset(), frozenset())
    assert snap.adapters[0].device is not None and not snap.adapters[0].device.in_use
    assert all(p.device_free == p.device_capacity for p in snap.pools)


def test_cancel_suspended_request_frees_the_pages_it_kept_on_device() -> None:
    # No lower tier: the self-evicted request keeps its device page while suspended.
    engine = make(device_pages=1, tokens_per_block=4, adapter_pages=((1, 1),))
    rid = engine.submit(prompt_len=4, max_new_tokens=3, lora_task_id=1, lora_weights=True)
    step(engine)
    suspended = step(engine)
    assert suspended.step.output.paused == (rid,)
    view = suspended.request(rid)
    assert view is not None and view.target.residency is SUSPENDED
    assert view.target.device_pages == 1
    assert owners(suspended)[1] == (frozenset(), frozenset({rid}))
    assert engine.cancel(rid)
    snap = step(engine)
    _assert_cancelled(snap, rid, 1)
    (done,) = [c for c in snap.step.calls if c.method == "mark_request_done"]
    assert done.facts.was_paused is True and done.facts.released_host is True
    assert snap.pools[0].device_free == 1
    assert owners(snap)[1] == (frozenset(), frozenset())
    assert snap.adapters[0].host is not None and not snap.adapters[0].host.in_use


def _recompute_world() -> tuple[Engine, int, int, Snapshot]:
    """No lower tier; A cannot grow, B is suspended (frees nothing), then recompute-paused."""
    engine = make(device_pages=2, tokens_per_block=4, adapter_pages=((1, 1), (2, 1)))
    a = engine.submit(prompt_len=4, max_new_tokens=2, lora_task_id=1, lora_weights=True)
    b = engine.submit(prompt_len=4, max_new_tokens=3, lora_task_id=2, lora_weights=True)
    step(engine)
    snap = step(engine)
    assert snap.step is not None and snap.step.output is not None
    assert snap.step.output.recompute_paused == (b,)
    return engine, a, b, snap


def test_cancel_recompute_paused_request_leaves_paused_and_unpins_host() -> None:
    engine, _, b, snap = _recompute_world()
    view = snap.request(b)
    assert view is not None and view.recompute_pending and view.target.residency is NONE
    assert owners(snap)[2] == (frozenset(), frozenset({b}))
    assert engine.cancel(b)
    after = step(engine)
    _assert_cancelled(after, b, 2)
    frees = [c for c in after.step.calls if c.request_id == b and c.method == "free_resources"]
    assert [c.facts.had_cache for c in frees] == [False]
    (done,) = [c for c in after.step.calls if c.method == "mark_request_done"]
    assert done.facts.was_paused is True and done.facts.released_host is True
    assert owners(after)[2] == (frozenset(), frozenset())


def test_cancel_unknown_request_is_refused() -> None:
    engine = make()
    assert engine.cancel(42) is False
    rid = engine.submit(prompt_len=4, max_new_tokens=1)
    step(engine)  # finished
    assert engine.cancel(rid) is False


# ---- recompute reset ----


def test_recompute_paused_request_is_reset_with_generated_tokens_folded_in() -> None:
    engine, a, b, snap = _recompute_world()
    view = snap.request(b)
    assert view is not None
    assert (view.state, view.position, view.num_generated, view.context_len) == (
        LlmRequestState.CONTEXT_INIT,
        0,
        1,
        5,  # the 4-token prompt plus the 1 token generated before the pause
    )
    assert not view.started
    assert snap.ended == ((a, "finished"),)

    # It prefills again from scratch, the folded token included, and emits.
    again = step(engine)
    assert again.step is not None and again.step.output is not None
    (listed,) = again.step.output.listed
    assert (listed.request_id, listed.output_list, listed.chunk_size) == (b, "context", 5)
    view = again.request(b)
    assert view is not None
    assert (view.state, view.position, view.num_generated) == (
        LlmRequestState.GENERATION_IN_PROGRESS,
        5,
        2,
    )
    assert view.target.capacity == 5 and not view.recompute_pending
    assert owners(again)[2] == (frozenset({b}), frozenset())


# ---- prepare_resources: registration every chunk ----


def test_prepare_resources_registers_every_context_request_every_chunk() -> None:
    engine = make(
        device_pages=16,
        tokens_per_block=4,
        enable_chunked_context=True,
        chunk_unit_size=4,
        max_num_tokens=10,
        adapter_pages=((1, 1), (2, 1)),
    )
    x = engine.submit(prompt_len=12, max_new_tokens=2, lora_task_id=1, lora_weights=True)
    y = engine.submit(prompt_len=12, max_new_tokens=2, lora_task_id=2, lora_weights=True)
    z = engine.submit(prompt_len=2, max_new_tokens=9)  # no adapter: registered too, a no-op
    registrations = []
    for _ in range(3):
        snap = step(engine)
        assert snap.step is not None and snap.step.output is not None
        regs = [c for c in snap.step.calls if c.method == "add_request_peft"]
        assert all(c.caller == "prepare_resources" and c.result == "ok" for c in regs)
        chunks = [(v.request_id, v.chunk_size) for v in snap.step.output.listed]
        registrations.append((chunks, [(c.request_id, c.facts.already_active) for c in regs]))
    # 1: x takes two units of the ten tokens, z the two left; y gets nothing.
    # 2: x its last four, y one unit of the six left; z generates.
    # 3: y its last eight; x generates.
    assert registrations == [
        ([(z, 2), (x, 8)], [(z, None), (x, False)]),  # sorted: no adapter first
        ([(x, 4), (y, 4), (z, 0)], [(x, True), (y, False)]),
        ([(y, 8), (z, 0), (x, 0)], [(y, True)]),
    ]


# ---- a registration that raises fails only that request ----


@pytest.mark.parametrize(
    ("config", "weights", "exception", "result"),
    [
        ({}, False, "PeftTaskNotCachedException", "not_cached"),
        ({"lora_host_pages": 1}, True, "LoraCacheFullException", "host_full"),
    ],
    ids=["not_cached_no_weights", "host_lora_cache_full"],
)
def test_failed_add_request_peft_fails_only_that_request(
    config: dict[str, Any], weights: bool, exception: str, result: str
) -> None:
    engine = make(
        device_pages=8,
        draft_device_pages=8,
        tokens_per_block=4,
        adapter_pages=((1, 1), (2, 1)),
        **config,
    )
    good = engine.submit(prompt_len=4, max_new_tokens=3, lora_task_id=1, lora_weights=True)
    bad = engine.submit(prompt_len=4, max_new_tokens=3, lora_task_id=2, lora_weights=weights)
    snap = step(engine)  # an allowed outcome: check() is clean
    assert snap.step is not None and snap.step.output is not None
    assert snap.step.output.context == (good, bad)
    (error,) = snap.step.errors
    assert (error.kind, error.request_id, error.exception, error.registered_before) == (
        "add_request_peft_failed",
        bad,
        exception,
        False,
    )
    assert snap.ended == ((bad, "failed"),)
    assert not engine.is_live(bad) and snap.request(bad) is None
    assert held_by(snap, bad) == []
    assert [
        c.facts.had_cache
        for c in snap.step.calls
        if c.request_id == bad and c.method == "free_resources"
    ] == [True, True]
    assert [
        c.result for c in snap.step.calls if c.request_id == bad and c.method == "add_request_peft"
    ] == [result]
    assert 2 not in owners(snap) or owners(snap)[2] == (frozenset(), frozenset())
    host = dict(next(c for c in snap.lora_caches if c.name == "host").entries)
    assert 2 not in host and host[1].in_use
    # Gone from the batch: not after prepare, not in ensure_batch, and the rest ran.
    assert [v.request_id for v in snap.step.after_prepare] == [good]
    (ensure,) = [c for c in snap.step.calls if c.method == "ensure_batch"]
    assert ensure.args.tasks == (1,) and ensure.result == "ok"
    assert snap.step.batch_ran
    view = snap.request(good)
    assert view is not None and view.num_generated == 1
    assert view.state is LlmRequestState.GENERATION_IN_PROGRESS
    assert owners(snap)[1] == (frozenset({good}), frozenset())


# ---- the scheduler is untrusted ----


class _Wrapping:
    """Runs the reference pass, then lets a subclass spoil the output."""

    def __init__(self, env: Environment) -> None:
        self.inner = ReferenceScheduler(env)

    def schedule_request(self, active: list[Request], inflight: set[int]) -> Any:
        return self.spoil(self.inner.schedule_request(active, inflight), active)

    def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
        return out


class _Raises(_Wrapping):
    def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
        raise RuntimeError("boom")


class _ReturnsNone(_Wrapping):
    def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
        return None


class _ReturnsDict(_Wrapping):
    def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
        return {"context_requests": out.context_requests}


class _ReturnsTwice(_Wrapping):
    def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
        out.context_requests.append(out.context_requests[0])
        return out


class _ReturnsUnknownId(_Wrapping):
    def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
        out.context_requests.append(Request(99, None, False, prompt_len=4, max_new_tokens=1))
        return out


class _ReturnsForeignCopy(_Wrapping):
    def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
        out.context_requests[0] = attrs.evolve(out.context_requests[0])
        return out


class _ReturnsInTwoLists(_Wrapping):
    def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
        out.paused_requests.append(out.context_requests[0])
        return out


class _ReturnsItemNotRequest(_Wrapping):
    def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
        out.generation_requests.append("request 1")
        return out


class _RaisesKeyboardInterrupt(_Wrapping):
    def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
        raise KeyboardInterrupt("from the scheduler's own code")


def _factory_raises(env: Environment) -> Any:
    raise ValueError("cannot build")


@pytest.mark.parametrize(
    ("factory", "error_kind", "invariants", "in_message"),
    [
        (_Raises, "scheduler_raised", {"scheduler_protocol"}, "RuntimeError: boom"),
        (_ReturnsNone, "malformed_output", {"scheduler_protocol"}, "returned None, not a"),
        (_ReturnsDict, "malformed_output", {"scheduler_protocol"}, "returned a dict, not a"),
        (_ReturnsTwice, None, {"output_lists_well_formed"}, "in context and context"),
        (_ReturnsUnknownId, "malformed_output", {"scheduler_protocol"}, "request 99"),
        (_ReturnsForeignCopy, "malformed_output", {"scheduler_protocol"}, "never submitted"),
        (_ReturnsInTwoLists, None, {"output_lists_well_formed"}, "in context and paused"),
        (_ReturnsItemNotRequest, "malformed_output", {"scheduler_protocol"}, "a str"),
        (_factory_raises, "scheduler_raised", {"scheduler_protocol"}, "factory raised"),
        (
            _RaisesKeyboardInterrupt,
            "scheduler_raised",
            {"scheduler_protocol"},
            "schedule_request raised KeyboardInterrupt: from the scheduler's own code",
        ),
        (
            OutputRaises,
            "scheduler_raised",
            {"scheduler_protocol"},
            "reading schedule_request's output raised RuntimeError: cannot list (at "
            "tests/bad_schedulers.py:",
        ),
    ],
    ids=[
        "raises",
        "returns_none",
        "returns_dict",
        "request_twice",
        "unknown_id",
        "foreign_copy",
        "two_lists",
        "item_not_request",
        "factory_raises",
        "raises_keyboard_interrupt",
        "output_property_raises",
    ],
)
def test_broken_scheduler_is_a_finding_not_a_crash(
    factory: Any, error_kind: str | None, invariants: set[str], in_message: str
) -> None:
    engine = Engine(EngineConfig(adapter_pages=((1, 1),)), factory)
    rid = engine.submit(prompt_len=4, max_new_tokens=2, lora_task_id=1, lora_weights=True)
    snap = engine.step()  # must not raise
    assert snap.step is not None
    assert [e.kind for e in snap.step.errors] == ([] if error_kind is None else [error_kind])
    violations = check(snap)
    assert {v.invariant for v in violations} == invariants
    messages = [e.message for e in snap.step.errors] + [v.found for v in violations]
    assert any(in_message in m for m in messages), messages
    # Nothing ran: no registration, no token, the request still waits at position 0.
    assert not snap.step.batch_ran and snap.step.after_prepare == ()
    assert all(c.caller != "prepare_resources" for c in snap.step.calls)
    view = snap.request(rid)
    assert view is not None and view.position == 0 and view.num_generated == 0
    assert snap.ended == ()
    # And the engine keeps going: a second step reports again rather than crashing.
    again = engine.step()
    assert invariant_names(again) == invariants


def test_scheduler_that_raised_once_then_recovers_runs_normally() -> None:
    class Flaky(_Wrapping):
        calls = 0

        def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise KeyError("once")
            return out

    engine = Engine(EngineConfig(), Flaky)
    rid = engine.submit(prompt_len=4, max_new_tokens=1)
    first = engine.step()
    assert first.step is not None and [e.kind for e in first.step.errors] == ["scheduler_raised"]
    assert engine.is_live(rid)
    second = engine.step()
    assert check(second) == [] and second.ended == ((rid, "finished"),)


def test_scheduler_listing_a_finished_request_is_a_finding() -> None:
    class Resurrects(_Wrapping):
        def __init__(self, env: Environment) -> None:
            super().__init__(env)
            self.seen: list[Request] = []

        def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
            if self.seen:
                out.generation_requests.append(self.seen[0])
            self.seen.extend(active)
            return out

    engine = Engine(EngineConfig(), Resurrects)
    first_id = engine.submit(prompt_len=4, max_new_tokens=1)
    first = engine.step()
    assert first.ended == ((first_id, "finished"),) and check(first) == []
    snap = engine.step()
    assert snap.step is not None and snap.step.output is not None
    assert snap.step.output.generation == (first_id,)
    assert invariant_names(snap) == {"output_lists_well_formed"}
    assert not snap.step.batch_ran


def test_hung_scheduler_is_reported_within_the_deadline() -> None:
    class Hangs:
        def __init__(self, env: Environment) -> None:
            pass

        def schedule_request(self, active: list[Request], inflight: set[int]) -> Any:
            while True:
                pass

    gc.collect()
    armers = WATCHDOG.armers
    engine = Engine(EngineConfig(), Hangs, schedule_deadline=0.2)
    assert WATCHDOG.armers == armers + 1
    rid = engine.submit(prompt_len=4, max_new_tokens=1)
    start = time.monotonic()
    snap = engine.step()
    elapsed = time.monotonic() - start
    # Not before the deadline; after it, only a hang guard (a busy machine runs late).
    assert 0.15 < elapsed < 30
    assert snap.step is not None
    (error,) = snap.step.errors
    assert error.kind == "scheduler_hung" and "0.2" in error.message
    assert invariant_names(snap) == {"scheduler_protocol"}
    assert engine.is_live(rid) and not snap.step.batch_ran
    # Once the engine is gone it no longer holds the alarm.
    del engine, snap
    gc.collect()
    assert WATCHDOG.armers == armers


def test_the_last_armer_stops_the_alarm_and_restores_the_handler() -> None:
    dog = Watchdog()
    before = signal.getsignal(signal.SIGALRM)
    timer = signal.getitimer(signal.ITIMER_REAL)
    if timer != (0.0, 0.0):
        pytest.skip("another alarm is running in this process")
    assert dog.arm(1.0) and dog.arm(0.1)
    assert signal.getitimer(signal.ITIMER_REAL)[1] > 0
    dog.disarm()
    assert signal.getitimer(signal.ITIMER_REAL)[1] > 0  # one armer left
    dog.disarm()
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) == before


def _spin() -> None:
    while True:
        pass


class _HangsSwallowing:
    """Hangs, and swallows every ``Exception`` on the way."""

    def __init__(self, env: Environment) -> None:
        pass

    def schedule_request(self, active: list[Request], inflight: set[int]) -> Any:
        while True:
            try:
                _spin()
            except Exception:
                continue


class _SwallowsEverything(_HangsSwallowing):
    def schedule_request(self, active: list[Request], inflight: set[int]) -> Any:
        swallowed = 0
        while True:
            try:
                _spin()
            except BaseException:
                swallowed += 1
                if swallowed > 1:
                    raise


def _factory_hangs(env: Environment) -> Any:
    while True:
        pass


@pytest.mark.parametrize(
    ("factory", "what"),
    [
        (_HangsSwallowing, "schedule_request"),
        (_SwallowsEverything, "schedule_request"),
        (_factory_hangs, "the scheduler factory"),
    ],
    ids=["catches_exception", "swallows_once", "factory"],
)
def test_a_hang_cannot_be_swallowed(factory: Any, what: str) -> None:
    engine = Engine(EngineConfig(), factory, schedule_deadline=0.1)
    engine.submit(prompt_len=4, max_new_tokens=1)
    snap = engine.step()
    assert snap.step is not None
    (error,) = snap.step.errors
    assert (error.kind, error.message) == ("scheduler_hung", f"{what} did not return within 0.1 s")
    assert invariant_names(snap) == {"scheduler_protocol"}


def test_the_watchdog_is_armed_once_per_engine_not_per_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = Engine(EngineConfig(), ReferenceScheduler)
    engine.submit(prompt_len=4, max_new_tokens=3)
    touched: list[str] = []
    monkeypatch.setattr(signal, "setitimer", lambda *a: touched.append("setitimer"))
    monkeypatch.setattr(signal, "signal", lambda *a: touched.append("signal"))
    for _ in range(5):
        engine.step()
    assert touched == []  # the passes themselves set no timer and no handler
    assert WATCHDOG.armers >= 1


# ---- determinism and hashable snapshots ----


def _scripted_run() -> list[Snapshot]:
    engine = make(
        device_pages=4,
        host_pages=2,
        draft_device_pages=4,
        draft_host_pages=2,
        tokens_per_block=2,
        enable_chunked_context=True,
        chunk_unit_size=2,
        max_num_tokens=6,
        lora_device_pages=2,
        lora_host_pages=3,
        adapter_pages=((1, 1), (2, 1), (3, 2)),
    )
    for task, prompt, out in ((1, 3, 4), (2, 5, 3), (None, 2, 5), (3, 4, 2), (1, 2, 6)):
        engine.submit(prompt_len=prompt, max_new_tokens=out, lora_task_id=task, lora_weights=True)
    snaps = []
    for i in range(40):
        if i == 3:
            engine.kv_cache_manager.fail_next_grows()
        if i == 5:
            engine.kv_cache_manager.refuse_next_resumes()
            assert engine.draft_kv_cache_manager is not None
            engine.draft_kv_cache_manager.fail_next_grows()
        if i == 7:
            engine.cancel(2)
        snaps.append(engine.step())
    return snaps


def test_snapshots_are_hashable_and_equal_for_identical_runs() -> None:
    first, second = _scripted_run(), _scripted_run()
    assert first == second
    assert [hash(s) for s in first] == [hash(s) for s in second]
    assert len(set(first)) == len(first)  # each iteration differs at least by its step record
    assert all(check(s) == [] for s in first)
    # The script really moved KV and adapters about (otherwise equality proves little).
    methods = {c.method for s in first if s.step for c in s.step.calls}
    assert {"suspend_request", "mark_request_done", "add_request_peft"} <= methods
    assert {rid for s in first for rid, _ in s.ended} == {1, 2, 3, 4, 5}


def test_world_view_ignores_the_clock_and_the_step() -> None:
    snaps = _scripted_run()
    last = snaps[-1]
    assert last.requests == () and last.world().step is None
    assert last.world() == attrs.evolve(snaps[-2], iteration=0, ended=(), step=None)


@pytest.mark.parametrize("batch", [2, 8])
def test_a_step_copies_each_adapters_owners_a_fixed_number_of_times(
    batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not once per scheduled request: a batch on one adapter would cost batch x owners."""
    engine = make(device_pages=4 * batch, max_batch_size=batch, adapter_pages=((1, 1),))
    for _ in range(batch):
        engine.submit(prompt_len=4, max_new_tokens=100, lora_task_id=1, lora_weights=True)
    step(engine)
    peft = engine.peft_cache_manager
    assert peft is not None
    copies: list[int] = []
    owners = peft.active_requests

    def counted(task_id: int) -> frozenset[int]:
        copies.append(task_id)
        return owners(task_id)

    monkeypatch.setattr(peft, "active_requests", counted)
    snap = step(engine)
    assert snap.step is not None and len(snap.step.after_prepare) == batch
    # One for the scheduled views; the snapshot keeps its adapter views, since a step of
    # owners that stay owners (and of adapters already in use) moves no ownership.
    assert copies == [1]


# ---- submit validation ----


def test_submit_rejects_an_unknown_adapter() -> None:
    engine = make(adapter_pages=((1, 2), (3, 1)))
    with pytest.raises(ValueError, match="unknown adapter 2"):
        engine.submit(prompt_len=4, max_new_tokens=1, lora_task_id=2, lora_weights=True)
    with pytest.raises(ValueError, match="unknown adapter 1"):
        make().submit(prompt_len=4, max_new_tokens=1, lora_task_id=1)
    assert engine.live_requests == []
    assert engine.submit(prompt_len=4, max_new_tokens=1, lora_task_id=3) == 1


@pytest.mark.parametrize(("prompt_len", "max_new_tokens"), [(0, 1), (4, 0), (-1, 3)])
def test_submit_rejects_empty_requests(prompt_len: int, max_new_tokens: int) -> None:
    engine = make()
    with pytest.raises(ValueError, match="prompt_len >= 1"):
        engine.submit(prompt_len=prompt_len, max_new_tokens=max_new_tokens)
    assert engine.live_requests == []


def test_weights_are_dropped_for_a_request_without_adapter() -> None:
    engine = make(adapter_pages=((1, 1),))
    rid = engine.submit(prompt_len=4, max_new_tokens=1, lora_weights=True)
    (req,) = engine.live_requests
    assert req.request_id == rid and req.lora_task_id is None and req.lora_weights is False


# ---- the executor's teardown of a recompute-paused request (a world option) ----


def _recompute_paused_world(teardown: str) -> tuple[Engine, int]:
    """Two requests of one adapter in a 3-page pool with no lower tier: by the third
    iteration the first one's growth recompute-pauses the second (suspended earlier)."""
    engine = Engine(
        EngineConfig(
            device_pages=3,
            tokens_per_block=1,
            adapter_pages=((1, 1),),
            lora_device_pages=2,
            recompute_teardown=teardown,  # type: ignore[arg-type]
        ),
        ReferenceScheduler,
    )
    engine.submit(prompt_len=1, max_new_tokens=6, lora_task_id=1, lora_weights=True)
    victim = engine.submit(prompt_len=1, max_new_tokens=6, lora_task_id=1, lora_weights=True)
    return engine, victim


@pytest.mark.parametrize("teardown", ["scheduler_only", "executor_frees"])
def test_recompute_teardown_option(teardown: str) -> None:
    """ "executor_frees" (the default) does what TensorRT-LLM's executor does: free every
    resource and terminate the ownership (mark_request_done with pause false), which
    invariant 1 accepts; "scheduler_only" leaves the adapter as the scheduler left it
    (paused)."""
    engine, victim = _recompute_paused_world(teardown)
    engine.step()
    engine.step()
    snap = engine.step()
    assert snap.step is not None and snap.step.output is not None
    assert snap.step.output.recompute_paused == (victim,)
    (adapter,) = snap.adapters
    terminations = [
        c
        for c in snap.step.calls
        if c.method == "mark_request_done" and c.caller == "recompute_teardown"
    ]
    found = {v.invariant for v in check(snap)}
    assert found == set()
    if teardown == "scheduler_only":
        assert victim in adapter.paused and terminations == []
    else:
        assert victim not in adapter.paused | adapter.active
        assert [(c.request_id, c.args.pause) for c in terminations] == [(victim, False)]


@pytest.mark.parametrize(
    ("old", "new"), [("spec", "scheduler_only"), ("upstream", "executor_frees")]
)
def test_the_old_teardown_names_load_with_their_meaning(old: str, new: str) -> None:
    """A report or a scenario written before the values were renamed replays as it ran."""
    assert EngineConfig(recompute_teardown=old).recompute_teardown == new  # type: ignore[arg-type]


def test_engine_config_refuses_unknown_chunking_policy_and_teardown() -> None:
    with pytest.raises(ValueError, match="context_chunking_policy"):
        EngineConfig(context_chunking_policy="FORCE_CHUNK")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="recompute_teardown"):
        EngineConfig(recompute_teardown="sometimes")  # type: ignore[arg-type]
    assert EngineConfig(context_chunking_policy="EQUAL_PROGRESS").scheduler_config() == (
        EngineConfig()
        .scheduler_config()
        .__class__(
            max_num_tokens=64,
            max_batch_size=8,
            enable_chunked_context=False,
            chunk_unit_size=4,
            enable_recompute_pause=True,
            tokens_per_block=4,
            context_chunking_policy="EQUAL_PROGRESS",
        )
    )


# ---- the scheduler writes only what is its own (8b); every escape is a finding ----


class _Writes(_Wrapping):
    """Writes one field of every active request, then schedules as the reference."""

    field = "num_generated"
    value: object = 1

    def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
        for req in active:
            setattr(req, self.field, self.value)
        return out


@pytest.mark.parametrize(
    ("field", "value", "before", "after"),
    [
        ("num_generated", 1, "0", "1"),
        ("context_current_position", 2, "0", "2"),
        ("state", LlmRequestState.GENERATION_COMPLETE, "CONTEXT_INIT", "GENERATION_COMPLETE"),
        ("lora_task_id", 99, "1", "99"),
        ("lora_weights", False, "True", "False"),
        ("prompt_len", 1, "4", "1"),
        ("max_new_tokens", 9, "2", "9"),
        ("num_folded", 3, "0", "3"),
    ],
)
def test_a_write_to_a_field_that_is_not_the_schedulers_is_a_finding_and_undone(
    field: str, value: object, before: str, after: str
) -> None:
    writer = type("W", (_Writes,), {"field": field, "value": value})
    engine = Engine(EngineConfig(adapter_pages=((1, 1),)), writer)
    rid = engine.submit(prompt_len=4, max_new_tokens=2, lora_task_id=1, lora_weights=True)
    snap = engine.step()  # must not raise, whatever was written
    v = next(v for v in check(snap) if v.invariant == "scheduler_writes_only_its_own")
    assert (str(v.subject), v.found) == (
        f"request {rid}",
        f"the scheduler changed {field} from {before} to {after}",
    )
    # The engine put the field back before running the batch.
    view = snap.request(rid)
    assert (
        view is not None
        and view.prompt_len == 4
        and view.state is LlmRequestState.GENERATION_IN_PROGRESS
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [("context_chunk_size", 3), ("py_batch_idx", None), ("estimated_reusable_tokens", 0)],
)
def test_the_schedulers_own_fields_are_its_to_write(field: str, value: object) -> None:
    writer = type("W", (_Writes,), {"field": field, "value": value})
    engine = Engine(EngineConfig(), writer)
    engine.submit(prompt_len=4, max_new_tokens=2)
    snap = engine.step()
    assert snap.step is not None and snap.step.writes == ()


def test_weights_the_manager_drops_on_the_schedulers_registration_are_not_its_write() -> None:
    # The reference re-registers a resumed request itself: the manager drops its weights.
    engine = make(device_pages=2, host_pages=8, tokens_per_block=4, adapter_pages=((1, 1),))
    rid = engine.submit(prompt_len=4, max_new_tokens=6, lora_task_id=1, lora_weights=True)
    step(engine)
    engine.kv_cache_manager.fail_next_grows()
    step(engine)  # self eviction
    engine._requests[rid].lora_weights = True  # carries weights again, as a new upload would
    snap = step(engine)  # resumed and registered by the scheduler
    assert snap.step is not None and snap.step.writes == ()
    assert any(c.caller == "scheduler" and c.method == "add_request_peft" for c in snap.step.calls)


class _RegistersUncached(_Wrapping):
    """Registers every request itself before the pass; one without weights raises."""

    def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
        return out

    def schedule_request(self, active: list[Request], inflight: set[int]) -> Any:
        assert self.inner.peft is not None
        for req in active:
            self.inner.peft.add_request_peft(req)
        return super().schedule_request(active, inflight)


def test_add_request_peft_raising_inside_the_pass_is_a_finding_with_frames() -> None:
    engine = Engine(EngineConfig(adapter_pages=((1, 1),)), _RegistersUncached)
    engine.submit(prompt_len=4, max_new_tokens=2, lora_task_id=1, lora_weights=False)
    snap = engine.step()
    assert snap.step is not None
    (error,) = snap.step.errors
    assert error.kind == "scheduler_raised" and error.exception == "PeftTaskNotCachedException"
    assert error.frames[0].startswith("peftlife/world/peft.py:")
    assert "test_engine.py:" in error.frames[1]
    assert error.frames[1].endswith("in schedule_request")
    assert " (at peftlife/world/peft.py:" in error.message
    assert check(snap)[0].invariant == "scheduler_protocol"


class _SwallowsAfterRecompute(ReferenceScheduler):
    """Registers a request it just recompute-paused, hiding what the manager raises."""

    def release_on_recompute_pause(self, req: Request) -> None:
        super().release_on_recompute_pause(req)
        assert self.peft is not None
        with contextlib.suppress(Exception):  # the defect under test
            self.peft.add_request_peft(req)


def test_a_schedulers_own_registration_does_not_end_recompute_pending() -> None:
    # A trace the search found: request 3 is preempted while ACTIVE during the drain.
    # The executor leaves the teardown to the scheduler, so its own registration stands.
    config = EngineConfig(
        recompute_teardown="scheduler_only",
        device_pages=4,
        tokens_per_block=3,
        lora_device_pages=1,
        lora_host_pages=1,
        adapter_pages=((2, 1),),
        max_num_tokens=1,
        max_batch_size=1,
        enable_chunked_context=True,
        chunk_unit_size=1,
    )
    actions = [
        Action("submit", lora_task_id=2, prompt_len=1, max_new_tokens=1),
        Action("fail_grow"),
        Action("submit", prompt_len=10, max_new_tokens=1),
        Action("step"),
        Action("fail_grow"),
        Action("submit", lora_task_id=2, lora_weights=True, prompt_len=2, max_new_tokens=1),
        Action("fail_grow"),
        Action("step"),
    ]
    outcome = checked_replay(config, actions, _SwallowsAfterRecompute)
    last = outcome.snapshots[-1]
    assert last.step is not None
    (again,) = [
        c
        for c in last.step.calls
        if c.caller == "scheduler" and c.method == "add_request_peft" and c.result == "ok"
    ]
    view = last.request(again.request_id or 0)
    assert view is not None and view.recompute_pending and view.target.residency is NONE
    first = outcome.violations[0]
    assert (first.invariant, first.found) == ("ownership_follows_residency", "active")
    assert "no_duplicate_registration" in {v.invariant for v in outcome.violations}


def test_ctrl_c_while_the_scheduler_runs_stops_the_run() -> None:
    # A KeyboardInterrupt the scheduler raises is a finding (above); a SIGINT is the user's.
    class Interrupted(_Wrapping):
        def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
            signal.raise_signal(signal.SIGINT)
            return out

    engine = Engine(EngineConfig(), Interrupted)
    engine.submit(prompt_len=4, max_new_tokens=1)
    # The test's worker may ignore SIGINT; the user's terminal does not.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            engine.step()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_deep_exception_keeps_where_it_was_raised_and_the_schedulers_outer_frames() -> None:
    class Deep(_Wrapping):
        def spoil(self, out: SchedulerOutput, active: list[Request]) -> Any:
            return self.dive(20)

        def dive(self, depth: int) -> Any:
            if depth == 0:
                raise ValueError("at the bottom")
            return self.dive(depth - 1)

    engine = Engine(EngineConfig(), Deep)
    engine.submit(prompt_len=4, max_new_tokens=1)
    snap = engine.step()
    assert snap.step is not None
    (error,) = snap.step.errors
    assert len(error.frames) == 7 and error.frames[2] == "..."
    assert error.frames[0].endswith("in dive") and error.frames[-1].endswith("in schedule_request")


def test_inputs_given_while_withdrawn_leave_the_world_as_it_was() -> None:
    """Every input the world takes, given and withdrawn: the engine then runs as a twin
    that was never given them, iteration for iteration."""
    config = EngineConfig(
        executor="overlap",
        hold_reason="attention_dp",
        draft_device_pages=8,
        adapter_pages=((1, 2),),
    )
    engine, twin = Engine(config, ReferenceScheduler), Engine(config, ReferenceScheduler)
    for world in (engine, twin):
        for _ in range(2):
            world.submit(lora_task_id=1, lora_weights=True, prompt_len=2, max_new_tokens=3)
        world.step()
        world.kv_cache_manager.fail_next_grows()
        assert world.end_of_sequence(world.emitting_ids[0])
    with engine.inputs_withdrawn():
        engine.submit(prompt_len=2, max_new_tokens=2)
        assert engine.cancel(1)
        assert engine.end_of_sequence(engine.emitting_ids[1])
        assert engine.hold_batch()
        for pool in engine.pools:
            pool.refuse_next_resumes()
            pool.fail_next_grows()
    assert engine.next_request_id == twin.next_request_id == 3
    assert engine.pending_cancels == () and engine.pending_read_back == twin.pending_read_back
    assert [p.pending_faults for p in engine.pools] == [p.pending_faults for p in twin.pools]
    for _ in range(4):
        assert engine.step() == twin.step()
