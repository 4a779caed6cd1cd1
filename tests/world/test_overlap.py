"""The overlap executor: its loop, its actions, and invariants 13-16 at their edges.

Each edge test runs one trace step by step: the iteration before the defect acts
holds, the one where it acts is flagged, and the reference holds on the same trace.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

import attrs
import pytest

from peftlife.checker import invariants, registry
from peftlife.checker.invariants import Violation
from peftlife.reports.finding.case import Case, to_json, trace_hash
from peftlife.reports.format import plain as plain_json
from peftlife.search import scenarios, shrink
from peftlife.search.trace import Action, apply, checked_replay
from peftlife.sut import mutants
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
from peftlife.world.protocol import SchedulerOutput
from peftlife.world.request import LlmRequestState
from peftlife.world.snapshot import Snapshot


def _steps(config: EngineConfig, factory: object, actions: list[Action]) -> list[Snapshot]:
    engine = Engine(config, factory)  # type: ignore[arg-type]
    return [s for s in (apply(engine, a) for a in actions) if s is not None]


def _names(snapshot: Snapshot, check: Callable[[Snapshot], Iterable[Violation]]) -> list[str]:
    return [v.invariant for v in check(snapshot)]


OVERLAP = EngineConfig(executor="overlap")


def test_a_request_retires_and_ends_one_iteration_after_its_last_launch() -> None:
    engine = Engine(OVERLAP, ReferenceScheduler)
    rid = engine.submit(prompt_len=4, max_new_tokens=1)
    first = engine.step()
    assert first.in_flight == (rid,)
    assert first.request(rid).state is LlmRequestState.GENERATION_TO_COMPLETE  # type: ignore[union-attr]
    second = engine.step()
    assert second.ended == ((rid, "finished"),)
    assert second.step is not None and second.step.overlap is not None
    assert second.step.overlap.in_flight == (rid,)


def test_the_scheduler_is_told_batch_n_or_nothing() -> None:
    told: list[set[int]] = []

    class Spy(ReferenceScheduler):
        def schedule_request(self, active, inflight_request_ids):  # type: ignore[no-untyped-def]
            told.append(set(inflight_request_ids))
            return super().schedule_request(active, inflight_request_ids)

    for mode, expected in (("batch", [set(), {1}]), ("empty", [set(), set()])):
        told.clear()
        engine = Engine(EngineConfig(executor="overlap", inflight_ids=mode), Spy)  # type: ignore[arg-type]
        engine.submit(prompt_len=4, max_new_tokens=3)
        engine.step()
        engine.step()
        assert told == expected


def test_eos_ends_an_in_flight_member_at_the_next_read_back() -> None:
    engine = Engine(OVERLAP, ReferenceScheduler)
    rid = engine.submit(prompt_len=4, max_new_tokens=5)
    engine.step()
    assert engine.end_of_sequence(rid)
    snap = engine.step()
    assert snap.ended == ((rid, "finished"),)
    assert snap.step is not None and snap.step.overlap is not None
    assert snap.step.overlap.eos == (rid,)


def test_a_held_batch_is_prepared_but_not_launched() -> None:
    engine = Engine(attrs.evolve(OVERLAP, hold_reason="attention_dp"), ReferenceScheduler)
    rid = engine.submit(prompt_len=4, max_new_tokens=2)
    assert engine.hold_batch()
    snap = engine.step()
    assert snap.step is not None and snap.step.overlap is not None
    assert snap.step.overlap.held and not snap.step.batch_ran
    assert snap.in_flight == () and snap.request(rid).position == 0  # type: ignore[union-attr]
    assert registry.check(snap, engine.config) == []


def test_a_single_rank_never_holds_a_batch() -> None:
    """Upstream queues every non-empty batch on one rank without attention DP
    (py_executor.py, _can_queue): a world with no hold reason refuses hold_batch."""
    engine = Engine(OVERLAP, ReferenceScheduler)
    engine.submit(prompt_len=4, max_new_tokens=2)
    assert not engine.hold_batch()


@pytest.mark.parametrize(("reason", "kept"), [("batch_waiting", ()), ("context_kv_cap", (2,))])
def test_batch_waiting_and_the_kv_cap_drop_context_requests(
    reason: str, kept: tuple[int, ...]
) -> None:
    """Upstream's _waiting_requests drops every context request while generation runs,
    _cap_context_by_total_kv_len those after the first: their KV stays grown, they do
    not run, and the rest of the batch does."""
    engine = Engine(attrs.evolve(OVERLAP, hold_reason=reason), ReferenceScheduler)
    first = engine.submit(prompt_len=2, max_new_tokens=4)
    engine.step()
    engine.step()  # request 1 generates from now on
    second = engine.submit(prompt_len=2, max_new_tokens=2)
    third = engine.submit(prompt_len=2, max_new_tokens=2)
    assert engine.hold_batch()
    snap = engine.step()
    assert snap.step is not None and snap.step.output is not None
    assert set(snap.step.output.context) == {second, third}
    assert first in snap.in_flight
    assert tuple(r for r in (second, third) if r in snap.in_flight) == kept
    assert registry.check(snap, engine.config) == []


def test_the_simple_loop_ignores_the_overlap_actions() -> None:
    engine = Engine(EngineConfig(), ReferenceScheduler)
    rid = engine.submit(prompt_len=4, max_new_tokens=3)
    engine.step()
    assert not engine.end_of_sequence(rid) and not engine.hold_batch()


def test_a_simple_loop_report_keeps_its_fields_and_hash() -> None:
    config = EngineConfig()
    plain = plain_json(config)
    assert "executor" not in plain and "inflight_ids" not in plain
    outcome = checked_replay(
        config, (Action("submit", prompt_len=4, max_new_tokens=1),), ReferenceScheduler
    )
    case = Case("reference", "default", config, (Action("submit", prompt_len=4, max_new_tokens=1),))
    text = json.dumps(to_json(case, outcome))
    for word in ("executor", "in_flight", "overlap", "retiring", "held"):
        assert f'"{word}"' not in text
    overlap_case = Case("reference", "overlap", OVERLAP, case.actions)
    assert plain_json(OVERLAP)["executor"] == "overlap"
    assert trace_hash(overlap_case) != trace_hash(case)


def test_an_overlap_case_reads_back() -> None:
    actions = (
        Action("submit", prompt_len=4, max_new_tokens=3),
        Action("step"),
        Action("eos", request_id=1),
        Action("hold_batch"),
    )
    case = Case(
        "reference", "overlap", EngineConfig(executor="overlap", inflight_ids="empty"), actions
    )
    again = Case.from_json(to_json(case, checked_replay(case.config, actions, ReferenceScheduler)))
    assert again.config == case.config and again.actions == actions


def test_the_shrink_order_ranks_the_new_words() -> None:
    small = (Action("step"),)
    assert shrink.size(EngineConfig(), small) < shrink.size(OVERLAP, small)
    assert shrink.size(OVERLAP, (Action("hold_batch"),)) > shrink.size(OVERLAP, small)
    # A dropped submit renumbers the eos that names a later request.
    kept = shrink._dropping(
        (Action("submit", prompt_len=1, max_new_tokens=1),) * 2 + (Action("eos", request_id=2),),
        {0},
    )
    assert kept[-1] == Action("eos", request_id=1)


@pytest.mark.parametrize("name", ["overlap", "overlap-kv-pressure", "overlap-empty"])
def test_the_overlap_scenarios_ship(name: str) -> None:
    assert name in scenarios.shipped_names()
    assert scenarios.smallest_world(scenarios.load(name)).overlap


# ---- invariants 13-16 at their edges ----

RETIRING = EngineConfig(
    device_pages=6,
    host_pages=9,
    tokens_per_block=1,
    adapter_pages=((2, 1),),
    lora_device_pages=1,
    lora_host_pages=1,
    max_num_tokens=4,
    max_batch_size=2,
    enable_recompute_pause=False,
    executor="overlap",
    inflight_ids="empty",
)
# Request 2 retires in iteration 2; in iteration 3 a failed grow for request 1 looks for a victim.
RETIRING_TRACE = [
    Action("submit", None, 2, False, 2, 2),
    Action("fail_grow"),
    Action("submit", None, 2, True, 3, 2),
    Action("step"),
    Action("step"),
    Action("step"),
]


def test_13_a_retiring_request_taken_as_a_victim_is_flagged() -> None:
    check = invariants.retiring_keeps_its_place
    inside, past = _steps(RETIRING, mutants.EvictsRetiring, RETIRING_TRACE)[-2:]
    assert any(v.state is LlmRequestState.GENERATION_TO_COMPLETE for v in inside.requests)
    assert _names(inside, check) == []
    assert _names(past, check) == ["retiring_keeps_its_place"]
    assert all(
        not registry.check(s, RETIRING)
        for s in _steps(RETIRING, ReferenceScheduler, RETIRING_TRACE)
    )


PRESSURE = EngineConfig(
    device_pages=7,
    tokens_per_block=2,
    adapter_pages=((1, 1),),
    lora_device_pages=1,
    lora_host_pages=1,
    max_num_tokens=2,
    max_batch_size=1,
    enable_chunked_context=True,
    chunk_unit_size=1,
    executor="overlap",
)
# In iteration 9 request 2 is on the device when request 1 needs room.
PRESSURE_TRACE = [
    Action("submit", None, 1, True, 4, 4),
    Action("submit", None, 1, False, 6, 3),
    *[Action("step")] * 9,
]


def test_14_an_in_flight_member_recompute_paused_is_flagged() -> None:
    check = invariants.in_flight_pin
    snaps = _steps(PRESSURE, mutants.DoubleTeardown, PRESSURE_TRACE)
    inside, past = snaps[-2:]
    assert _names(inside, check) == []
    assert _names(past, check) == ["in_flight_pin"]
    assert all(
        not registry.check(s, PRESSURE)
        for s in _steps(PRESSURE, ReferenceScheduler, PRESSURE_TRACE)
    )


def test_14_is_not_checked_when_the_scheduler_is_told_nothing_unless_opted_in() -> None:
    empty = EngineConfig(
        **{**plain_json(PRESSURE), "adapter_pages": ((1, 1),), "inflight_ids": "empty"}
    )
    snaps = _steps(empty, mutants.DoubleTeardown, PRESSURE_TRACE)
    assert registry.not_checked(empty) == (registry.BY_NAME["in_flight_pin"],)
    assert all("in_flight_pin" not in _names(s, lambda s: registry.check(s, empty)) for s in snaps)
    always = attrs.evolve(empty, in_flight_pin="always")
    assert always.in_flight_checked and not always.in_flight_told
    assert registry.not_checked(always) == ()
    snaps = _steps(always, mutants.DoubleTeardown, PRESSURE_TRACE)
    assert all(
        s.step is not None and s.step.overlap is not None and s.step.overlap.in_flight_checked
        for s in snaps[1:]
    )


def test_15_a_recompute_paused_member_ending_by_eos_is_freed_twice_as_upstream() -> None:
    """The executor frees it at its recompute teardown and again after its read-back:
    both frees are idempotent, upstream and here, so 15 holds; 14 flags the pause."""
    trace = [*PRESSURE_TRACE[:-1], Action("eos", request_id=2), Action("step")]
    past = _steps(PRESSURE, mutants.DoubleTeardown, trace)[-1]
    assert past.step is not None
    frees = [
        c.caller for c in past.step.calls if c.method == "free_resources" and c.request_id == 2
    ]
    assert frees.count("free_resources") >= 1 and "recompute_teardown" in frees
    assert _names(past, invariants.nothing_after_teardown) == []
    assert _names(past, invariants.in_flight_pin) == ["in_flight_pin"]
    assert all(not registry.check(s, PRESSURE) for s in _steps(PRESSURE, ReferenceScheduler, trace))


# The executor frees a recompute-paused request after the scheduler did: request 2
# is recompute-paused in iteration 6 (the drain).
UPSTREAM_TEARDOWN = EngineConfig(
    device_pages=4,
    tokens_per_block=1,
    adapter_pages=((2, 1),),
    lora_device_pages=1,
    lora_host_pages=1,
    max_num_tokens=1,
    max_batch_size=1,
    enable_chunked_context=True,
    chunk_unit_size=1,
    executor="overlap",
)
UPSTREAM_TEARDOWN_TRACE = [
    Action("submit", None, 2, True, 1, 3),
    Action("submit", None, 2, False, 2, 2),
    *[Action("step")] * 6,
]


def test_15_the_executor_finishing_a_recompute_pause_is_upstreams_teardown() -> None:
    snaps = _steps(UPSTREAM_TEARDOWN, ReferenceScheduler, UPSTREAM_TEARDOWN_TRACE)
    step = snaps[-1].step
    assert step is not None
    frees = [c.caller for c in step.calls if c.method == "free_resources" and c.request_id == 2]
    assert frees == ["scheduler", "recompute_teardown"]
    assert all(not registry.check(s, UPSTREAM_TEARDOWN) for s in snaps)


class ListsTheDead(ReferenceScheduler):
    """Keeps every request it saw and lists the ones that ended as paused."""

    def __init__(self, env):  # type: ignore[no-untyped-def]
        super().__init__(env)
        self.seen: dict[int, object] = {}

    def schedule_request(self, active_requests, inflight_request_ids):  # type: ignore[no-untyped-def]
        out = super().schedule_request(active_requests, inflight_request_ids)
        live = {r.request_id for r in active_requests}
        dead = [r for rid, r in self.seen.items() if rid not in live]
        self.seen.update((r.request_id, r) for r in active_requests)
        return SchedulerOutput(
            out.context_requests,
            out.generation_requests,
            [*out.paused_requests, *dead],
            out.recompute_paused_requests,
        )


def test_16_a_freed_request_listed_again_is_flagged() -> None:
    check = invariants.dead_stay_dead
    engine = Engine(OVERLAP, ListsTheDead)
    rid = engine.submit(prompt_len=4, max_new_tokens=1)
    engine.step()
    inside = engine.step()
    assert inside.ended == ((rid, "finished"),)
    assert _names(inside, check) == []
    past = engine.step()
    assert _names(past, check) == ["dead_stay_dead"]


class ShrinksTheBatchOnTheDevice(ReferenceScheduler):
    """Undoes a one-token grow of every member of batch N it is told of: the request
    stays ACTIVE, but the batch on the device loses a page it writes into."""

    def schedule_request(self, active_requests, inflight_request_ids):  # type: ignore[no-untyped-def]
        for req in active_requests:
            if req.request_id in inflight_request_ids:
                self.kv.revert_allocate_generation(req)
        return super().schedule_request(active_requests, inflight_request_ids)


def test_14_a_cache_shrunk_under_the_running_batch_is_flagged() -> None:
    check = invariants.in_flight_pin
    engine = Engine(attrs.evolve(OVERLAP, tokens_per_block=1), ShrinksTheBatchOnTheDevice)
    engine.submit(prompt_len=2, max_new_tokens=4)
    inside = engine.step()  # launched: nothing of it is on the device yet
    assert inside.in_flight and _names(inside, check) == []
    past = engine.step()
    assert _names(past, check) == ["in_flight_pin"]
    (violation,) = check(past)
    assert violation.found == "revert_allocate_generation by the scheduler took pages from it"
