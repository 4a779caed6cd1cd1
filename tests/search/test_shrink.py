"""The trace shrinker: smaller, still failing on the same invariant, deterministic."""

from __future__ import annotations

import types
from typing import Any

import attrs
import pytest

from peftlife.checker.drain import can_drain
from peftlife.search import failure, scenarios, shrink
from peftlife.search.failure import LifecycleFailure, Run, minimized
from peftlife.search.trace import Action, checked_replay
from peftlife.sut import load
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.config import EngineConfig

MUTANT = load("mutant:no_release_on_suspend")
SUBMIT = Action("submit", lora_task_id=1, lora_weights=True, prompt_len=6, max_new_tokens=4)
STEP = Action("step")
# A world bigger than needed and a trace with noise around the two actions that matter.
CONFIG = EngineConfig(
    device_pages=12,
    host_pages=12,
    draft_device_pages=12,
    draft_host_pages=12,
    tokens_per_block=2,
    lora_device_pages=3,
    lora_host_pages=6,
    adapter_pages=((1, 2), (2, 1)),
    max_num_tokens=16,
    max_batch_size=4,
)
ACTIONS = (
    Action("submit", lora_task_id=2, lora_weights=True, prompt_len=3, max_new_tokens=2),
    SUBMIT,
    STEP,
    Action("cancel", request_id=1),
    STEP,
    Action("refuse_resume", pool="draft"),
    Action("fail_grow", pool="target"),
    STEP,
    STEP,
    STEP,
)


def _minimize(
    config: EngineConfig,
    actions: tuple[Action, ...],
    factory: Any,
    invariant: str,
    schedule_deadline: float = 10.0,
) -> shrink.Shrunk:
    still_fails = shrink.same_finding(factory, invariant, schedule_deadline)
    return shrink.minimize(shrink.Trace(config, actions), still_fails)


def test_the_long_case_fails_to_begin_with() -> None:
    assert shrink.first_invariant(CONFIG, ACTIONS, MUTANT) == "ownership_follows_residency"


def test_minimize_makes_it_smaller_and_keeps_the_invariant() -> None:
    shrunk = _minimize(CONFIG, ACTIONS, MUTANT, "ownership_follows_residency")
    config, actions = shrunk.config, shrunk.actions
    assert shrunk.stopped is None  # every pass ran its course, within every bound
    assert shrink.size(config, actions) < shrink.size(CONFIG, ACTIONS)
    assert len(actions) < len(ACTIONS)
    assert config.device_pages < CONFIG.device_pages
    assert config.draft_device_pages is None  # the draft pool was not needed
    outcome = checked_replay(config, actions, MUTANT)
    assert outcome.violations[0].invariant == "ownership_follows_residency"
    # Only drainable worlds are fair game: the drain's verdict means nothing elsewhere.
    submits = [
        (a.lora_task_id, a.prompt_len, a.max_new_tokens) for a in actions if a.kind == "submit"
    ]
    assert can_drain(config, submits)


def test_minimize_is_deterministic() -> None:
    once = _minimize(CONFIG, ACTIONS, MUTANT, "ownership_follows_residency")
    again = _minimize(CONFIG, ACTIONS, MUTANT, "ownership_follows_residency")
    # Everything but the seconds it took: given no time cap, no clock decides anything.
    assert attrs.evolve(once, seconds=0) == attrs.evolve(again, seconds=0)


def _leaping_clock(monkeypatch: pytest.MonkeyPatch, leap: float) -> list[float]:
    """The shrinker's clock (its alone: the watchdog keeps the real one) moved on by
    ``leap`` seconds at every read; the list holds the time, to move it by hand."""
    now = [0.0]

    def monotonic() -> float:
        now[0] += leap
        return now[0]

    monkeypatch.setattr(shrink, "time", types.SimpleNamespace(monotonic=monotonic))
    return now


def test_a_shrink_given_no_time_cap_is_the_same_however_slow_the_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Counts alone end it: a clock that leaps an hour at every read changes nothing.
    quick = _minimize(CONFIG, ACTIONS, MUTANT, "ownership_follows_residency")
    _leaping_clock(monkeypatch, 3600.0)
    slow = _minimize(CONFIG, ACTIONS, MUTANT, "ownership_follows_residency")
    assert slow.stopped is None
    assert slow.seconds > 3600 and slow.timeout is None
    assert attrs.evolve(slow, seconds=0, passes=()) == attrs.evolve(quick, seconds=0, passes=())


