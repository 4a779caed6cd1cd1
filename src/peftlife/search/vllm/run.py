"""One search of vLLM's machine in one scenario, under a peftlife profile.

Hypothesis runs the machine (``run_state_machine_as_test``) and, for this
world, shrinks what it finds with its own shrinker: the finding it raises
last is the shrunk example's. Every loop is bounded: the profile's
examples and steps per example, and the machine's drain.
"""

from __future__ import annotations

import time
from typing import Any

import attrs
import hypothesis
from hypothesis import Verbosity
from hypothesis.stateful import run_state_machine_as_test

from peftlife.search import compat
from peftlife.search.vllm import scenarios
from peftlife.search.vllm.machine import VllmFinding, machine_class
from peftlife.sut.adapters.vllm.named import VllmSut


@attrs.frozen
class VllmResult:
    """How one search of a vLLM SUT in one scenario ended."""

    sut: str
    scenario: str
    finding: VllmFinding | None  # the shrunk example's, or None if every example held
    examples: int
    examples_to_find: int | None
    seconds: float

    @property
    def held(self) -> bool:
        return self.finding is None


def search(
    subject: VllmSut,
    scenario: str,
    settings: hypothesis.settings,
    seed: int | None = None,
) -> VllmResult:
    """Search ``subject`` in the vLLM scenario ``scenario`` under ``settings``
    (``tests/search/test_vllm_machine.py`` runs it on two releases)."""
    machine: Any = machine_class(subject, scenarios.get(scenario))
    run_settings = hypothesis.settings(
        settings,
        report_multiple_bugs=False,
        derandomize=settings.derandomize and seed is None,
        database=None,
        verbosity=Verbosity.quiet,
    )
    if seed is not None:
        machine = hypothesis.seed(seed)(machine)
    start = time.perf_counter()
    finding = None
    # Constants mined from loaded modules would make the draws depend on what was imported.
    with compat.stable_constants():
        try:
            run_state_machine_as_test(machine, settings=run_settings)
        except VllmFinding as found:
            finding = found
    tally = machine.tally
    return VllmResult(
        subject.spec,
        scenario,
        finding,
        tally.examples,
        tally.examples_to_find,
        time.perf_counter() - start,
    )
