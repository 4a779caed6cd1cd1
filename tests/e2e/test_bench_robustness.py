"""bench/robustness.py's verdicts: a cell is right only with its door's own exit code."""

from __future__ import annotations

import pytest
from bench.robustness import Cell


@pytest.mark.parametrize(
    ("door", "code", "right"),
    [
        ("check", 1, True),
        ("pytest", 1, True),
        ("check", 2, False),  # bad input: a verdict of its own, not a finding
        ("pytest", 4, False),  # pytest's usage error
        ("pytest", 3, False),  # pytest's internal error
        ("fuzz", -11, False),  # ended by a signal
        ("check", 0, False),
        ("check", None, False),  # ended by the watchdog
        ("bisect", 0, True),
        ("bisect", 1, False),
    ],
)
def test_a_cell_is_right_only_with_its_doors_verdict(
    door: str, code: int | None, right: bool
) -> None:
    assert Cell("Raising", door, code, 1.0, False, "report").ok is right


def test_a_cell_that_printed_a_traceback_or_named_no_commit_is_wrong() -> None:
    assert not Cell("Raising", "check", 1, 1.0, True, "report").ok
    assert not Cell("Raising", "bisect", 0, 1.0, False, "report", verdict=False).ok
