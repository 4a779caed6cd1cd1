"""Wrong schedulers are flagged by search, on the invariant that names their defect.

Each scheduler is a small edit of the reference (``tests/wrong_schedulers.py``,
or a mutant of the catalogue); each is searched in one shipped scenario under
the derandomized ``ci`` profile, with no hand-written steps. The reference
holds in every shipped scenario (``test_machine.test_reference_holds``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from peftlife.search import profiles, scenarios
from peftlife.search.hunt import search

CI = profiles.get("ci")
STRATEGIES = Path(scenarios.__file__).parent / "strategies"
WRONG = "tests.wrong_schedulers:"

# (SUT, scenario to search, invariants acceptable as the first catch)
CASES = [
    # Recompute-pending ends only at the executor's registration: the scheduler's own
    # is invariant 4 (upstream's teardown then terminates the ownership it made).
    ("mutant:recompute_pause_reregisters", "no-lower-tier", {"no_duplicate_registration"}),
    (
        "mutant:recompute_pause_reregisters",
        "opt-in/scheduler-teardown",
        {"ownership_follows_residency", "no_duplicate_registration"},
    ),
    # Invariant 4: a first chunk is the executor's to register (or add_request_peft raises).
    (WRONG + "RegistersBeforeAdmission", "kv-pressure", {"no_duplicate_registration"}),
    # Invariant 8: budgets, chunks, recompute-paused requests.
    ("mutant:token_budget_ignored", "chunked-prefill", {"output_lists_well_formed"}),
    (WRONG + "IgnoresBatchSize", "chunked-prefill", {"output_lists_well_formed"}),
    (WRONG + "ChunksWithChunkingOff", "tight-drain", {"output_lists_well_formed"}),
    (WRONG + "RecomputePausesUnstarted", "chunked-prefill", {"output_lists_well_formed"}),
    # Invariant 8b: fields that are not the scheduler's; exceptions, whatever raised them.
    ("mutant:finishes_by_writing_tokens", "default", {"scheduler_writes_only_its_own"}),
    (WRONG + "ExitsInsidePass", "default", {"scheduler_protocol"}),
    (
        WRONG + "WarmsUncachedAdapters",
        "default",
        {"scheduler_protocol", "no_duplicate_registration"},
    ),
    # Catching PeftTaskNotCachedException hides nothing from the checker.
    (
        WRONG + "SwallowsNotCached",
        "chunked-prefill",
        {"ownership_follows_residency", "no_scheduler_caused_fault"},
    ),
]


@pytest.mark.parametrize(("sut", "scenario", "invariants"), CASES, ids=[c[0] for c in CASES])
def test_wrong_scheduler_is_flagged_by_search(
    sut: str, scenario: str, invariants: set[str]
) -> None:
    result = search(sut, scenario, CI, shrink=False)
    assert result.failure is not None, f"{sut} passed {result.examples} examples of {scenario}"
    assert result.failure.invariant in invariants, str(result.failure)


def test_an_exception_reports_its_type_message_and_the_schedulers_frames(tmp_path: Path) -> None:
    # Requests without a LoRA path (as the LLM API sends them, an uncached adapter
    # would be reloaded from it), so the scheduler's own add_request_peft raises.
    default = (STRATEGIES / "default.toml").read_text("utf-8")
    no_path = tmp_path / "no-lora-path.toml"
    no_path.write_text(
        default.replace("[workload]\n", '[workload]\nlora_path = "never"\n'), "utf-8"
    )
    result = search(WRONG + "WarmsUncachedAdapters", str(no_path), CI)
    assert result.failure is not None
    found = result.failure.violations[0].found
    assert found.startswith("schedule_request raised PeftTaskNotCachedException: LoRA task")
    assert "peftlife/world/peft.py:" in found and " in add_request_peft < " in found
    assert "tests/wrong_schedulers.py:" in found and "in schedule_request" in found


def test_system_exit_in_the_scheduler_is_a_finding() -> None:
    result = search(WRONG + "ExitsInsidePass", "default", CI)
    assert result.failure is not None
    assert "schedule_request raised SystemExit" in result.failure.violations[0].found


def test_a_hang_that_catches_exception_is_found_and_shrunk_within_a_budget() -> None:
    result = search(WRONG + "HangsCatchingException", "default", CI, schedule_deadline=0.2)
    assert result.failure is not None and result.failure.shrunk
    violation = result.failure.violations[0]
    assert violation.invariant == "scheduler_protocol"
    assert violation.found == "schedule_request did not return within 0.2 s"
    # Shrunk to the three submits that make it spin (the drain then steps).
    assert [a.kind for a in result.failure.run.actions] == ["submit"] * 3
