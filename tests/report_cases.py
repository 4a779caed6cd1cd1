"""Counterexamples built by hand (no search), so every rendering of them is fixed.

The report tests (tests/reports/test_report.py, tests/reports/test_html.py) pin their renderings
in the golden files of ``tests/golden``; other tests replay them as ready-made
failures (the browser, the bisector, the docs, the renderings' marks).
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from peftlife.reports import Case
from peftlife.search.trace import Action
from peftlife.world.config import EngineConfig

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("PEFTLIFE_REGEN_GOLDEN") == "1"

WORLD = EngineConfig(
    device_pages=8,
    tokens_per_block=2,
    lora_device_pages=1,
    lora_host_pages=3,
    adapter_pages=((1, 1),),
    max_num_tokens=15,
    max_batch_size=1,
)
SUBMIT = Action("submit", lora_task_id=1, lora_weights=True, prompt_len=1, max_new_tokens=2)

# Request 1 runs its prefill; its next KV grow fails, the scheduler suspends it
# but (the defect) never releases the adapter: still active, no longer resident.
CASE = Case(
    sut="mutant:no_release_on_suspend",
    scenario="default",
    config=WORLD,
    actions=(SUBMIT, Action("step"), Action("fail_grow", pool="target"), Action("step")),
    profile="ci",
)

# A scheduler that never schedules: every action's check holds, and the drain
# gives up at its bound, so the story elides the drain's quiet iterations.
DRAIN_CASE = Case(
    sut="tests.bad_schedulers:NeverSchedules",
    scenario="default",
    config=WORLD,
    actions=(SUBMIT, Action("step")),
    seed=1234,
)


# The overlap executor, the scheduler told nothing in flight: request 1 runs in two
# batches in a row, ends by end-of-sequence while a held batch stands in for the
# next; request 2 retires, and the defect (no pre-claim for a retiring request's
# adapter) admits request 3 on another adapter, which ensure_batch cannot load.
OVERLAP_CASE = Case(
    sut="mutant:budget_ignores_retiring",
    scenario="overlap-empty",
    config=attrs.evolve(
        WORLD,
        adapter_pages=((1, 1), (2, 1)),
        max_batch_size=2,
        executor="overlap",
        inflight_ids="empty",
        hold_reason="attention_dp",
    ),
    actions=(
        Action("submit", lora_task_id=1, lora_weights=True, prompt_len=1, max_new_tokens=3),
        Action("step"),
        Action("step"),
        Action("eos", request_id=1),
        Action("submit", lora_task_id=2, lora_weights=True, prompt_len=1, max_new_tokens=2),
        Action("hold_batch"),
        Action("step"),
        Action("step"),
        Action("submit", lora_task_id=1, lora_weights=True, prompt_len=1, max_new_tokens=1),
        Action("step"),
        Action("step"),
    ),
    profile="ci",
)
