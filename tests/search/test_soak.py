"""A long deterministic soak of the reference scheduler under pressure.

A fixed pseudo-random workload (arrivals, cancellations, faults in both
pools) against a tight device LoRA cache and a tight KV pool, with every
invariant checked after every iteration and a clean drain at the end.
"""

from __future__ import annotations

import random

from peftlife.checker.drain import drain
from peftlife.checker.registry import check
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine

ITERATIONS = 3000


def soak(config: EngineConfig, seed: int, iterations: int = ITERATIONS) -> dict[str, int]:
    rng = random.Random(seed)
    engine = Engine(config, ReferenceScheduler)
    counts = {"submitted": 0, "cancelled": 0, "faults": 0, "suspends": 0, "recomputes": 0}
    # The largest request must fit the device alone (the drain's premise).
    budget = config.device_pages * config.tokens_per_block
    for _ in range(iterations):
        if len(engine.live_requests) < 6 and rng.random() < 0.5:
            prompt = rng.randint(1, budget // 2)
            engine.submit(
                prompt_len=prompt,
                max_new_tokens=rng.randint(1, budget - prompt),
                lora_task_id=rng.choice([None, *engine.adapter_ids]),
                lora_weights=rng.random() < 0.9,
                # As the LLM API sends them: upstream's recompute teardown unpins the
                # host copy, and a request with neither weights nor a path is stranded.
                lora_path=True,
            )
            counts["submitted"] += 1
        if engine.live_requests and rng.random() < 0.02:
            engine.cancel(rng.choice(engine.live_requests).request_id)
            counts["cancelled"] += 1
        if rng.random() < 0.05:
            pool = rng.choice(engine.pools)
            if rng.random() < 0.5:
                pool.refuse_next_resumes()
            else:
                pool.fail_next_grows()
            counts["faults"] += 1
        snapshot = engine.step()
        found = check(snapshot, engine.config)
        assert found == [], [str(v) for v in found]
        for call in snapshot.step.calls if snapshot.step else ():
            if call.caller == "scheduler" and call.component == "target":
                counts["suspends"] += call.method == "suspend_request"
                counts["recomputes"] += call.method == "free_resources" and bool(call.facts.started)
    result = drain(engine)
    assert result.violations == (), [str(v) for v in result.violations]
    assert not engine.live_requests
    return counts


def test_soak_tight_lora_cache_no_lower_tier_with_draft() -> None:
    """Chunked prefill, no lower tier, a draft pool, a device LoRA cache for one adapter."""
    config = EngineConfig(
        device_pages=8,
        host_pages=0,
        draft_device_pages=8,
        tokens_per_block=4,
        lora_device_pages=2,
        lora_host_pages=4,
        adapter_pages=((1, 2), (2, 2), (3, 1)),
        max_num_tokens=12,
        max_batch_size=4,
        enable_chunked_context=True,
        chunk_unit_size=4,
    )
    counts = soak(config, seed=20261130)
    # The soak is only worth its time if the pressure paths were really taken.
    assert counts["suspends"] > 500 and counts["recomputes"] > 200, counts


def test_soak_lower_tier_without_recompute_pause() -> None:
    """A host tier that holds every cache, recompute pause off: suspension alone frees pages."""
    config = EngineConfig(
        device_pages=6,
        host_pages=64,
        tokens_per_block=4,
        lora_device_pages=3,
        lora_host_pages=6,
        adapter_pages=((1, 1), (2, 2)),
        max_num_tokens=32,
        max_batch_size=3,
        enable_recompute_pause=False,
    )
    counts = soak(config, seed=7)
    assert counts["suspends"] > 500, counts
