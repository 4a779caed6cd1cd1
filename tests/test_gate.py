"""The mutation gate: every known defect is caught by search alone.

Each mutant is hunted through the shipped scenarios, taking turns in slices, under the ``ci``
profile, with no hand-written steps and no scenario made for it; a mutant that
escapes, or that is caught on an invariant its catalogue entry does not
accept, fails the suite.
"""

from __future__ import annotations

import pytest

from peftlife.search import profiles
from peftlife.search.machine import hunt
from peftlife.sut.mutants import CATALOGUE, Mutant

CI = profiles.get("ci")


@pytest.mark.parametrize("mutant", CATALOGUE, ids=lambda m: m.name)
def test_mutation_gate(mutant: Mutant) -> None:
    """Caught by search alone: the shipped scenarios taking turns, no hand-written steps."""
    result = hunt(f"mutant:{mutant.name}", CI)
    assert result.failure is not None, f"{mutant.name} escaped every shipped scenario"
    assert result.failure.invariant in mutant.acceptable, (
        f"{mutant.name} was caught by {result.failure.invariant} in {result.scenario}, "
        f"not by one of {mutant.acceptable}: {result.failure}"
    )
