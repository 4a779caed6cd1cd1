"""vLLM's engine core loop with the worker's LoRA slots: each step's set, an operator's calls.

Every test runs on vLLM 0.33.0 and 0.34.0 (``checkout``, as in test_vllm.py).
Each launched batch's adapter set goes to vLLM's own slot managers
(``slots.py``) as the model runner's ``_set_active_loras`` sends it; the
checks read the slots back after vLLM applied it. ``add_lora``,
``reload_lora``, ``remove_lora`` and ``pin_lora`` are ``LLMEngine``'s.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import attrs
import pytest
from tests.sut.test_vllm import SEEDS, checkout, prompt
from tests.sut.test_vllm_loop import QUEUES, drive, seeded

from peftlife.checker.vllm import Limits, adapters_in_gpu_slots, findings
from peftlife.sut.adapters.vllm import Checkout, Driver, Step, TinyConfig
from peftlife.sut.adapters.vllm.slots import SlotsRaised

__all__ = ["checkout"]  # the release fixture, shared with test_vllm.py

LOOPS = {"sync": TinyConfig(), "async-2": QUEUES["async-2"], "pp4-4": QUEUES["pp4-4"]}

# The mutant: the scheduler's waiting loop no longer skips a request whose
# adapter would exceed max_loras (vllm/v1/core/sched/scheduler.py, both releases).
MAX_LORAS_SKIP = "len(scheduled_loras) == self.lora_config.max_loras"


def _found(steps: list[Step], config: TinyConfig) -> list[str]:
    return findings(steps, Limits(config.max_loras, config.block_size))


def test_each_step_applies_its_set_to_vllms_own_slot_manager(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(num_blocks=16, max_loras=2, max_cpu_loras=3))
    manager = driver.slots.worker._adapter_manager
    assert type(manager).__name__ == "LRUCacheLoRAModelManager"
    assert Path(type(manager).activate_adapter.__code__.co_filename).is_relative_to(
        checkout.package
    )
    driver.submit("a", prompt(5), 2, 1)
    driver.submit("b", prompt(3), 2, 2)
    driver.submit("base", prompt(2), 2)
    step = driver.step()
    assert step.slots is not None and sorted(step.slots.slots, key=str) == [1, 2]
    assert set(step.needed) == {"a", "b"}  # the base model needs no slot
    # What the punica kernels were mapped to: each scheduled token's adapter id.
    assert step.slots.kernel is not None
    assert sorted(step.slots.kernel.token_ids) == [0] * 2 + [1] * 5 + [2] * 3
    assert driver.slots.files.loads == [
        (1, "adapter-1", "/adapters/1", 1),
        (2, "adapter-2", "/adapters/2", 1),
    ]
    assert _found([step, *drive(driver)], driver.config) == []


@pytest.mark.parametrize("loop", list(LOOPS), ids=list(LOOPS))
def test_every_needed_adapter_is_in_a_slot_on_the_seeded_workloads(
    checkout: Checkout, loop: str
) -> None:
    needing = evicting = 0
    for seed in SEEDS:
        config, steps = seeded(checkout, seed, LOOPS[loop])
        assert _found(steps, config) == [], seed
        needing += sum(bool(s.needed) for s in steps)
        tables = [s.slots.slots for s in steps if s.slots is not None]
        evicting += any(
            old is not None and new != old
            for before, after in itertools.pairwise(tables)
            for old, new in zip(before, after, strict=True)
        )
    # Up to three adapters over one or two slots: most runs evict a slot in use
    # earlier, so the check is read under pressure.
    assert needing >= 300 and evicting >= 20, (needing, evicting)


@pytest.mark.parametrize("loop", list(LOOPS), ids=list(LOOPS))
def test_dropping_the_max_loras_skip_is_found_where_vllm_raises(
    checkout: Checkout, loop: str
) -> None:
    mutant = Checkout(checkout.path, {"v1/core/sched/scheduler.py": [(MAX_LORAS_SKIP, "False")]})
    by_slots = by_scheduler = 0
    for seed in SEEDS:
        config, steps = seeded(mutant, seed, LOOPS[loop])
        raised = [f for f in _found(steps, config) if "V6 raised_in_vllm" in f]
        assert len(raised) <= 1 and (not raised or steps[-1].raised), seed  # the engine died
        if raised and "the slot manager raised" in raised[0]:
            # vLLM's worker refuses the step's set: more adapters than GPU slots.
            assert "RuntimeError: Number of requested" in raised[0], raised
            assert "at vllm/lora/worker_manager.py:" in raised[0], raised
            assert "in _apply_adapters" in raised[0], raised
            by_slots += 1
        elif raised:
            # The extra adapter was not in the step's batch; the next schedule()
            # trips the scheduler's own assert on the running requests' adapters.
            assert "the scheduler raised AssertionError" in raised[0], raised
            assert "at vllm/v1/core/sched/scheduler.py:" in raised[0], raised
            by_scheduler += 1
    # On both releases: 28, 26 and 28 of the 80 runs (sync, async-2, pp4-4).
    assert by_slots + by_scheduler >= 25 and by_slots >= 15, (by_slots, by_scheduler)


def test_the_check_fires_on_a_slot_table_without_the_adapter(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(num_blocks=16, max_loras=1))
    driver.submit("a", prompt(4), 1, 1)
    step = driver.step()
    assert step.slots is not None and list(adapters_in_gpu_slots(0, step)) == []
    moved = attrs.evolve(step, slots=attrs.evolve(step.slots, slots=(None,)))
    assert [str(v) for v in adapters_in_gpu_slots(0, moved)] == [
        "step 0: V2 adapter_in_gpu_slot: a runs under adapter-1 (id 1), which is in no GPU slot "
        "of (None,)"
    ]


def test_add_lora_loads_an_adapter_before_any_request_needs_it(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(num_blocks=16, max_loras=2))
    assert driver.add_lora(1) is True
    assert driver.slots.state().slots == (1, None) and len(driver.slots.files.loads) == 1
    assert driver.add_lora(1) is True  # already loaded: touched, not read again
    driver.submit("a", prompt(4), 2, 1)
    steps = drive(driver)
    assert len(driver.slots.files.loads) == 1  # the step found it in its slot
    assert _found(steps, driver.config) == []


def test_reload_lora_in_place_bumps_the_weights_the_next_step_runs(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(num_blocks=16, max_loras=1))
    driver.submit("a", prompt(4), 4, 1)
    steps = [driver.step()]
    assert steps[0].slots is not None and steps[0].slots.versions == {1: 1}
    assert driver.reload_lora(1) is True
    assert driver.slots.state().versions == {1: 2}
    steps += drive(driver)
    assert all(s.slots.versions == {1: 2} for s in steps[1:] if s.slots)
    assert steps[1].weights == {("adapter-1", "/adapters/1"): 2}
    assert _found(steps, driver.config) == []
    # Read against weights newer than its slot's, the check fires.
    stale = attrs.evolve(steps[1], weights={("adapter-1", "/adapters/1"): 3})
    assert "whose slot holds weight version 2, not 3" in str(next(adapters_in_gpu_slots(1, stale)))


def test_remove_lora_empties_its_slot_and_a_later_step_reads_it_again(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(num_blocks=16, max_loras=2))
    driver.submit("a", prompt(4), 1, 1)
    steps = drive(driver)
    assert driver.remove_lora(1) is True
    state = driver.slots.state()
    assert 1 not in state.slots and 1 not in state.cpu
    assert driver.remove_lora(1) is False  # vLLM's answer for an adapter it does not hold
    driver.submit("b", prompt(4), 1, 1)
    steps += drive(driver)
    assert [load[0] for load in driver.slots.files.loads] == [1, 1]
    assert driver.list_loras() == {1}
    assert _found(steps, driver.config) == []


@pytest.mark.parametrize("loop", list(LOOPS), ids=list(LOOPS))
def test_remove_lora_while_its_request_runs_is_read_again_by_the_next_step(
    checkout: Checkout, loop: str
) -> None:
    driver = Driver(checkout, attrs.evolve(LOOPS[loop], num_blocks=16, max_loras=1))
    driver.submit("a", prompt(4), 6, 1)
    steps = [driver.step()]
    assert driver.remove_lora(1) is True and driver.list_loras() == set()
    steps += drive(driver)
    # The next launch that runs a: vLLM's _apply_adapters reads it from disk again.
    assert [load[0] for load in driver.slots.files.loads] == [1, 1]
    assert any(s.needed for s in steps[1:])
    assert _found(steps, driver.config) == []


def test_pin_lora_keeps_its_slot_while_others_take_turns(checkout: Checkout) -> None:
    driver = Driver(checkout, TinyConfig(num_blocks=32, max_loras=2, max_cpu_loras=2))
    driver.add_lora(1)
    assert driver.pin_lora(1) is True
    steps: list[Step] = []
    for n, adapter in enumerate((2, 3, 2, 3)):
        driver.submit(f"r{n}", prompt(3), 1, adapter)
        steps += drive(driver)
        assert driver.slots.state().pinned_gpu == {1}
        assert 1 in driver.slots.state().slots and 1 in driver.slots.state().cpu
    assert _found(steps, driver.config) == []
    # Every slot pinned and a step needing another adapter: vLLM's LRU refuses.
    driver.pin_lora(3)
    driver.submit("late", prompt(3), 1, 2)
    late = drive(driver)[-1]
    assert late.raised is not None and "at vllm/utils/cache.py:" in late.raised
    assert not driver.busy
    found = _found([late], driver.config)
    assert any("V6 raised_in_vllm" in f for f in found), found


def test_an_operator_call_vllm_refuses_comes_back_with_its_file_and_line(
    checkout: Checkout,
) -> None:
    driver = Driver(checkout, TinyConfig(max_loras=1))
    with pytest.raises(SlotsRaised) as raised:
        driver.pin_lora(5)  # never added
    assert raised.value.error.file == "vllm/lora/model_manager.py"
    assert "Pinning failed. LoRA 5 is not registered." in str(raised.value)
    assert driver.busy is False and driver.dead is None  # the engine core lives on
