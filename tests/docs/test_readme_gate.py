"""The README's mutant gate table is what ``make check`` prints: a few of its rows,
searched again as the gate searches them (derandomized ``ci``), give the same cells.

Only the cells a derandomized search fixes are compared (scenario, invariant,
examples, steps; not the seconds), and the shrink runs without its time cap, so
the verdict depends on no clock. The rows: the overlap mutants whose shrunk
length the table once got wrong, and the quickest simple-loop one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from peftlife.search import gate
from peftlife.sut.mutants import BY_NAME

README = (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8")


def readme_row(mutant: str) -> list[str]:
    """The README's row of ``mutant`` in the gate table, cell by cell."""
    table = README.split("peftlife mutant gate\n", 1)[1].split("```", 1)[0]
    (row,) = [line.split() for line in table.splitlines() if line.split()[:1] == [mutant]]
    return row


@pytest.mark.parametrize("mutant", ["evicts_inflight", "double_teardown", "token_budget_ignored"])
def test_the_readme_gate_row_is_what_the_gate_finds(mutant: str) -> None:
    row = gate.MutantRun(BY_NAME[mutant], "ci", shrink_timeout=None).run()
    name, caught, scenario, invariant, examples, steps, _seconds = readme_row(mutant)
    assert (name, caught) == (mutant, "yes") and row.caught
    assert (scenario, invariant) == (row.scenario, row.invariant)
    assert (int(examples), int(steps)) == (row.examples, row.shrunk_steps)