def test_a_search_the_time_cap_cut_short_stops_the_shrink_at_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Cases of 12 or 2 steps fail: the passes are stuck at 12, and the search, which
    # would find 2, runs past the user's 10 s cap and gives up. That is no proof that
    # 12 is shortest: the shrink says it stopped at the cap.
    now = _leaping_clock(monkeypatch, 0.0)

    def slow_search(case: shrink.Trace, until: float | None) -> shrink.Trace | None:
        assert until is not None
        now[0] = until + 1
        return None

    shrunk = shrink.minimize(
        shrink.Trace(CONFIG, (STEP,) * 12),
        lambda trace: len(trace.actions) in (12, 2),
        shorter=slow_search,
        timeout=10,
    )
    assert len(shrunk.actions) == 12
    assert shrunk.stopped == "time cap"
    assert shrunk.note == (
        f"the shrink stopped at its 10 s time cap after {shrunk.replays} replays: "
        "a smaller case may exist"
    )


def test_a_case_that_does_not_fail_on_the_invariant_is_returned_unchanged() -> None:
    same = _minimize(CONFIG, ACTIONS, MUTANT, "draft_mirrors_target")
    assert (same.config, same.actions) == (CONFIG, ACTIONS)
    assert shrink.first_invariant(CONFIG, ACTIONS, ReferenceScheduler) is None


def test_removing_a_submit_renumbers_later_cancels_and_drops_its_own() -> None:
    actions = (
        SUBMIT,
        SUBMIT,
        SUBMIT,
        Action("cancel", request_id=1),
        Action("cancel", request_id=3),
    )
    assert shrink._without(actions, 0, 1) == (
        SUBMIT,
        SUBMIT,
        Action("cancel", request_id=2),
    )


def test_draft_faults_land_on_the_target_once_the_draft_pool_is_gone() -> None:
    shrunk = _minimize(CONFIG, ACTIONS, MUTANT, "ownership_follows_residency")
    assert all(a.pool == "target" for a in shrunk.actions)


class _HangsWithThree(ReferenceScheduler):
    """Spins once it has three requests; counts how often it did."""

    hangs = 0

    def schedule_request(self, active_requests: list[Any], inflight: set[int]) -> Any:
        if len(active_requests) > 2:
            type(self).hangs += 1
            while True:
                pass
        return super().schedule_request(active_requests, inflight)


# The deadline of the hang test's replays: the scheduler hangs for ever or answers in
# well under a millisecond, so this is a margin for a busy machine, where a call that
# answers may wait its turn for a core, not a bound its verdict rests on.
HANG_DEADLINE = 0.25


def test_a_hang_is_shrunk_with_a_bounded_number_of_hung_replays() -> None:
    actions = (SUBMIT, STEP, SUBMIT, STEP, SUBMIT, STEP, SUBMIT, STEP, SUBMIT, STEP, STEP)
    _HangsWithThree.hangs = 0
    shrunk = _minimize(CONFIG, actions, _HangsWithThree, "scheduler_protocol", HANG_DEADLINE)
    config, smaller = shrunk.config, shrunk.actions
    # The confirming replay, then at most HUNG_REPLAYS hung shrink replays.
    assert _HangsWithThree.hangs <= 1 + shrink.HUNG_REPLAYS
    assert len(smaller) < len(actions)
    outcome = checked_replay(config, smaller, _HangsWithThree, schedule_deadline=HANG_DEADLINE)
    assert outcome.hung and outcome.violations[0].invariant == "scheduler_protocol"


