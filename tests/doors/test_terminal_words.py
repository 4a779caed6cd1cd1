"""What the terminal prints reads as written: counts in the singular when there is
one (``peftlife.world.words.count``, the one helper), and no line of a listing
padded with spaces to the table's width."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from peftlife.doors import cli
from peftlife.search.hunt import SearchResult, describe

SRC = Path(cli.__file__).resolve().parents[2]
# The counts peftlife tells, which may be one.
NOUNS = "examples|iterations|executor iterations|replays|steps|actions|states|workers|commits|saves"
# A count put in an f-string before its plural noun; a constant (a budget) is never one.
BARE_PLURAL = re.compile(r"\{(?![A-Z_]+\})[^{}]+\} (?:" + NOUNS + r")\b")


@pytest.mark.parametrize("argv", [["mutants", "--list"], ["scenarios"], ["invariants"]])
def test_a_listing_has_no_trailing_spaces(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert cli.main(argv) == cli.EXIT_HELD
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 5
    padded = [line for line in lines if line != line.rstrip()]
    assert padded == [], padded[:3]


def test_one_example_is_one_example() -> None:
    text = describe(SearchResult("reference", "default", None, 1, 1, 0.1, Counter(), 1))
    assert "peftlife: 1 example, 1 executor iteration, held" in text


def test_every_count_the_package_prints_goes_through_the_one_helper() -> None:
    bare = [
        f"{path.relative_to(SRC)}:{n}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if BARE_PLURAL.search(line)
    ]
    assert bare == [], "\n".join(bare)
