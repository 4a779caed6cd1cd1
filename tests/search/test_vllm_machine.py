"""vLLM's state machine finds, by search, what breaks in vLLM's own engine parts.

Each search runs Hypothesis's generate phase only (no shrinking: Hypothesis's
shrinker is what takes a vLLM search's time), derandomized, on vLLM 0.33.0 and
0.34.0 (``checkout``, as in tests/sut/test_vllm.py). The mutant is a one-line
patch of vLLM's own scheduler, applied before it is compiled; nothing here
tells the machine where to look.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import Phase, settings
from tests.sut.test_vllm import checkout
from tests.sut.test_vllm_worker import MAX_LORAS_SKIP

from peftlife.checker import vllm
from peftlife.checker.vllm import INVARIANTS
from peftlife.search.vllm import scenarios
from peftlife.search.vllm.run import VllmResult, search
from peftlife.sut.adapters.vllm import Checkout
from peftlife.sut.adapters.vllm.named import VllmSut

__all__ = ["checkout"]  # the release fixture, shared with test_vllm.py

EXAMPLES = 60  # each search below finds within 52 examples on both releases


def _search(subject: VllmSut, scenario: str) -> VllmResult:
    generate_only = settings(
        max_examples=EXAMPLES,
        stateful_step_count=30,
        phases=[Phase.generate],
        derandomize=True,
        deadline=None,
    )
    return search(subject, scenario, generate_only)


@pytest.mark.parametrize("scenario", sorted(scenarios.SCENARIOS))
def test_dropping_the_max_loras_skip_is_found_by_search(checkout: Checkout, scenario: str) -> None:
    patched = Checkout(checkout.path, {"v1/core/sched/scheduler.py": [(MAX_LORAS_SKIP, "False")]})
    result = _search(VllmSut("vllm:patched", patched), scenario)
    assert result.finding is not None
    assert result.finding.invariant == "V1 max_loras_cap"
    assert result.finding.invariant in INVARIANTS
    assert result.examples_to_find is not None and result.examples_to_find <= EXAMPLES


def test_a_raise_inside_vllms_slot_code_is_a_finding_naming_vllms_line(
    checkout: Checkout,
) -> None:
    # Operator pins, then requests under other adapters: vLLM's slot code raises inside
    # the step (the release's own behaviour; not yet judged against a running engine).
    result = _search(VllmSut("vllm:unpatched", checkout), "vllm-default")
    assert result.finding is not None
    assert result.finding.invariant == "V6 raised_in_vllm"
    assert result.finding.invariant in INVARIANTS
    message = result.finding.violations[0].message
    assert re.search(r"the slot manager raised \w+Error: .* at vllm/[\w/]+\.py:\d+ in ", message)
    story = result.finding.story
    assert story[0].startswith("engine: num_gpu_blocks=")
    assert any(line.startswith("pin_lora ") for line in story)


def test_every_rule_the_machine_and_checks_name_has_its_source() -> None:
    named = {vllm.V2, vllm.V3, vllm.V6, vllm.DRAINED, *vllm.RESTATED}
    assert named <= set(vllm.INVARIANTS)
    assert all(vllm.INVARIANTS[name].startswith(("vllm/", "restated: vllm/")) for name in named)