def test_tighter_worlds_cut_the_pool_by_the_prompts_pages_and_the_whole_requests() -> None:
    # 9 prompt tokens and 1 output in blocks of 2: 5 pages, the whole device.
    config = EngineConfig(device_pages=5, tokens_per_block=2, adapter_pages=((1, 1),))
    big = Action("submit", None, 1, False, 9, 1)
    worlds = [
        (c.device_pages, a[0].prompt_len) for c, a in shrink._tighter_worlds(config, (big,), 0)
    ]
    # Smallest world first: the whole request's 1, 2 and 4 pages, each with its
    # shortest and longest prompt; and prompts 1, 4 and 8 by their own pages.
    assert worlds == [(1, 1), (2, 2), (2, 3), (2, 4), (4, 6), (4, 7), (4, 8)]
    # The request still fits whole in each, but for the prompt of 4 (3 pages) and of 8 (5).
    fits = [
        can_drain(c, [(1, a[0].prompt_len, 1)])
        for c, a in shrink._tighter_worlds(config, (big,), 0)
    ]
    assert fits == [True, True, True, False, True, True, False]


def test_a_shrink_keeps_to_the_actions_it_admits() -> None:
    free = _minimize(CONFIG, ACTIONS, MUTANT, "ownership_follows_residency")
    assert any(a.kind == "submit" and a.prompt_len < 3 for a in free.actions)
    # Admitting only prompts of 3 or more: no candidate with a shorter one is replayed.
    kept = shrink.minimize(
        shrink.Trace(CONFIG, ACTIONS),
        shrink.same_finding(MUTANT, "ownership_follows_residency"),
        admits=lambda _, actions: all(a.prompt_len >= 3 for a in actions if a.kind == "submit"),
    )
    assert all(a.prompt_len >= 3 for a in kept.actions if a.kind == "submit")
    assert len(kept.actions) < len(ACTIONS)


def test_a_trace_its_own_scenario_would_not_draw_is_shrunk_all_the_same() -> None:
    # A finding from before its scenario changed: the check is set aside, not obeyed.
    never = shrink.minimize(
        shrink.Trace(CONFIG, ACTIONS),
        shrink.same_finding(MUTANT, "ownership_follows_residency"),
        admits=lambda _, actions: all(a.kind != "fail_grow" for a in actions),
    )
    assert len(never.actions) < len(ACTIONS)


def test_the_scenario_admits_what_its_rules_draw() -> None:
    s = scenarios.load("overlap-kv-pressure")  # weights always sent, a LoRA path always set
    submit = Action("submit", None, 1, True, 2, 2, lora_path=True)
    assert s.admits(submit) and s.admits(Action("eos", request_id=1))
    assert not s.admits(attrs.evolve(submit, lora_weights=False))
    assert not s.admits(attrs.evolve(submit, lora_task_id=None, lora_path=False))  # no_adapter off
    assert not s.admits(Action("fail_grow", pool="draft"))  # no draft pool there
    assert not scenarios.load("default").admits(Action("eos", request_id=1))  # simple loop
    # Its switches: kv-pressure always chunks and pauses for recompute, with no draft pool.
    kv = scenarios.load("kv-pressure")
    world = scenarios.smallest_world(kv)
    assert kv.admits_world(world)
    assert not kv.admits_world(attrs.evolve(world, enable_recompute_pause=False))
    assert not kv.admits_world(attrs.evolve(world, draft_device_pages=2))


def test_each_pass_counts_its_replays_and_what_it_removed() -> None:
    shrunk = _minimize(CONFIG, ACTIONS, MUTANT, "ownership_follows_residency")
    by_name = {p.name: p for p in shrunk.passes}
    # The last-resort passes ran too: a shrink ends when they also change nothing.
    assert set(by_name) == {p.__name__ for p in (*shrink.PASSES, *shrink.LAST_RESORT)}
    # Every replay but the confirming one belongs to a pass, as every verdict does.
    assert sum(p.replays for p in shrunk.passes) + 1 == shrunk.replays
    assert sum(p.attempts for p in shrunk.passes) + 1 == shrunk.steps
    removed = sum(p.actions_removed for p in shrunk.passes)
    assert removed == len(ACTIONS) - len(shrunk.actions) > 0
    assert shrunk.describe() == f"shrink: 11 passes, {shrunk.replays} replays"


