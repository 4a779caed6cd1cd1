"""vLLM's real v1 scheduler, loaded unmodified over stand-ins and stepped on a tiny configuration.

The release's files come from the package registry once per machine
(``pip download --no-deps``, cached under ``$PEFTLIFE_CACHE`` or
``~/.cache/peftlife``); ``PEFTLIFE_VLLM_CHECKOUT=PATH`` uses a checkout instead.
Without either (no network), set ``PEFTLIFE_OFFLINE=1`` to skip these tests.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

from peftlife.checker.vllm import Limits, findings
from peftlife.sut.adapters.vllm import Checkout, CheckoutError, Driver, Step, TinyConfig
from peftlife.sut.adapters.vllm.release import release_files

VERSION = "0.33.0"
STEPS = 40  # every scenario below drains well within this


@pytest.fixture(scope="session")
def checkout() -> Checkout:
    given = os.environ.get("PEFTLIFE_VLLM_CHECKOUT")
    if given:
        return Checkout(Path(given).expanduser())
    cache = Path(os.environ.get("PEFTLIFE_CACHE", Path.home() / ".cache" / "peftlife"))
    try:
        return Checkout(release_files(VERSION, cache))
    except CheckoutError:
        if os.environ.get("PEFTLIFE_OFFLINE"):
            pytest.skip(f"vllm=={VERSION} could not be downloaded and PEFTLIFE_OFFLINE is set")
        raise


def run(driver: Driver) -> list[Step]:
    """Steps until every request has finished (bounded)."""
    steps = []
    for _ in range(STEPS):
        steps.append(driver.step())
        if not driver.scheduler.requests:
            return steps
    raise AssertionError(f"requests left after {STEPS} steps: {list(driver.scheduler.requests)}")


def test_the_real_unmodified_scheduler_is_what_runs(checkout: Checkout) -> None:
    source = Path(checkout.scheduler_class.schedule.__code__.co_filename)
    assert source == checkout.package / "v1" / "core" / "sched" / "scheduler.py"
    assert "def schedule(self" in source.read_text(encoding="utf-8")
    # Loaded under its real name, kept out of sys.modules between calls.
    assert checkout.scheduler_class.__module__ == "vllm.v1.core.sched.scheduler"
    assert "vllm.v1.core.sched.scheduler" not in sys.modules


def test_max_loras_keeps_a_second_adapter_waiting(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(num_blocks=16, max_loras=1))
    driver.add("a", prompt_len=6, max_tokens=3, adapter=1)
    driver.add("b", prompt_len=6, max_tokens=3, adapter=2)
    driver.add("c", prompt_len=6, max_tokens=3, adapter=1)
    steps = run(driver)
    # b (adapter 2) is skipped while adapter 1 runs; c, behind it, is admitted.
    assert steps[0].new == ("a", "c") and steps[0].waiting == ("b",)
    assert all(len(s.adapters) <= 1 for s in steps)
    first_b = next(i for i, s in enumerate(steps) if "b" in s.tokens)
    assert all(1 not in s.adapters for s in steps[first_b:])
    assert {"a", "b", "c"} == {r for s in steps for r in s.finished} | set(steps[-1].tokens)


def test_two_lora_slots_run_both_adapters_together(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(num_blocks=16, max_loras=2))
    driver.add("a", prompt_len=6, max_tokens=3, adapter=1)
    driver.add("b", prompt_len=6, max_tokens=3, adapter=2)
    steps = run(driver)
    assert steps[0].new == ("a", "b") and steps[0].adapters == frozenset({1, 2})


def test_a_tiny_block_pool_preempts_the_last_running_request(checkout: Checkout) -> None:
    config = TinyConfig(block_size=4, num_blocks=5, max_loras=1)
    driver = Driver(checkout, config)
    driver.add("a", prompt_len=7, max_tokens=6, adapter=1)
    driver.add("b", prompt_len=7, max_tokens=6, adapter=1)
    driver.add("c", prompt_len=4, max_tokens=2, adapter=2)
    steps = run(driver)
    preempting = [i for i, s in enumerate(steps) if s.preempted]
    assert len(preempting) == 1
    p = preempting[0]
    # a needs a third block for its ninth token: b, the last running, is preempted
    # (recompute: its blocks freed, back at the head of the waiting queue).
    assert steps[p].preempted == ("b",) and steps[p].tokens == {"a": 1}
    assert steps[p].waiting == ("b", "c")
    resumed = next(i for i, s in enumerate(steps) if s.resumed)
    assert steps[resumed].resumed == ("b",)
    # Recompute: the prompt and the two tokens b had sampled, in one chunk.
    assert steps[resumed].tokens == {"b": 7 + 2}
    # The adapter-2 request runs only when no adapter-1 request is running.
    for s in steps:
        assert len(s.adapters) <= 1
    assert steps[-1].free_blocks == config.num_blocks


def test_a_checkout_without_the_scheduler_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckoutError, match=r"no scheduler\.py at"):
        Checkout(tmp_path)


def test_an_import_the_stand_ins_lack_is_named(tmp_path: Path) -> None:
    sched = tmp_path / "vllm" / "v1" / "core" / "sched"
    sched.mkdir(parents=True)
    (sched / "scheduler.py").write_text("", encoding="utf-8")
    (tmp_path / "vllm" / "v1" / "request.py").write_text(
        "from vllm.v1.engine import NotStoodIn\n", encoding="utf-8"
    )
    with pytest.raises(CheckoutError, match=r"needs 'NotStoodIn' from 'vllm\.v1\.engine'"):
        Checkout(tmp_path)


def workload(seed: int) -> tuple[TinyConfig, list[tuple[str, int, int, int]]]:
    """A small configuration and its requests (id, prompt, max tokens, adapter), from a seed."""
    rng = random.Random(seed)
    config = TinyConfig(num_blocks=rng.randint(3, 7), max_loras=rng.randint(1, 2))
    room = config.num_blocks * config.block_size
    requests = []
    for n in range(rng.randint(2, 5)):
        prompt = rng.randint(1, 9)
        requests.append((f"r{n}", prompt, rng.randint(1, min(6, room - prompt)), rng.randint(0, 3)))
    return config, requests


def run_workload(checkout: Checkout, seed: int) -> tuple[TinyConfig, list[Step]]:
    config, requests = workload(seed)
    driver = Driver(checkout, config)
    for request in requests:
        driver.add(*request)
    return config, run(driver)


def limits(config: TinyConfig, adapter_slots: int | None = None) -> Limits:
    slots = config.max_loras if adapter_slots is None else adapter_slots
    return Limits(slots, config.num_blocks, config.block_size)


SEEDS = range(80)


def test_the_translated_invariants_hold_on_small_workloads(checkout: Checkout) -> None:
    preempting = 0
    for seed in SEEDS:
        config, steps = run_workload(checkout, seed)
        assert findings(steps, limits(config)) == [], seed
        preempting += any(s.preempted for s in steps)
    # The sweep reaches the paths the checks are about, not only easy runs.
    assert preempting >= 10, preempting


def test_the_checks_catch_a_scheduler_that_admits_past_the_workers_slots(
    checkout: Checkout,
) -> None:
    # The scheduler believes in two adapter slots; the world's worker has one.
    found = []
    for seed in SEEDS:
        config, steps = run_workload(checkout, seed)
        found += findings(steps, limits(config, adapter_slots=1))
    assert any("V1 max_loras_cap" in f for f in found)
    assert all("V1 max_loras_cap" in f for f in found), found
