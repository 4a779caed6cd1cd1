"""vLLM's engine core loop around its real scheduler: the batch queue, async scheduling, EOS.

Every test runs on vLLM 0.33.0 and 0.34.0 (``checkout``, as in test_vllm.py).
The driver steps the scheduler as ``EngineCore.step`` does, or, with more
than one batch in flight, as ``EngineCore.step_with_batch_queue`` does;
async scheduling runs vLLM's ``AsyncScheduler``.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from tests.sut.test_vllm import SEEDS, checkout, prompt, workload

from peftlife.checker.vllm import Limits, findings
from peftlife.sut.adapters.vllm import Checkout, CheckoutError, Driver, Step, TinyConfig
from peftlife.sut.adapters.vllm.driver import max_concurrent_batches
from peftlife.sut.adapters.vllm.runner import EOS, TOKEN

__all__ = ["checkout"]  # the release fixture, shared with test_vllm.py

BOUND = 400  # steps; the slowest workload below (a 4-stage pipeline) drains well within it

# Batch queues of 2 and 4, each both ways vLLM gets one (VllmConfig.max_concurrent_batches).
QUEUES = {
    "async-2": TinyConfig(async_scheduling=True),
    "pp2-2": TinyConfig(pipeline_parallel_size=2),
    "async-pp3-4": TinyConfig(async_scheduling=True, pipeline_parallel_size=3),
    "pp4-4": TinyConfig(pipeline_parallel_size=4),
}

# A user's actions before a step: (step, kind, request id); the kinds are "abort"
# (between steps), "abort_during" (while the step runs) and "eos".
Actions = list[tuple[int, str, str]]


def drive(driver: Driver, actions: Sequence[tuple[int, str, str]] = ()) -> list[Step]:
    """Steps while the engine is busy, bounded; ``actions`` happen before their step."""
    steps: list[Step] = []
    for n in range(BOUND):
        for _, kind, rid in (a for a in actions if a[0] == n):
            if kind == "eos":
                driver.draw_eos(rid)
            else:
                driver.abort(rid, during_step=kind == "abort_during")
        steps.append(driver.step())
        if not driver.busy:
            return steps
    raise AssertionError(f"still busy after {BOUND} steps: {list(driver.scheduler.requests)}")


def _requests(driver: Driver) -> dict[str, Any]:
    return dict(driver.scheduler.requests)


def seeded(checkout: Checkout, seed: int, loop: TinyConfig) -> tuple[TinyConfig, list[Step]]:
    """test_vllm.py's workload ``seed`` with prefix caching, under ``loop``'s engine core loop.

    Each request may also draw an end of sequence at a step chosen by the seed;
    the aborts of odd seeds come while their step runs.
    """
    config, requests, aborts = workload(seed, prefix_caching=True)
    config = attrs.evolve(
        config,
        async_scheduling=loop.async_scheduling,
        pipeline_parallel_size=loop.pipeline_parallel_size,
    )
    rng = random.Random(10_000 + seed)
    abort = "abort_during" if seed % 2 else "abort"
    actions: Actions = [(n, abort, rid) for n, rid in aborts.items()]
    driver = Driver(checkout, config)
    for rid, _, max_tokens, adapter, tokens in requests:
        driver.submit(rid, tokens, max_tokens, adapter)
        if rng.random() < 0.3:
            actions.append((rng.randint(1, 12), "eos", rid))
    return config, drive(driver, actions)


def test_the_loop_runs_vllms_own_classes(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(async_scheduling=True))
    package = checkout.package
    assert type(driver.scheduler).__name__ == "AsyncScheduler"
    assert type(driver.scheduler).__module__ == "vllm.v1.core.sched.async_scheduler"
    assert type(driver.runner.lora_state).__name__ == "LoraState"
    driver.submit("a", prompt(3), 1, 1)
    request = driver.scheduler.requests["a"]
    with checkout.installed():  # inspect finds a class's file through sys.modules
        for value, file in (
            (request.sampling_params, package / "sampling_params.py"),
            (request.lora_request, package / "lora" / "request.py"),
            (driver.runner.lora_state, package / "v1" / "worker" / "gpu" / "lora_utils.py"),
            (driver.scheduler, package / "v1" / "core" / "sched" / "async_scheduler.py"),
        ):
            assert Path(inspect.getfile(type(value))) == file
    assert request.sampling_params.eos_token_id == EOS  # from update_from_generation_config
    with checkout.installed(), pytest.raises(AssertionError, match="lora_path cannot be empty"):
        checkout.lora_request_class(lora_name="a", lora_int_id=1)
    assert Driver(checkout, TinyConfig()).scheduler.__class__.__name__ == "Scheduler"


@pytest.mark.parametrize("loop", list(QUEUES.values()), ids=list(QUEUES))
def test_the_batch_queue_fills_to_its_size_and_the_checks_hold(
    checkout: Checkout, loop: TinyConfig
) -> None:
    size = max_concurrent_batches(loop)
    preempting = hits = stopped = 0
    for seed in SEEDS:
        config, steps = seeded(checkout, seed, loop)
        stopped += sum(status == "FINISHED_STOPPED" for s in steps for status in s.ended.values())
        assert findings(steps, Limits(config.max_loras, config.block_size)) == [], seed
        # step_with_batch_queue returns without an output while the queue has room,
        # so every run fills it: size - 1 batches stay in flight after each take.
        assert max(s.in_flight for s in steps) == size - 1, seed
        preempting += any(s.preempted for s in steps)
        hits += any(e.kind == "hit" for s in steps for e in s.cache_events)
        assert steps[-1].in_flight == 0 and not steps[-1].live_after
    assert preempting >= 5 and hits >= 10 and stopped >= 10, (preempting, hits, stopped)


def test_a_queue_of_four_keeps_three_batches_in_flight(checkout: Checkout) -> None:
    driver = Driver(checkout, attrs.evolve(QUEUES["pp4-4"], num_blocks=32, max_loras=2))
    for n in range(4):
        driver.submit(f"r{n}", prompt(4), 8, 1 + n % 2)
    steps = drive(driver)
    assert max(s.in_flight for s in steps) == 3
    # Four batches launched before the first output is taken.
    first_taken = next(i for i, s in enumerate(steps) if s.processed)
    assert first_taken == 3 and all(s.scheduled for s in steps[: first_taken + 1])


def test_async_scheduling_schedules_a_decode_before_the_last_output_is_taken(
    checkout: Checkout,
) -> None:
    driver = Driver(checkout, QUEUES["async-2"])
    driver.submit("a", prompt(4), 3)
    steps = drive(driver)
    # Step 1 schedules a's first decode while the prefill's output is in flight:
    # AsyncScheduler's output placeholder stands for the token not yet read.
    assert steps[0].tokens == {"a": 4} and not steps[0].processed
    assert steps[1].tokens == {"a": 1} and steps[1].processed
    assert steps[-1].ended == {} and any(s.ended == {"a": "FINISHED_LENGTH_CAPPED"} for s in steps)


def _preempts_in_flight(checkout: Checkout, loop: TinyConfig) -> tuple[list[Step], dict[str, Any]]:
    # Five blocks (one the null block): two 7-token prompts fill them as they decode.
    driver = Driver(checkout, attrs.evolve(loop, num_blocks=5))
    driver.submit("a", prompt(7), 6, 1)
    driver.submit("b", prompt(7), 6, 1)
    requests = _requests(driver)
    return drive(driver), requests


@pytest.mark.parametrize("loop", ["async-2", "async-pp3-4"])
def test_async_scheduling_with_preemption_recomputes_and_finishes(
    checkout: Checkout, loop: str
) -> None:
    steps, requests = _preempts_in_flight(checkout, QUEUES[loop])
    (p,) = [i for i, s in enumerate(steps) if s.preempted]
    # Preempted while a batch it ran is in flight: that batch is taken after the
    # preemption and before the victim is scheduled again.
    (victim,) = steps[p].preempted
    back = next(i for i, s in enumerate(steps) if i > p and victim in s.tokens)
    assert any(victim in s.taken for s in steps[p:back])
    assert findings(steps, Limits(adapter_slots=1, block_size=4)) == []
    # The preempted request's in-flight output was drained as stale, not lost:
    # both end with their six tokens, each the model's.
    for rid in ("a", "b"):
        assert list(requests[rid].output_token_ids) == [TOKEN] * 6, rid
        assert requests[rid].status.name == "FINISHED_LENGTH_CAPPED"


@pytest.mark.parametrize("loop", list(QUEUES), ids=list(QUEUES))
def test_an_abort_while_its_batch_is_in_flight(checkout: Checkout, loop: str) -> None:
    driver = Driver(checkout, attrs.evolve(QUEUES[loop], num_blocks=16, max_loras=2))
    driver.submit("a", prompt(6), 6, 1)
    driver.submit("b", prompt(6), 6, 2)
    steps = [driver.step()]
    assert steps[0].scheduled and not steps[0].processed  # a and b are in flight
    assert steps[0].pool_after.holders["a"]
    driver.abort("a")
    assert "a" not in driver.pool.holders  # its blocks freed at once
    steps += drive(driver)
    # The batch launched with a comes back later, and its output for a is dropped.
    assert any("a" in s.taken for s in steps[1:])
    assert all("a" not in s.tokens for s in steps[1:])
    assert findings(steps, Limits(adapter_slots=2, block_size=4)) == []
    assert any(s.ended.get("b") == "FINISHED_LENGTH_CAPPED" for s in steps)


@pytest.mark.parametrize("loop", ["sync", *QUEUES])
def test_a_drawn_eos_ends_the_request(checkout: Checkout, loop: str) -> None:
    base = QUEUES.get(loop, TinyConfig())
    driver = Driver(checkout, attrs.evolve(base, num_blocks=16))
    driver.submit("a", prompt(5), 10)
    driver.submit("b", prompt(5), 10)
    requests = _requests(driver)
    steps = drive(driver, [(3, "eos", "a")])
    assert requests["a"].status.name == "FINISHED_STOPPED"
    assert requests["a"].output_token_ids[-1] == EOS
    assert len(requests["a"].output_token_ids) < 10
    assert requests["b"].status.name == "FINISHED_LENGTH_CAPPED"
    assert findings(steps, Limits(adapter_slots=1, block_size=4)) == []


def _admitted_and_preempted(checkout: Checkout, policy: Any) -> tuple[tuple[str, ...], list[str]]:
    """Who is admitted first of two waiting, and who is preempted of two running."""
    driver = Driver(checkout, TinyConfig(num_blocks=5, max_num_seqs=1, policy=policy))
    driver.submit("late", prompt(4), 2, priority=5)
    driver.submit("urgent", prompt(4), 2, priority=0)
    first = drive(driver)[0].new
    # low runs first, then high joins; five blocks (one the null block) cannot hold
    # both as they decode, so one is preempted.
    driver = Driver(checkout, TinyConfig(num_blocks=5, policy=policy))
    driver.submit("low", prompt(7), 6, priority=5)
    steps = [driver.step()]
    driver.submit("high", list(range(50, 57)), 6, priority=0)
    steps += drive(driver)
    return first, [r for s in steps for r in s.preempted]


def test_priority_admits_the_most_urgent_first_and_preempts_the_least(
    checkout: Checkout,
) -> None:
    assert _admitted_and_preempted(checkout, "priority") == (("urgent",), ["low"])
    # FCFS: arrival order, and the last running request is the victim.
    assert _admitted_and_preempted(checkout, "fcfs") == (("late",), ["high"])


def test_the_adapter_set_follows_the_releases_lora_request_equality(
    checkout: Checkout,
) -> None:
    # One adapter name loaded again under a new id (the same path): two LoRARequests.
    driver = Driver(checkout, TinyConfig(num_blocks=16, max_loras=2))
    driver.submit("old", prompt(4), 2, 1, adapter_name="sql", adapter_path="/adapters/sql")
    driver.submit("new", prompt(4), 2, 2, adapter_name="sql", adapter_path="/adapters/sql")
    step = driver.step()
    assert step.adapters == frozenset({1, 2})
    ids = sorted(i.adapter_id or 0 for i in step.lora_requests)
    # 0.33.0's LoRARequest compares names only, so the step asks for one adapter;
    # 0.34.0's compares the name and the id (its __eq__: "the engine needs both").
    assert ids == ([1] if checkout.release.version == "0.33.0" else [1, 2])
    if checkout.release.version == "0.33.0":
        # The worker activates that one, and mapping id 2's tokens to a slot fails
        # (the punica wrapper's convert_mapping): the engine core dies.
        assert step.raised and "ValueError" in step.raised
        assert step.slots is not None and 2 not in step.slots.slots and not driver.busy
    else:
        assert step.raised is None and step.slots and set(step.slots.slots) == {1, 2}


LORA_KEY = 'return [("lora", lora_request.lora_name, lora_request.lora_path)]'


def _shared_prompt(checkout: Checkout) -> list[Step]:
    driver = Driver(checkout, TinyConfig(num_blocks=16, max_loras=2, enable_prefix_caching=True))
    driver.submit("sql", prompt(9), 1, 1)
    steps = drive(driver)
    driver.submit("chat", prompt(9), 1, 2)
    return steps + drive(driver)


def test_a_block_hash_without_the_adapter_is_found_as_a_cross_identity_hit(
    checkout: Checkout,
) -> None:
    assert findings(_shared_prompt(checkout), Limits(2, 4)) == []
    # The mutant: kv_cache_utils.py's _gen_lora_extra_hash_keys drops the adapter.
    mutant = Checkout(checkout.path, {"v1/core/kv_cache_utils.py": [(LORA_KEY, "return []")]})
    found = findings(_shared_prompt(mutant), Limits(2, 4))
    assert found and all("V3 prefix_hit_within_identity: chat" in f for f in found), found
    assert "filled by adapter adapter-1 (id 1, /adapters/1)" in found[0]


def test_two_ids_under_one_name_and_path_share_blocks(checkout: Checkout) -> None:
    # vLLM keys the hash by the adapter's name and path, not its id (vLLM #30931):
    # the identity rule, which includes the id, sees the second id hit the first's
    # blocks. Whether that is a defect depends on the weights behind the path,
    # which only a reload action can say.
    driver = Driver(checkout, TinyConfig(num_blocks=16, max_loras=2, enable_prefix_caching=True))
    driver.submit("old", prompt(9), 1, 1, adapter_name="sql", adapter_path="/adapters/sql")
    steps = drive(driver)
    driver.submit("new", prompt(9), 1, 2, adapter_name="sql", adapter_path="/adapters/sql")
    found = findings(steps + drive(driver), Limits(2, 4))
    assert found and "new (adapter sql (id 2, /adapters/sql)) hit block" in found[0], found


def test_the_hash_without_the_adapter_is_found_on_the_seeded_workloads(
    checkout: Checkout,
) -> None:
    mutant = Checkout(checkout.path, {"v1/core/kv_cache_utils.py": [(LORA_KEY, "return []")]})
    caught = 0
    for seed in SEEDS:
        config, steps = seeded(mutant, seed, QUEUES["async-2"])
        found = findings(steps, Limits(config.max_loras, config.block_size))
        caught += any("V3 prefix_hit_within_identity" in f for f in found)
    # Prompts of two families over three adapters and the base model: most runs
    # have a prompt shared across identities (46 of 80 on both releases).
    assert caught >= 30, caught


def test_a_patch_that_matches_nothing_is_refused(checkout: Checkout) -> None:
    with pytest.raises(CheckoutError, match=r"finds 0 copies of 'no such line', not one"):
        Checkout(checkout.path, {"v1/core/kv_cache_utils.py": [("no such line", "")]})


@pytest.mark.parametrize("loop", ["sync", *QUEUES])
def test_an_abort_during_a_step_is_taken_before_its_output_or_before_the_next_step(
    checkout: Checkout, loop: str
) -> None:
    base = QUEUES.get(loop, TinyConfig())
    driver = Driver(checkout, attrs.evolve(base, num_blocks=16, max_loras=2))
    driver.submit("a", prompt(6), 6, 1)
    driver.submit("b", prompt(6), 6, 2)
    requests = _requests(driver)
    steps = [driver.step()]  # a and b in flight
    driver.abort("a", during_step=True)  # arrives while the next step's model runs
    during = driver.step()
    assert during.scheduled and "a" in during.live  # schedule() ran before it came
    steps.append(during)
    # EngineCore.step takes the batch it launched, and a queue of two is full
    # after the second launch: those steps take an output, a queue of four's not.
    assert during.processed == (max_concurrent_batches(base) <= 2)
    if loop == "sync":  # the batch taken is the one just launched, which ran a
        assert "a" in during.taken
    if during.processed:
        # _process_aborts_queue, before update_from_output: a ended within the step.
        assert "a" not in during.live_after and "a" not in during.pool_after.holders
    else:
        # No output taken: the input queue's copy aborts it before the next step.
        assert "a" in during.live_after and "a" in during.pool_after.holders
        steps.append(driver.step())
        assert "a" not in steps[-1].live
    steps += drive(driver)
    assert requests["a"].status.name == "FINISHED_ABORTED"
    assert len(requests["a"].output_token_ids) < 6
    assert findings(steps, Limits(adapter_slots=2, block_size=4)) == []
    assert any(s.ended.get("b") == "FINISHED_LENGTH_CAPPED" for s in steps)