def test_a_predicate_that_hangs_is_held_to_the_hung_bound() -> None:
    # Any predicate, not only the same finding: every replay fails, and hangs.
    replays = []

    def hangs(trace: shrink.Trace) -> shrink.Verdict:
        replays.append(trace)
        return shrink.Verdict(True, hung=True)

    shrunk = shrink.minimize(shrink.Trace(CONFIG, ACTIONS), hangs)
    assert shrunk.stopped == "hung replays"
    assert len(replays) == 1 + shrink.HUNG_REPLAYS  # the confirming replay, then the bound


FAULT = Action("fail_grow", pool="target")


def test_a_long_case_tied_in_pairs_loses_a_pair_at_once() -> None:
    # Any predicate: it fails with all 26 steps and two or four faults, so no fault
    # goes alone and no chunk holds two without a step. Thirty actions, above where
    # the passes that replay more than once per pair start.
    def even_faults(trace: shrink.Trace) -> bool:
        kinds = [a.kind for a in trace.actions]
        return kinds.count("step") == 26 and kinds.count("fail_grow") in (2, 4)

    actions = (FAULT, *[STEP] * 9, FAULT, *[STEP] * 9, FAULT, *[STEP] * 8, FAULT)
    assert shrink.PAIRWISE_LIMIT < len(actions) <= shrink.PAIR_DELETION_LIMIT
    shrunk = shrink.minimize(shrink.Trace(CONFIG, actions), even_faults)
    assert [a.kind for a in shrunk.actions].count("fail_grow") == 2
    assert len(shrunk.actions) == 28


def test_the_search_runs_again_only_after_it_found_a_shorter_case() -> None:
    # Cases of 12, 7 and 2 steps fail, none between: no deletion the passes try
    # gets from one to the next (half, a quarter, one or two actions off), the
    # search does, and from 2 it finds nothing, so it is not asked again.
    def lengths(trace: shrink.Trace) -> bool:
        return len(trace.actions) in (12, 7, 2)

    searched: list[int] = []

    def shorter(case: shrink.Trace, until: float | None) -> shrink.Trace | None:
        searched.append(len(case.actions))
        below = [n for n in (7, 2) if n < len(case.actions)]
        return attrs.evolve(case, actions=(STEP,) * below[0]) if below else None

    shrunk = shrink.minimize(shrink.Trace(CONFIG, (STEP,) * 12), lengths, shorter=shorter)
    assert searched == [12, 7, 2]
    assert len(shrunk.actions) == 2
    assert shrunk.stopped is None


def _overlap_world(*, adapter: int, device_pages: int, tokens: int, batch: int) -> EngineConfig:
    """A small world of the overlap scenarios: one adapter, one page of LoRA cache a tier."""
    return EngineConfig(
        device_pages=device_pages,
        host_pages=0,
        tokens_per_block=2,
        lora_device_pages=1,
        lora_host_pages=1,
        adapter_pages=((adapter, 1),),
        max_num_tokens=tokens,
        max_batch_size=batch,
        enable_chunked_context=True,
        chunk_unit_size=1,
        executor="overlap",
    )


def _request(adapter: int, prompt: int, outputs: int, *, weights: bool = True) -> Action:
    return Action(
        "submit",
        lora_task_id=adapter,
        lora_weights=weights,
        prompt_len=prompt,
        max_new_tokens=outputs,
        lora_path=True,
    )


def test_a_fault_in_the_tail_is_traded_for_one_more_request() -> None:
    # A fault makes the pressure under which the mutant forgets to re-register an
    # adapter; a second request makes it too, in the drain, once the first asks for
    # a longer prompt. No deletion or merge alone keeps the finding, so only the
    # trade of the tail (both moves at once) reaches the two submits.
    config = _overlap_world(adapter=1, device_pages=2, tokens=1, batch=1)
    actions = (_request(1, 1, 2), STEP, STEP, Action("fail_grow"), STEP)
    mutant = load("mutant:no_reregister_on_resume")
    invariant = "device_pin_follows_ownership"
    assert shrink.first_invariant(config, actions, mutant) == invariant
    shrunk = _minimize(config, actions, mutant, invariant)
    assert [a.kind for a in shrunk.actions] == ["submit", "submit"]
    assert shrink.first_invariant(shrunk.config, shrunk.actions, mutant) == invariant
    traded = {p.name: p for p in shrunk.passes}["trade_tail"]
    assert traded.successes >= 1 and traded.actions_removed >= 3


