"""``peftlife explore``, ``check --scenario all`` and the witness warning, at the front door."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from peftlife.doors import cli
from peftlife.doors.cli.tell import warn_unreached
from peftlife.search.hunt import SearchResult
from peftlife.search.machine import COVERAGE_LABELS


def test_explore_the_reference_holds(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = cli.main(["explore", "--scenario", "kv-pressure", "--depth", "2"])
    out = capsys.readouterr().out
    assert code == cli.EXIT_HELD
    assert "no violation up to depth 2" in out and "states" in out


def test_explore_a_mutant_reports_a_shortest_counterexample(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["explore", "--sut", "mutant:pause_flag_dropped", "--scenario", "kv-pressure"]
    argv += ["--depth", "4", "--prompt-lens", "4", "--max-new-tokens", "1"]
    code = cli.main([*argv, "--report-dir", str(tmp_path), "-q"])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FOUND
    assert "a shortest counterexample has" in out
    assert len(list(tmp_path.glob("mutant_*.json"))) == 1
    # The report's world is explored again from the file: the same length, nothing shorter.
    report = next(tmp_path.glob("*.json"))
    again = cli.main([*argv, "--world", str(report), "--report-dir", str(tmp_path / "again")])
    assert again == cli.EXIT_FOUND


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["explore", "--depth", "0"], "--depth"),
        (["explore", "--prompt-lens", "four"], "--prompt-lens"),
        (["explore", "--scenario", "nowhere"], "unknown scenario"),
    ],
)
def test_explore_bad_input_exits_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], hint: str
) -> None:
    assert cli.main(argv) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert hint in err and len(err.strip().splitlines()) == 1


def test_check_all_scenarios_catches_a_mutant(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["check", "--sut", "mutant:no_release_on_suspend", "--scenario", "all", "-q"]
    code = cli.main([*argv, "--profile", "ci", "--report-dir", str(tmp_path)])
    assert code == cli.EXIT_FOUND
    assert len(list(tmp_path.glob("mutant_*.json"))) == 1


def test_a_run_that_never_reached_a_witness_warns() -> None:
    console = Console(record=True, width=200)
    reached = Counter(dict.fromkeys(COVERAGE_LABELS[1:], 1))
    result = SearchResult("reference", "default", None, 10, 10, 0.1, reached)
    assert result.unreached == (COVERAGE_LABELS[0],)
    warn_unreached(result, console)
    assert f"warning: never reached {COVERAGE_LABELS[0]}" in console.export_text()
    everything = SearchResult("reference", "default", None, 10, 10, 0.1, Counter(COVERAGE_LABELS))
    warn_unreached(everything, Console(record=True))
    assert everything.unreached == ()
