"""The seeded sweep: small configurations and workloads, each stepped until the engine drains.

``workload(seed, prefix_caching)`` draws a tiny configuration, its requests
(prompts from two token families, so some share a prefix; adapters 0 to 3) and
at most one abort; ``run_workload`` submits them to a ``Driver`` and steps it
until nothing is left, within ``STEPS``. ``tests/sut/test_vllm.py`` checks the
invariants over it for each release, and ``bench/vllm_releases.py`` runs it
against every release.
"""

from __future__ import annotations

import random

from peftlife.sut.adapters.vllm.checkout import Checkout
from peftlife.sut.adapters.vllm.driver import Driver, Step, TinyConfig

STEPS = 60  # every workload below drains well within this
SEEDS = range(80)

# id, prompt length, max tokens, adapter, prompt
Request = tuple[str, int, int, int, tuple[int, ...]]
Workload = tuple[TinyConfig, list[Request], dict[int, str]]


class Undrained(AssertionError):
    """Requests are left after ``STEPS`` steps: the engine did not drain."""


def run(driver: Driver, aborts: dict[int, str] | None = None) -> list[Step]:
    """Steps while the engine is busy, at most ``STEPS``; ``aborts`` maps a step to a request."""
    steps = []
    for n in range(STEPS):
        if aborts and n in aborts:
            driver.abort(aborts[n])
        steps.append(driver.step())
        if not driver.busy:
            return steps
    raise Undrained(f"requests left after {STEPS} steps: {list(driver.scheduler.requests)}")


def workload(seed: int, prefix_caching: bool) -> Workload:
    """A small configuration, its requests and its aborts, from a seed.

    >>> config, requests, aborts = workload(0, prefix_caching=True)
    >>> config.enable_prefix_caching, workload(0, True) == (config, requests, aborts)
    (True, True)
    """
    rng = random.Random(seed)
    config = TinyConfig(
        num_blocks=rng.randint(4, 8),
        max_loras=rng.randint(1, 2),
        enable_prefix_caching=prefix_caching,
    )
    room = (config.num_blocks - 1) * config.block_size  # the null block is not usable
    requests = []
    for n in range(rng.randint(2, 5)):
        length = rng.randint(1, 9)
        family = 100 * rng.randint(0, 1)
        tokens = tuple(range(family + 1, family + length + 1))
        max_tokens = rng.randint(1, min(6, room - length))
        requests.append((f"r{n}", length, max_tokens, rng.randint(0, 3), tokens))
    aborts = {rng.randint(1, 6): f"r{rng.randrange(len(requests))}"} if rng.random() < 0.3 else {}
    return config, requests, aborts


def run_workload(
    checkout: Checkout, seed: int, prefix_caching: bool
) -> tuple[TinyConfig, list[Step]]:
    """The seed's workload on a fresh driver over ``checkout``, stepped until it drains."""
    config, requests, aborts = workload(seed, prefix_caching)
    driver = Driver(checkout, config)
    for rid, _, max_tokens, adapter, tokens in requests:
        driver.submit(rid, tokens, max_tokens, adapter)
    return config, run(driver, aborts)