def test_two_small_requests_are_merged_into_a_copy_of_a_larger_one() -> None:
    # Two small requests behind a large one evict the adapter a batch in flight
    # pins; two large ones do it too. Dropping either small one loses the finding,
    # and a copy of the large request in their place is no smaller a request, so
    # only the merge of the two neighbours reaches the shorter case.
    config = _overlap_world(adapter=2, device_pages=4, tokens=4, batch=2)
    actions = (_request(2, 4, 2), _request(2, 1, 1), _request(2, 1, 2))
    mutant = load("mutant:evicts_inflight")
    assert shrink.first_invariant(config, actions, mutant) == "in_flight_pin"
    shrunk = _minimize(config, actions, mutant, "in_flight_pin")
    assert len(shrunk.actions) == 2
    assert {p.name: p for p in shrunk.passes}["merge_neighbours"].actions_removed == 1


def test_an_inserted_request_shifts_the_ids_the_later_cancels_name() -> None:
    a, b, c = (Action("submit", prompt_len=n, max_new_tokens=1) for n in (1, 2, 3))
    actions = (a, Action("cancel", request_id=1), b, Action("cancel", request_id=2))
    assert shrink._inserted(actions, 1, c) == (
        a,
        c,
        Action("cancel", request_id=1),
        b,
        Action("cancel", request_id=3),
    )


def test_the_adapters_left_are_numbered_from_one() -> None:
    """The long case with its adapters renamed 5 and 3: the shrunk case names adapter 1
    (and the world holds it), not "adapter 3" or "adapter 5" alone."""
    rename = {1: 5, 2: 3}
    config = attrs.evolve(
        CONFIG, adapter_pages=tuple((rename[t], p) for t, p in CONFIG.adapter_pages)
    )
    actions = tuple(
        attrs.evolve(a, lora_task_id=rename[a.lora_task_id]) if a.kind == "submit" else a
        for a in ACTIONS
    )
    shrunk = _minimize(config, actions, MUTANT, "ownership_follows_residency")
    named = {a.lora_task_id for a in shrunk.actions if a.kind == "submit"}
    assert named == {1}
    assert [task for task, _ in shrunk.config.adapter_pages] == [1]


# The world of the two stuck cases below: overlap-kv-pressure's, a one-adapter LoRA
# cache and one token a step.
STUCK_WORLD = _overlap_world(adapter=1, device_pages=5, tokens=1, batch=1)
STUCK_SUBMIT = _request(1, 4, 2)


def _stuck_then_searched(
    spec: str,
    world: EngineConfig,
    stuck: tuple[Action, ...],
    invariant: str,
    scenario: str = "overlap-kv-pressure",
) -> tuple[shrink.Shrunk, LifecycleFailure]:
    """``stuck`` (failing on ``invariant``) shrunk by the passes alone, then as a finding
    is, with the search of its world; neither given a time cap, so the counts alone
    (replays, and each search's states) decide what they reach, however busy the machine."""
    outcome = checked_replay(world, stuck, load(spec))
    assert outcome.violations[0].invariant == invariant
    passes_alone = shrink.minimize(
        shrink.Trace(world, stuck),
        shrink.same_finding(load(spec), invariant),
        admits=scenarios.load(scenario).admits_case,
    )
    shrunk = minimized(LifecycleFailure(outcome.violations, Run(spec, scenario, world, stuck)))
    assert shrunk.invariant == invariant
    return passes_alone, shrunk


def test_a_stuck_case_is_shortened_by_a_search_of_its_world() -> None:
    # Two submits, a fault and a step: no pass shortens it, since the shortest case
    # (two other submits) changes both requests at once and drops the fault's tail.
    stuck = (STUCK_SUBMIT, attrs.evolve(STUCK_SUBMIT, max_new_tokens=3), Action("fail_grow"), STEP)
    passes_alone, shrunk = _stuck_then_searched(
        "mutant:evicts_inflight", STUCK_WORLD, stuck, "in_flight_pin"
    )
    assert len(passes_alone.actions) == 4
    assert [a.kind for a in shrunk.run.actions] == ["submit", "submit"]
    assert shrunk.shrink is not None
    assert "search_world" in {p.name for p in shrunk.shrink.passes}


