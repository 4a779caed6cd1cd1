"""The drain premises (docs/invariants.md, drain_completes), one by one, at their edge
and just past it.

At the edge of each premise the reference drains the world completely; one
step past it ``drain_premise_broken`` names the rule, so the drain's bound does
not bind there (and the front doors refuse such a world). The shipped
scenarios never generate a world past any edge.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peftlife.checker.drain import can_drain, drain, drain_premise_broken
from peftlife.search import scenarios
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine

Requests = list[tuple[int | None, int, int]]


def drained(config: EngineConfig, requests: Requests) -> Engine:
    """Submit every request, then drain with the reference; return the engine."""
    engine = Engine(config, ReferenceScheduler)
    for task, prompt, outputs in requests:
        engine.submit(
            prompt_len=prompt, max_new_tokens=outputs, lora_task_id=task, lora_weights=True
        )
    result = drain(engine)
    assert result.violations == (), [str(v) for v in result.violations]
    return engine


def assert_edge(config: EngineConfig, past: EngineConfig, requests: Requests, rule: str) -> None:
    assert drain_premise_broken(config, requests) is None
    engine = drained(config, requests)
    assert engine.live_requests == [], "the reference must finish every request at the edge"
    broken = drain_premise_broken(past, requests)
    assert broken is not None and broken.startswith(rule), broken
    assert not can_drain(past, requests)


# Two adapters that cannot share the device LoRA cache: owners must take turns.
TWO_ADAPTERS = EngineConfig(
    device_pages=8, lora_device_pages=2, lora_host_pages=4, adapter_pages=((1, 2), (2, 2))
)


def test_the_device_lora_cache_holds_the_largest_adapter() -> None:
    requests: Requests = [(1, 4, 3), (2, 4, 3), (1, 3, 2), (2, 2, 4)]
    past = attrs.evolve(TWO_ADAPTERS, adapter_pages=((1, 3), (2, 2)), lora_host_pages=6)
    assert_edge(
        TWO_ADAPTERS, past, requests, "adapter 1 needs 3 pages but the device LoRA cache holds 2"
    )


CHUNKED = EngineConfig(
    device_pages=16, enable_chunked_context=True, max_num_tokens=4, chunk_unit_size=4
)


def test_with_chunking_the_chunk_unit_fits_the_token_budget() -> None:
    requests: Requests = [(None, 10, 2), (None, 7, 3), (None, 2, 4)]
    past = attrs.evolve(CHUNKED, chunk_unit_size=5)
    assert_edge(
        CHUNKED, past, requests, "with chunking on, chunk_unit_size (5) exceeds max_num_tokens (4)"
    )


def test_past_the_chunk_unit_edge_the_reference_is_not_held_to_the_bound() -> None:
    """The former false alarm: no chunk fits, the long prompt never starts, no verdict."""
    past = attrs.evolve(CHUNKED, chunk_unit_size=5)
    engine = Engine(past, ReferenceScheduler)
    rid = engine.submit(prompt_len=10, max_new_tokens=2)
    result = drain(engine)
    assert result.violations == ()
    assert engine.is_live(rid) and result.iterations == result.bound


# No lower tier, recompute pause on: the device holds exactly one largest request.
TIGHT = EngineConfig(device_pages=4, tokens_per_block=2, max_num_tokens=16)


@pytest.mark.parametrize("draft", [False, True], ids=["target pool", "draft pool"])
def test_every_request_fits_every_pools_device_alone(draft: bool) -> None:
    edge = attrs.evolve(TIGHT, draft_device_pages=4 if draft else None)
    requests: Requests = [(None, 5, 3), (None, 5, 3), (None, 4, 4)]
    pool = "draft_device_pages" if draft else "device_pages"
    past = attrs.evolve(edge, **{pool: 3})
    assert_edge(
        edge, past, requests, f"a request of 5 + 3 tokens needs 4 pages, more than {pool} (3)"
    )


def test_without_chunking_the_token_budget_covers_the_longest_context() -> None:
    # A recompute folds the outputs so far into the prompt: 5 + 3 - 1 = 7 tokens at once.
    edge = attrs.evolve(TIGHT, max_num_tokens=7)
    requests: Requests = [(None, 5, 3), (None, 5, 3), (None, 3, 5)]
    past = attrs.evolve(edge, max_num_tokens=6)
    assert_edge(
        edge,
        past,
        requests,
        "with chunking off, a request's longest context (7 tokens) exceeds max_num_tokens (6)",
    )


def test_without_recompute_pause_the_lower_tier_holds_every_cache() -> None:
    # Three requests of 4 pages each: the lower tier must take all 12 at once.
    edge = attrs.evolve(TIGHT, enable_recompute_pause=False, host_pages=12)
    requests: Requests = [(None, 5, 3), (None, 5, 3), (None, 4, 4)]
    past = attrs.evolve(edge, host_pages=11)
    assert_edge(
        edge, past, requests, "with recompute pause off, only suspension frees device pages"
    )


@pytest.mark.parametrize("name", scenarios.shipped_names())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_shipped_scenarios_generate_only_worlds_that_can_drain(
    name: str, data: st.DataObject
) -> None:
    s = scenarios.load(name)
    config = data.draw(s.worlds())
    largest = [(None, s.prompt_len.hi, s.max_new_tokens.hi)] * s.max_requests
    assert drain_premise_broken(config, largest) is None
