"""vLLM's real scheduler and KV cache chain, loaded unmodified over stand-ins and stepped.

Each test runs on vLLM 0.33.0 and 0.34.0. A release's files come from the
package registry once per machine (``pip download --no-deps``, cached under
``$PEFTLIFE_CACHE`` or ``~/.cache/peftlife``); ``PEFTLIFE_VLLM_CHECKOUT=PATH``
uses one checkout instead. With ``PEFTLIFE_OFFLINE=1`` a release not yet in the
cache is skipped, not fetched.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from peftlife.checker.vllm import Limits, conservation, findings
from peftlife.sut.adapters.vllm import Checkout, CheckoutError, Driver, TinyConfig
from peftlife.sut.adapters.vllm.release import COMPLETE, cache_dir, release_files
from peftlife.sut.adapters.vllm.sweep import SEEDS, run, run_workload, workload

__all__ = ["SEEDS", "checkout", "prompt", "workload"]  # test_vllm_loop.py's

VERSIONS = ("0.33.0", "0.34.0")


def _release(version: str) -> Path:
    given = os.environ.get("PEFTLIFE_VLLM_CHECKOUT")
    if given:
        return Path(given).expanduser()
    cache = cache_dir()
    if os.environ.get("PEFTLIFE_OFFLINE") and not (cache / f"vllm-{version}" / COMPLETE).is_file():
        pytest.skip(f"vllm=={version} is not in {cache} and PEFTLIFE_OFFLINE is set")
    return release_files(version, cache)


# One given checkout runs once; otherwise each release does.
PARAMS = ("checkout",) if os.environ.get("PEFTLIFE_VLLM_CHECKOUT") else VERSIONS


@pytest.fixture(scope="session", params=PARAMS)
def checkout(request: pytest.FixtureRequest) -> Checkout:
    return Checkout(_release(request.param))


def prompt(length: int) -> list[int]:
    """Tokens 1 to ``length``: any two such prompts share a prefix."""
    return list(range(1, length + 1))


def _source(cls: type) -> Path:
    return Path(cls.__init__.__code__.co_filename)  # type: ignore[misc]


def test_the_real_unmodified_scheduler_and_kv_chain_are_what_runs(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(enable_prefix_caching=True))
    manager = driver.scheduler.kv_cache_manager
    core = checkout.package / "v1" / "core"
    running = {
        type(driver.scheduler): ("vllm.v1.core.sched.scheduler", core / "sched" / "scheduler.py"),
        type(manager): ("vllm.v1.core.kv_cache_manager", core / "kv_cache_manager.py"),
        type(manager.coordinator): (
            "vllm.v1.core.kv_cache_coordinator",
            core / "kv_cache_coordinator.py",
        ),
        type(manager.coordinator.single_type_managers[0]): (
            "vllm.v1.core.single_type_kv_cache_manager",
            core / "single_type_kv_cache_manager.py",
        ),
        type(manager.block_pool): ("vllm.v1.core.block_pool", core / "block_pool.py"),
    }
    for cls, (module, file) in running.items():
        assert cls.__module__ == module, cls
        assert file.is_relative_to(checkout.path)
        assert module not in sys.modules  # kept out of sys.modules between calls
    assert type(manager.coordinator).__name__ == "UnitaryKVCacheCoordinator"
    assert type(manager.block_pool).__name__ == "BlockPool"
    assert _source(type(manager)) == core / "kv_cache_manager.py"
    assert _source(type(manager.block_pool)) == core / "block_pool.py"
    # The engine core's block hasher: vLLM's own function, over vLLM's sha256.
    assert driver.block_hasher is not None
    assert Path(driver.block_hasher.__code__.co_filename) == core / "kv_cache_utils.py"
    assert driver.pool.null_block == 0


def test_max_loras_keeps_a_second_adapter_waiting(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(num_blocks=16, max_loras=1))
    driver.submit("a", prompt(6), 3, 1)
    driver.submit("b", prompt(6), 3, 2)
    driver.submit("c", prompt(6), 3, 1)
    steps = run(driver)
    # b (adapter 2) is skipped while adapter 1 runs; c, behind it, is admitted.
    assert steps[0].new == ("a", "c") and steps[0].waiting == ("b",)
    assert all(len(s.adapters) <= 1 for s in steps)
    first_b = next(i for i, s in enumerate(steps) if "b" in s.tokens)
    assert all(1 not in s.adapters for s in steps[first_b:])
    assert {"a", "b", "c"} == {r for s in steps for r in s.finished} | set(steps[-1].tokens)


def test_two_lora_slots_run_both_adapters_together(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(num_blocks=16, max_loras=2))
    driver.submit("a", prompt(6), 3, 1)
    driver.submit("b", prompt(6), 3, 2)
    steps = run(driver)
    assert steps[0].new == ("a", "b") and steps[0].adapters == frozenset({1, 2})


def test_a_tiny_block_pool_preempts_the_last_running_request(checkout: Checkout) -> None:
    # Five blocks, one of them BlockPool's null block: four usable 4-token blocks.
    config = TinyConfig(block_size=4, num_blocks=5, max_loras=1)
    driver = Driver(checkout, config)
    driver.submit("a", prompt(7), 6, 1)
    driver.submit("b", prompt(7), 6, 1)
    driver.submit("c", prompt(4), 2, 2)
    steps = run(driver)
    preempting = [i for i, s in enumerate(steps) if s.preempted]
    assert len(preempting) == 1
    p = preempting[0]
    # a needs a third block for its ninth token: b, the last running, is preempted
    # (recompute: its blocks freed, back at the head of the waiting queue).
    assert steps[p].preempted == ("b",) and steps[p].tokens == {"a": 1}
    assert steps[p].waiting == ("b", "c")
    assert "b" not in steps[p].pool.holders
    resumed = next(i for i, s in enumerate(steps) if s.resumed)
    assert steps[resumed].resumed == ("b",)
    # Recompute: the prompt and the two tokens b had sampled, in one chunk.
    assert steps[resumed].tokens == {"b": 7 + 2}
    for s in steps:
        assert len(s.adapters) <= 1
    assert steps[-1].pool_after.num_free == config.num_blocks - 1


def test_prefix_cache_hits_follow_the_adapter_and_the_salt(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(num_blocks=16, max_loras=2, enable_prefix_caching=True))
    driver.submit("first", prompt(9), 1, 1)
    first = run(driver)
    # The first request's two full prompt blocks stay hashed in the free queue.
    assert len(driver.pool.hashed & set(driver.pool.free_queue)) == 2
    driver.submit("same", prompt(9), 1, 1)
    driver.submit("other_adapter", prompt(9), 1, 2)
    driver.submit("base_model", prompt(9), 1)
    driver.submit("salted", prompt(9), 1, 1, cache_salt="user-2")
    steps = run(driver)
    hits = steps[0].cached_tokens
    assert hits == {"same": 8, "other_adapter": 0, "base_model": 0, "salted": 0}
    assert findings(first + steps, Limits(adapter_slots=2, block_size=4)) == []
    # Without the first run's fills, the hit's blocks have no known filler.
    alone = findings(steps, Limits(adapter_slots=2, block_size=4))
    assert any("hit block" in f and "which no request filled" in f for f in alone), alone


def test_without_prefix_caching_nothing_is_hashed_or_hit(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(num_blocks=16))
    driver.submit("first", prompt(9), 1)
    run(driver)
    driver.submit("same", prompt(9), 1)
    steps = run(driver)
    assert driver.block_hasher is None and steps[0].cached_tokens == {"same": 0}
    assert not steps[-1].pool_after.hashed


def test_a_checkout_without_the_scheduler_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckoutError, match=r"no scheduler\.py at"):
        Checkout(tmp_path)


def test_an_import_the_stand_ins_lack_names_the_release_file_module_and_name(
    tmp_path: Path,
) -> None:
    package = tmp_path / "vllm"
    (package / "v1" / "core" / "sched").mkdir(parents=True)
    (package / "v1" / "core" / "sched" / "scheduler.py").write_text("", encoding="utf-8")
    (package / "_version.py").write_text("__version__ = version = '0.34.0'\n", encoding="utf-8")
    (package / "envs.py").write_text("from vllm.v1.engine import NotStoodIn\n", encoding="utf-8")
    with pytest.raises(
        CheckoutError,
        match=r"^vLLM 0\.34\.0: \S+envs\.py needs 'NotStoodIn' from 'vllm\.v1\.engine'",
    ):
        Checkout(tmp_path)


@pytest.mark.parametrize("prefix_caching", [False, True], ids=["no-prefix-cache", "prefix-cache"])
def test_the_invariants_hold_over_the_real_pool_on_small_workloads(
    checkout: Checkout, prefix_caching: bool
) -> None:
    preempting = hits = hashed_free = 0
    for seed in SEEDS:
        config, steps = run_workload(checkout, seed, prefix_caching)
        assert findings(steps, Limits(config.max_loras, config.block_size)) == [], seed
        preempting += any(s.preempted for s in steps)
        hits += any(any(s.cached_tokens.values()) for s in steps)
        hashed_free += any(set(s.pool_after.free_queue) & s.pool_after.hashed for s in steps)
    # The sweep reaches the paths the checks are about, not only easy runs.
    assert preempting >= 10, preempting
    if prefix_caching:
        assert hits >= 10 and hashed_free >= 10, (hits, hashed_free)
    else:
        assert hits == hashed_free == 0


def test_conservation_fires_on_a_reference_no_request_holds(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(num_blocks=8))
    driver.submit("a", prompt(6), 3)
    driver.step()
    assert list(conservation(driver.pool)) == []
    with checkout.installed():
        pool = driver.scheduler.kv_cache_manager.block_pool
        pool.touch([pool.blocks[driver.pool.free_queue[0]]])  # vLLM's own call, no holder
    lines = list(conservation(driver.pool))
    assert any("has ref_cnt 1 and 0 holder(s)" in line for line in lines), lines
    assert any("free +" in line for line in lines), lines


def test_a_request_whose_blocks_are_never_freed_is_found(checkout: Checkout) -> None:
    leaky = Checkout(checkout.path)  # its own modules: the patch stays in this test
    manager = leaky.module("vllm.v1.core.kv_cache_manager").KVCacheManager
    manager.free = lambda self, request: None
    driver = Driver(leaky, TinyConfig(num_blocks=8))
    driver.submit("a", prompt(3), 1)
    found = findings(run(driver), Limits(adapter_slots=1, block_size=4))
    assert any("V4 ended_means_empty after the output: a has ended" in f for f in found), found