def test_a_case_deeper_than_the_wide_search_is_shortened_among_its_own_actions() -> None:
    # The shortest case submits the second request two steps later, with the first's
    # output one token shorter, and drops a step: three changes at once, six actions
    # deep, where the search among the scenario's actions stops at three. Among the
    # actions the case itself takes (submits and one fault, two requests at most) it is near.
    world = attrs.evolve(STUCK_WORLD, device_pages=3)
    first = attrs.evolve(STUCK_SUBMIT, prompt_len=1, max_new_tokens=3)
    stuck = (first, attrs.evolve(first, max_new_tokens=2), STEP, STEP, STEP)
    stuck += (Action("fail_grow"), STEP)
    passes_alone, shrunk = _stuck_then_searched(
        "mutant:no_reregister_on_resume", world, stuck, "scheduled_owned_and_resident"
    )
    assert len(passes_alone.actions) == 7
    assert len(shrunk.run.actions) == 6


@pytest.fixture
def deeper_searches_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shrink's searches among the scenario's actions and among the case's own cut
    to one state: each finds nothing at its real bound in the cases below, and this
    keeps their tests to seconds."""
    monkeypatch.setattr(failure, "AROUND_STATES", 1)
    monkeypatch.setattr(failure, "OWN_STATES", 1)


@pytest.mark.usefixtures("deeper_searches_only")
def test_a_case_deeper_than_its_own_search_is_shortened_among_its_very_requests() -> None:
    # Fourteen actions that no pass shortens, nor a search among the scenario's
    # actions or the case's own kinds and adapters: the shorter case submits the
    # second request twice, nine actions deep, and only a search among the case's
    # very requests gets there.
    world = EngineConfig(
        device_pages=6,
        draft_device_pages=6,
        tokens_per_block=2,
        lora_device_pages=1,
        lora_host_pages=2,
        adapter_pages=((2, 1), (1, 1)),
        max_num_tokens=3,
        max_batch_size=1,
        enable_chunked_context=True,
        chunk_unit_size=1,
    )
    first, second = _request(1, 7, 2, weights=False), _request(2, 5, 1, weights=False)
    draft, refuse = Action("fail_grow", pool="draft"), Action("refuse_resume", pool="target")
    stuck = (first, second, *[STEP] * 3, draft, refuse, *[STEP] * 3, draft, STEP, draft, STEP)
    passes_alone, shrunk = _stuck_then_searched(
        "mutant:phantom_pause_unstarted", world, stuck, "no_phantom_owner", "no-lower-tier"
    )
    assert len(passes_alone.actions) == 14
    assert len(shrunk.run.actions) <= 9


@pytest.mark.usefixtures("deeper_searches_only")
def test_a_case_two_adapters_hide_is_shortened_among_one_adapters_requests() -> None:
    # recompute_pause_terminates in chunked-prefill, six actions over two adapters,
    # that no pass shortens, nor a search among the case's very requests: the shorter
    # case has three requests of one adapter, one fault less. A search among both
    # adapters' requests takes 43,580 states to reach it, one adapter's alone 7,889.
    world = EngineConfig(
        device_pages=4,
        tokens_per_block=2,
        lora_device_pages=2,
        lora_host_pages=2,
        adapter_pages=((2, 1), (1, 1)),
        max_num_tokens=3,
        max_batch_size=2,
        enable_chunked_context=True,
        chunk_unit_size=1,
        recompute_teardown="scheduler_only",
    )
    requests = (
        _request(1, 1, 2, weights=False),
        *[_request(2, p, 1, weights=False) for p in (3, 4)],
    )
    stuck = (*requests, FAULT, FAULT, STEP)
    passes_alone, shrunk = _stuck_then_searched(
        "mutant:recompute_pause_terminates",
        world,
        stuck,
        "ownership_follows_residency",
        "chunked-prefill",
    )
    assert len(passes_alone.actions) == 6
    assert len(shrunk.run.actions) == 5
    assert len({a.lora_task_id for a in shrunk.run.actions if a.kind == "submit"}) == 1
