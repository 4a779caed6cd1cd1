"""vLLM's scenarios: the ranges each example's engine configuration is drawn from.

A scenario names its world by its prefix (``vllm-``). Each range stays within
what the driver runs (``sut.adapters.vllm.driver.TinyConfig``): chunked
prefill on, one full-attention KV group, a batch queue of 1 to 4.
"""

from __future__ import annotations

import attrs

# (async scheduling, pipeline-parallel size): EngineCore.step, or a batch queue of 2 to 4.
LOOPS = ((False, 1), (True, 1), (False, 2), (True, 2), (True, 3), (False, 4))


@attrs.frozen
class VllmScenario:
    """Where one vLLM search looks: the ranges its examples' configurations are drawn from."""

    name: str
    description: str
    num_blocks: tuple[int, int] = (6, 32)  # the null block included
    block_sizes: tuple[int, ...] = (2, 4, 8)
    max_loras: tuple[int, int] = (1, 3)
    extra_cpu_loras: tuple[int, int] = (0, 2)  # max_cpu_loras - max_loras
    max_num_seqs: tuple[int, int] = (1, 4)
    max_num_batched_tokens: tuple[int, int] = (8, 64)
    prefix_caching: tuple[bool, ...] = (False, True)
    loops: tuple[tuple[bool, int], ...] = LOOPS
    policies: tuple[str, ...] = ("fcfs", "priority")
    adapters: int = 4  # adapter ids 1 to this a request or an operator names
    prompt_tokens: int = 16  # the longest prompt drawn
    max_tokens: int = 8  # the largest token budget drawn


SCENARIOS = {
    s.name: s
    for s in (
        VllmScenario("vllm-default", "every configuration the driver runs, every action"),
        VllmScenario(
            "vllm-kv-pressure",
            "few blocks: requests preempt each other and recompute, under async scheduling too",
            num_blocks=(4, 7),
            block_sizes=(4,),
            max_num_seqs=(2, 4),
            prompt_tokens=12,
        ),
        VllmScenario(
            "vllm-adapter-slots",
            "few GPU and CPU slots, more adapters than either, shared prompts across adapters",
            num_blocks=(12, 32),
            max_loras=(1, 2),
            extra_cpu_loras=(0, 1),
            prefix_caching=(True,),
            adapters=4,
        ),
    )
}
DEFAULT = "vllm-default"
PREFIX = "vllm-"


class UnknownScenario(ValueError):
    """A scenario name no vLLM scenario has; the message lists them."""


def get(name: str) -> VllmScenario:
    """The vLLM scenario ``name``.

    >>> get("vllm-kv-pressure").num_blocks
    (4, 7)
    """
    if name not in SCENARIOS:
        raise UnknownScenario(
            f"no vLLM scenario {name!r}: a vllm: SUT searches {', '.join(SCENARIOS)}"
        )
    return SCENARIOS[name]
