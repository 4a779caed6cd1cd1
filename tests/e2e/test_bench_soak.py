"""The soak of ``make bench`` (bench/soak.py), on one mutant, one seed and one profile."""

from __future__ import annotations

import re
import time
from pathlib import Path

from bench import soak, write_section

from peftlife.search import profiles


def test_the_soak_gives_one_row_per_mutant_in_the_header_columns() -> None:
    # Resolved here first, the dev profile's default database is cached on the profile:
    # the run must still get the empty one of its own fresh directory.
    assert profiles.get("dev").database is not None
    result = soak.soak(["token_budget_ignored"], [1], ["dev"], fuzz_examples=20)
    (row,) = soak.rows(result)
    assert len(row) == len(soak.HEADER)
    cells = dict(zip(soak.HEADER, row, strict=True))
    assert [cells[c] for c in ("mutant", "runs", "hangs", "errors", "findings")] == [
        "token_budget_ignored",
        "1",
        "0",
        "0",
        "1",
    ]
    assert re.fullmatch(r"\d+\.\d\d s, \d+ replays \(dev, seed 1\)", cells["slowest shrink"])
    assert cells["at a bound"] == "0"
    assert re.fullmatch(r"\d+\.\d s", cells["fuzz wall"])
    assert cells["fuzz ended"] == "yes, exit 1"  # it ended, and found the mutant
    (check,) = result.checks
    assert "peftlife-soak-" in check.database and not Path(check.database).exists()
    assert soak.summary(result).startswith("1 run, 0 hangs, 0 errors; 1 finding,")
    table = [line for line in soak.section(result, "note").splitlines() if line.startswith("|")]
    assert len(table) == 3 and {line.count("|") for line in table} == {len(soak.HEADER) + 1}
    assert result.ok


def _hangs_or_raises(run: soak.Run, home: Path) -> soak.Checked:
    if run.mutant == "hangs":
        time.sleep(60)
    raise RuntimeError("a harness bug")


def test_a_run_past_the_watchdog_is_a_hang_and_the_soak_goes_on() -> None:
    runs = [soak.Run("hangs", "ci", 1), soak.Run("raises", "ci", 1), soak.Run("hangs", "ci", 2)]
    start = time.monotonic()
    checked = soak.run_checks(runs, watchdog=0.5, check=_hangs_or_raises)
    # Each hang sleeps 60 s: done sooner, the watchdog cut both, whatever the load.
    assert time.monotonic() - start < 45
    outcomes = {(c.run.mutant, c.run.seed): c.outcome for c in checked}
    assert outcomes == {("hangs", 1): "hang", ("raises", 1): "error", ("hangs", 2): "hang"}
    (error,) = (c for c in checked if c.outcome == "error")
    assert "RuntimeError: a harness bug" in error.detail
    result = soak.Soak(tuple(checked), mutants=("hangs", "raises"))
    assert [row[1:4] for row in soak.rows(result)] == [("2", "2", "0"), ("1", "0", "1")]
    assert soak.summary(result).startswith("3 runs, 2 hangs, 1 error;")
    assert not result.ok and len(soak.problems(result)) == 3


def test_the_section_names_the_runs_that_held() -> None:
    held = soak.Checked(soak.Run("slow_to_find", "dev", 7), "held", 1.0, examples=280)
    text = soak.section(soak.Soak((held,), mutants=("slow_to_find",)), "note")
    assert (
        "- `peftlife check --sut mutant:slow_to_find --scenario all --profile dev --seed 7`" in text
    )


def test_the_section_replaces_its_earlier_self(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    out.write_text("# Benchmarks\n\n## 1. speed\n\nfast\n", "utf-8")
    write_section(out, soak.HEADING, "## Soak (bench/soak.py)\n\nfirst")
    write_section(out, soak.HEADING, "## Soak (bench/soak.py)\n\nsecond")
    assert out.read_text("utf-8") == (
        "# Benchmarks\n\n## 1. speed\n\nfast\n\n## Soak (bench/soak.py)\n\nsecond\n"
    )
    out.write_text(out.read_text("utf-8") + "\n## Fuzzing campaigns\n\nlater\n", "utf-8")
    write_section(out, soak.HEADING, "## Soak (bench/soak.py)\n\nthird")
    assert out.read_text("utf-8").endswith(
        "## Soak (bench/soak.py)\n\nthird\n\n## Fuzzing campaigns\n\nlater\n"
    )
