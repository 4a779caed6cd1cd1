"""``peftlife explore``, ``check --scenario all`` and the witness warning, at the front door."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from peftlife.doors import cli
from peftlife.doors.outputs.progress import Display
from peftlife.doors.outputs.story import warn_unreached
from peftlife.search.hunt import SearchResult
from peftlife.search.machine import COVERAGE_LABELS

PAUSE_FLAG_DROPPED = ["explore", "--sut", "mutant:pause_flag_dropped", "--scenario", "kv-pressure"]
PAUSE_FLAG_DROPPED += ["--depth", "4", "--prompt-lens", "4", "--max-new-tokens", "1"]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # main() puts the cwd on sys.path and reports (summary.json too) default to ./peftlife-reports.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def _summary(directory: Path = Path("peftlife-reports")) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "summary.json").read_text("utf-8"))
    return data


def test_explore_the_reference_holds(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = cli.main(["explore", "--scenario", "kv-pressure", "--depth", "2"])
    out = capsys.readouterr().out
    assert code == cli.EXIT_HELD
    assert "no violation up to depth 2" in out and "states" in out


def test_explore_s_progress_counts_the_states_as_they_are_explored(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, int]] = []

    @contextmanager
    def recorded(*args: Any, **kwargs: Any) -> Iterator[Display]:
        assert kwargs["unit"] == "states"
        yield Display(lambda done, iterations, phase: seen.append((done, iterations)))

    monkeypatch.setattr(cli.explore, "progress", recorded)
    assert cli.main(["explore", "--scenario", "kv-pressure", "--depth", "2"]) == cli.EXIT_HELD
    explored = int(capsys.readouterr().out.split("explored ")[1].split()[0])
    told = [done for done, _ in seen]
    assert told and told == sorted(told) and told[-1] == explored


def test_explore_a_mutant_reports_a_shortest_counterexample(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = PAUSE_FLAG_DROPPED
    code = cli.main([*argv, "--report-dir", str(tmp_path), "-q"])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FOUND
    assert "a shortest counterexample has" in out
    assert len(list(tmp_path.glob("mutant_*.json"))) == 1
    # The report's world is explored again from the file: the same length, nothing shorter.
    report = next(tmp_path.glob("mutant_*.json"))
    again = cli.main([*argv, "--world", str(report), "--report-dir", str(tmp_path / "again")])
    assert again == cli.EXIT_FOUND


def test_explore_for_one_invariant_passes_over_the_others(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """pause_flag_dropped breaks ownership at 4 actions here; asked for pages_conserved, the
    exploration looks past that failure, says so, and proves none of its own."""
    argv = [*PAUSE_FLAG_DROPPED, "--report-dir", str(tmp_path)]
    assert cli.main([*argv, "--invariant", "pages_conserved"]) == cli.EXIT_HELD
    out = capsys.readouterr().out
    assert "no violation of pages_conserved up to depth 4" in out
    assert "passed over a failure on ownership_follows_residency at 4 actions" in out
    assert cli.main([*argv, "--invariant", "ownership_follows_residency", "-q"]) == cli.EXIT_FOUND
    assert "a shortest counterexample has 4 actions" in capsys.readouterr().out


# ---- what an exploration leaves for CI ----


def test_an_exploration_that_holds_leaves_its_ci_outputs_one_passing_case(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    step = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    argv = ["explore", "--scenario", "kv-pressure", "--depth", "2", "--junit-xml", "j.xml"]
    assert cli.main(argv) == cli.EXIT_HELD
    out = capsys.readouterr().out
    data = _summary()
    assert (data["command"], data["ok"], data["verdict"]) == ("explore", True, "held")
    assert (data["sut"], data["scenario"], data["depth"], data["max_depth"]) == (
        "reference", "kv-pressure", 2, 2
    )  # fmt: skip
    assert data["complete"] is True and data["finding"] is None and data["findings"] == []
    assert "notes" not in data
    assert f"explored {data['states']} states of reference" in out
    (case,) = ET.parse("j.xml").getroot().iter("testcase")
    assert (case.get("name"), case.get("classname")) == ("kv-pressure", "reference")
    assert case.find("failure") is None
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props == {"peftlife_states": str(data["states"]), "peftlife_depth": "2"}
    text = step.read_text("utf-8")
    assert text.startswith("### peftlife explore: passed")
    assert f"{data['states']} states" in text and "no violation up to depth 2" in text


def test_an_exploration_the_state_limit_stopped_passes_with_a_warning(tmp_path: Path) -> None:
    argv = ["explore", "--scenario", "kv-pressure", "--depth", "4", "--max-states", "20"]
    assert cli.main([*argv, "-q", "--summary", "s.md", "--junit-xml", "j.xml"]) == cli.EXIT_HELD
    data = _summary()
    assert (data["ok"], data["complete"], data["max_depth"]) == (True, False, 4)
    assert data["depth"] < 4
    (warning,) = data["warnings"]
    assert "state limit (20)" in warning and "--max-states" in warning
    assert f"- warning: {warning}" in Path("s.md").read_text("utf-8")
    (case,) = ET.parse("j.xml").getroot().iter("testcase")
    assert case.find("failure") is None


def test_an_exploration_of_a_world_told_nothing_in_flight_notes_that_14_was_not_checked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["explore", "--scenario", "overlap-empty", "--depth", "2", "--summary", "s.md"]
    assert cli.main(argv) == cli.EXIT_HELD
    said = "in_flight_pin (14) is not checked in overlap-empty"
    assert capsys.readouterr().out.count(said) == 1
    (note,) = _summary()["notes"]
    assert note.startswith(said)
    assert Path("s.md").read_text("utf-8").count(f"- note: {said}") == 1


def test_an_exploration_s_counterexample_is_a_junit_failure_with_its_report(
    tmp_path: Path,
) -> None:
    argv = [*PAUSE_FLAG_DROPPED, "-q", "--report-dir", "r", "--junit-xml", "j.xml"]
    assert cli.main([*argv, "--summary", "s.md"]) == cli.EXIT_FOUND
    data = _summary(Path("r"))
    assert (data["ok"], data["verdict"], data["complete"]) == (False, "counterexample", True)
    finding = data["finding"]
    assert data["findings"] == [finding] and finding["known"] is False
    (report,) = Path("r").glob("mutant_*.json")
    assert finding["report"] == str(report) and finding["trace"] in report.name
    # A shortest counterexample: its length is the depth every shorter sequence was tried to.
    assert len(json.loads(report.read_text("utf-8"))["actions"]) == data["depth"]
    root = ET.parse("j.xml").getroot()
    (suite,) = root.iter("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == (
        "peftlife explore", "1", "1"
    )  # fmt: skip
    (case,) = root.iter("testcase")
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message") == f"counterexample: {finding['invariant']}"
    assert (failure.text or "").startswith(f"peftlife counterexample: {finding['invariant']}")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["peftlife_report"] == str(report)
    assert props["peftlife_trace"] == finding["trace"]
    text = Path("s.md").read_text("utf-8")
    assert text.startswith("### peftlife explore: FAILED")
    assert f"(`{finding['invariant']}`)" in text and "violated" in text
    # Exhaustive, so neither a seed nor derandomized: every report says it had none.
    pages = [*Path("r").glob("mutant_*.md"), *Path("r").glob("mutant_*.html")]
    told = [failure.text or "", text, *(p.read_text("utf-8") for p in pages)]
    assert len(told) == 4
    for said in told:
        assert "derandomized" not in said and "none (exhaustive" in said


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["explore", "--depth", "0"], "--depth"),
        (["explore", "--prompt-lens", "four"], "--prompt-lens"),
        (["explore", "--scenario", "nowhere"], "unknown scenario"),
        (["explore", "--invariant", "nowhere"], "peftlife invariants"),
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
    quiet = Console(record=True)
    warn_unreached(everything, quiet)
    assert everything.unreached == () and "never reached" not in quiet.export_text()


def test_a_witness_its_worlds_could_not_reach_is_not_warned_of() -> None:
    paths = Counter(dict.fromkeys(COVERAGE_LABELS[:-4], 1))
    simple = SearchResult("reference", "default", None, 10, 10, 0.1, paths)
    assert simple.unreached == ()
    told_nothing = paths + Counter({"world: overlap executor": 10, "held batch": 1})
    empty = SearchResult("reference", "overlap-empty", None, 10, 10, 0.1, told_nothing)
    assert empty.unreached == ("retiring request", "end-of-sequence in flight")
    told = told_nothing + Counter({"world: in-flight ids told": 10})
    batch = SearchResult("reference", "overlap", None, 10, 10, 0.1, told)
    assert batch.unreached == ("retiring request", "in-flight skip", "end-of-sequence in flight")
    no_pause = Counter({k: v for k, v in paths.items() if not k.startswith("recompute")})
    assert SearchResult("reference", "x", None, 1, 1, 0.1, no_pause).unreached == ()
