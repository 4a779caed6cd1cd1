"""What the command gives CI: JUnit, step summaries, the JSON summary, baselines, progress.

Every run goes through ``cli.main`` as a user's CI job would call ``peftlife``;
the findings come from search (``mutant:no_release_on_suspend`` is found in a
few examples under the ``ci`` profile), never from hand-written steps.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from rich.console import Console

import peftlife
from peftlife.checker import registry
from peftlife.doors import cli, fuzz
from peftlife.doors import outputs as ci
from peftlife.doors.cli import check, mutants
from peftlife.doors.outputs import junit, records, step_summary, unchecked
from peftlife.doors.outputs import summary_json as json_of
from peftlife.doors.outputs.progress import Display, progress
from peftlife.reports import load_json, replay
from peftlife.search import events, gate, scenarios
from peftlife.search.defect import signature
from peftlife.search.machine import COVERAGE_LABELS
from peftlife.search.scenarios import shipped_names
from peftlife.sut.mutants import BY_NAME, CATALOGUE

MUTANT = "mutant:no_release_on_suspend"
FOUND = ["check", "--sut", MUTANT, "--profile", "ci", "-q"]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # main() puts the cwd on sys.path and reports default to ./peftlife-reports.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)


def summary_json(directory: Path = Path("peftlife-reports")) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "summary.json").read_text("utf-8"))
    return data


# ---- JUnit ----


def test_check_writes_junit_with_the_invariant_and_the_report(tmp_path: Path) -> None:
    assert cli.main([*FOUND, "--junit-xml", "out/junit.xml"]) == cli.EXIT_FOUND
    root = ET.parse(tmp_path / "out" / "junit.xml").getroot()
    (case,) = root.iter("testcase")
    assert (case.get("name"), case.get("classname")) == ("default", MUTANT)
    failure = case.find("failure")
    assert failure is not None
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["peftlife_invariant"] in BY_NAME["no_release_on_suspend"].acceptable
    assert Path(props["peftlife_report"]).is_file()
    # The failure's text is the story, the report's name carries the trace hash.
    assert (failure.text or "").startswith("peftlife counterexample:")
    assert props["peftlife_trace"] in props["peftlife_report"]


def test_a_random_run_leaves_its_seed_and_the_command_that_reruns_it(tmp_path: Path) -> None:
    argv = ["check", "--profile", "dev", "--max-examples", "5", "-q", "--junit-xml", "j.xml"]
    assert cli.main(argv) == cli.EXIT_HELD
    data = summary_json()
    seed = data["seed"]
    assert isinstance(seed, int) and "derandomized" not in data
    rerun = "peftlife check --sut reference --scenario default --profile dev --max-examples 5"
    assert data["rerun"] == f"{rerun} --seed {seed}"
    (case,) = ET.parse(tmp_path / "j.xml").getroot().iter("testcase")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert (props["peftlife_seed"], props["peftlife_rerun"]) == (str(seed), data["rerun"])
    # The command searches the same examples again.
    iterations = data["runs"][0]["iterations"]
    assert cli.main([*data["rerun"].split()[1:], "-q"]) == cli.EXIT_HELD
    assert summary_json()["runs"][0]["iterations"] == iterations


def test_a_derandomized_run_says_so_and_only_then(tmp_path: Path) -> None:
    argv = ["check", "--profile", "ci", "--max-examples", "5", "-q", "--junit-xml", "j.xml"]
    assert cli.main(argv) == cli.EXIT_HELD
    data = summary_json()
    assert (data["seed"], data["derandomized"]) == (None, True)
    (case,) = ET.parse(tmp_path / "j.xml").getroot().iter("testcase")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["peftlife_seed"] == "derandomized"
    assert cli.main([*argv, "--seed", "9"]) == cli.EXIT_HELD
    data = summary_json()
    assert data["seed"] == 9 and "derandomized" not in data


def test_a_passing_check_writes_a_passing_junit_case(tmp_path: Path) -> None:
    argv = ["check", "--profile", "dev", "--max-examples", "5", "-q", "--junit-xml", "j.xml"]
    assert cli.main(argv) == cli.EXIT_HELD
    root = ET.parse(tmp_path / "j.xml").getroot()
    (suite,) = root.iter("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("1", "0")
    (case,) = root.iter("testcase")
    assert case.find("failure") is None


# ---- step summary and JSON summary ----


def test_a_passing_run_appends_its_summary_to_the_github_step_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = tmp_path / "step-summary.md"
    step.write_text("earlier step\n", "utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    assert cli.main(["check", "--profile", "ci", "--max-examples", "60", "-q"]) == cli.EXIT_HELD
    text = step.read_text("utf-8")
    assert text.startswith("earlier step\n")  # appended, not overwritten
    assert "peftlife check: passed" in text
    run = summary_json()["runs"][0]
    assert f"| {run['examples']}/60 | {run['iterations']} |" in text
    reached = [label for label in COVERAGE_LABELS if label in run["paths_reached"]]
    assert reached, run
    assert ", ".join(reached) in text


def test_summary_option_wins_and_a_finding_brings_its_report(tmp_path: Path) -> None:
    assert cli.main([*FOUND, "--summary", "s.md"]) == cli.EXIT_FOUND
    text = (tmp_path / "s.md").read_text("utf-8")
    assert "peftlife check: FAILED" in text
    assert "violated" in text  # the Markdown report follows the table


def test_the_json_summary_warns_of_paths_never_reached() -> None:
    # One example, Hypothesis's simplest (every search opens with it): two random ones
    # may reach every path the default scenario's simple loop can take.
    assert cli.main(["check", "--profile", "dev", "--max-examples", "1", "-q"]) == cli.EXIT_HELD
    data = summary_json()
    (run,) = data["runs"]
    never = [label for label in COVERAGE_LABELS if label not in run["paths_reached"]]
    warned = [f"reference in default: path '{label}' never reached" for label in never]
    assert data["warnings"], "one example reached every path; the warning is untested"
    assert data["warnings"] == [w for w in warned if w in data["warnings"]]
    # A path its worlds could not take is not warned of: the default scenario runs
    # the simple loop; whether a recompute pause was possible depends on the draw.
    overlap_only = set(COVERAGE_LABELS[-4:])
    maybe = overlap_only | {"recompute pause", "recompute pause of an active request"}
    assert not any(label in w for w in data["warnings"] for label in overlap_only)
    assert [w for w in warned if not any(f"'{m}'" in w for m in maybe)] == [
        w for w in data["warnings"] if not any(f"'{m}'" in w for m in maybe)
    ]
    assert sum(run["rules"].values()) >= 1


def test_the_budget_of_every_scenario_is_each_scenario_s_examples(tmp_path: Path) -> None:
    argv = ["check", "--scenario", "all", "--max-examples", "3", "-q", "--summary", "s.md"]
    assert cli.main(argv) == cli.EXIT_HELD
    (run,) = summary_json()["runs"]
    budget = 3 * len(shipped_names())
    assert run["budget"] == budget
    assert f"| {run['examples']}/{budget} |" in (tmp_path / "s.md").read_text("utf-8")


# ---- what a run did not check: invariant 14 where the scheduler is told nothing ----

NOT_CHECKED = "in_flight_pin (14) is not checked in overlap-empty"


def test_a_run_in_a_scenario_told_nothing_in_flight_says_once_that_14_was_not_checked(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    argv = ["check", "--scenario", "overlap-empty", "--profile", "ci", "--max-examples", "20"]
    with contextlib.redirect_stdout(out):
        code = cli.main([*argv, "--summary", "s.md"])
    assert code == cli.EXIT_HELD
    assert out.getvalue().count(NOT_CHECKED) == 1
    text = (tmp_path / "s.md").read_text("utf-8")
    assert text.count(NOT_CHECKED) == 1
    assert f"- note: {NOT_CHECKED}" in text
    (note,) = summary_json()["notes"]
    assert note.startswith(NOT_CHECKED)


def test_a_finding_there_says_it_once_too_in_its_own_report(tmp_path: Path) -> None:
    """The finding's story and Markdown carry the world line that says it: no second note."""
    out = io.StringIO()
    argv = ["check", "--sut", "mutant:evicts_retiring", "--scenario", "overlap-empty"]
    with contextlib.redirect_stdout(out):
        code = cli.main([*argv, "--profile", "ci", "--summary", "s.md"])
    assert code == cli.EXIT_FOUND
    said = "in_flight_pin (14) not checked"
    assert out.getvalue().count(said) == 1 and NOT_CHECKED not in out.getvalue()
    text = (tmp_path / "s.md").read_text("utf-8")
    assert text.count(said) == 1 and NOT_CHECKED not in text


def test_a_simple_loop_run_notes_nothing(tmp_path: Path) -> None:
    argv = ["check", "--profile", "ci", "--max-examples", "5", "-q", "--summary", "s.md"]
    assert cli.main(argv) == cli.EXIT_HELD
    assert "note" not in (tmp_path / "s.md").read_text("utf-8")
    assert "notes" not in summary_json()


def test_the_scenarios_not_checked_are_read_from_every_scenario_a_run_searched() -> None:
    told = [scenarios.load(n) for n in shipped_names() if n != "overlap-empty"]
    assert unchecked.not_checked(told) == []
    every = [scenarios.load(n) for n in shipped_names()]
    assert unchecked.not_checked(every) == ["overlap-empty"]
    row = gate.GateRow(
        gate.Kind.REFERENCE,
        "reference @ overlap-empty",
        False,
        "overlap-empty",
        "-",
        True,
        9,
        None,
        0.1,
    )
    markdown = ci.for_gate(gate.Gate((row,)), "ci").markdown
    assert markdown.count(NOT_CHECKED) == 1


# ---- fuzz's campaign and explore's exploration ----


def _read(*names: str) -> tuple[scenarios.Scenario, ...]:
    return tuple(map(scenarios.load, names))


def _defect(move: tuple[str, ...], trace: str, written: bool = True) -> records.Defect:
    report = f"r/{trace}.json" if written else ""
    story = "peftlife counterexample: ownership_follows_residency\n..."
    first = fuzz.Seen(12.3, 480, 1, "kv-pressure", 7)
    return records.Defect(
        "ownership_follows_residency", move, 3, (1, 0), "default", 4, True, trace,
        report, ((trace, report),) if written else (), story, first=first,
        unwritten="" if written else "No space left on device: r",
    )  # fmt: skip


def test_a_campaign_fails_a_case_per_defect_and_crash_and_passes_one_when_held() -> None:
    defects = (_defect(("suspend_request",), "1234abcd"), _defect((), "5678ef00", written=False))
    campaign = records.CampaignSummary(
        "mutant:x", "ci", _read("default", "kv-pressure"), 2, 7, 120, 3.5, 6, defects,
        crashes=("worker 1 died (exit code 3) in scenario default",),
    )  # fmt: skip
    outputs = ci.for_campaign(campaign)
    assert (outputs.command, outputs.summary) == ("fuzz", campaign)
    names = [case.name for case in outputs.cases]
    assert names == [
        "ownership_follows_residency (suspend_request)",
        "ownership_follows_residency (none)",
        "crash 1",
    ]
    assert all(case.failure for case in outputs.cases)
    assert outputs.cases[0].failure == "counterexample: ownership_follows_residency, found 3 times"
    # One report per defect, and where and when it was first met.
    assert "found 3 times, first 12 s, kv-pressure, worker 1; its report: r/1234abcd.json" in (
        outputs.cases[0].details
    )
    props = [dict(case.properties) for case in outputs.cases[:2]]
    assert props[0]["peftlife_first_seen"] == "12 s, kv-pressure, worker 1"
    # A report that could not be written: the case says why, and still fails.
    assert "peftlife_report" not in props[1]
    assert props[1]["peftlife_report_error"] == "not written: No space left on device: r"
    xml = junit.render("peftlife fuzz", outputs.cases)
    assert 'tests="3" failures="3"' in xml
    data = json_of.of(campaign)
    assert data["ok"] is False and data["found"] == 6
    assert [d["reports"] for d in data["defects"]] == [dict(d.reports) for d in defects]
    assert data["defects"][0]["first"] == {
        "seconds": 12.3, "examples": 480, "worker": 1, "scenario": "kv-pressure", "seed": 7
    }  # fmt: skip
    assert data["defects"][1]["report"] is None
    assert data["defects"][1]["not_written"] == "No space left on device: r"
    # Each defect's shortest trace is a finding: the summary is a baseline of the campaign.
    assert [f["trace"] for f in data["findings"]] == ["1234abcd", "5678ef00"]
    assert {f["known"] for f in data["findings"]} == {False}
    assert "- crash: worker 1 died" in outputs.markdown
    assert "| 12 s, kv-pressure, worker 1 | `r/1234abcd.json` |" in outputs.markdown
    assert "not written (No space left on device: r)" in outputs.markdown

    held = attrs.evolve(campaign, found=0, defects=(), crashes=())
    (case,) = ci.for_campaign(held).cases
    assert (case.name, case.classname, case.failure, case.seconds) == ("all", "mutant:x", None, 3.5)
    assert json_of.of(held)["ok"] is True and json_of.of(held)["findings"] == []
    assert "passed (ci profile)" in step_summary.campaign(held)
    assert "notes" not in json_of.of(held) and "note" not in step_summary.campaign(held)


def test_a_campaign_in_a_scenario_told_nothing_in_flight_notes_that_14_was_not_checked() -> None:
    campaign = records.CampaignSummary(
        "reference", "ci", _read("default", "overlap-empty"), 1, 1, 50, 1.0, 0, ()
    )
    (note,) = json_of.of(campaign)["notes"]
    assert note.startswith(NOT_CHECKED)
    assert step_summary.campaign(campaign).count(NOT_CHECKED) == 1
    assert f"- note: {NOT_CHECKED}" in step_summary.campaign(campaign)


def test_an_exploration_is_one_junit_case() -> None:
    held = records.ExplorationSummary("reference", "default", 42, 3, 3, 100, True, 0.5)
    (case,) = ci.for_exploration(held, "", "").cases
    assert (case.name, case.classname, case.failure) == ("default", "reference", None)
    assert json_of.of(held)["findings"] == [] and held.warnings() == []
    finding = records.Finding("drain_completes", "abcd1234", "r/x_abcd1234.json")
    found = attrs.evolve(held, finding=finding)
    outputs = ci.for_exploration(found, "the story", "### the report")
    (case,) = outputs.cases
    assert (case.failure, case.details) == ("counterexample: drain_completes", "the story")
    assert ("peftlife_report", "r/x_abcd1234.json") in case.properties
    assert outputs.markdown.rstrip().endswith("### the report")
    assert json_of.of(found)["findings"] == [attrs.asdict(finding)]


# ---- baseline and excluded invariants ----


def test_a_baseline_of_known_findings_passes_and_a_new_finding_fails(tmp_path: Path) -> None:
    assert cli.main(FOUND) == cli.EXIT_FOUND
    first = summary_json()
    (known,) = first["findings"]
    Path("baseline.json").write_text(json.dumps(first), "utf-8")
    assert cli.main([*FOUND, "--baseline", "baseline.json", "--junit-xml", "j.xml"]) == 0
    again = summary_json()
    assert again["ok"] is True
    assert again["findings"][0] | {"known": False} == known
    assert again["findings"][0]["known"] is True
    (case,) = ET.parse(tmp_path / "j.xml").getroot().iter("testcase")
    assert case.find("failure") is None
    # Another trace of the same invariant is new.
    other = {"findings": [{"invariant": known["invariant"], "trace": "00000000"}]}
    Path("other.json").write_text(json.dumps(other), "utf-8")
    assert cli.main([*FOUND, "--baseline", "other.json"]) == cli.EXIT_FOUND


@pytest.mark.parametrize(
    ("content", "fix"),
    [(None, "No such file"), ("not json", "is not JSON"), ("[]", "'findings' list")],
)
def test_a_bad_baseline_is_exit_2(
    content: str | None, fix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if content is not None:
        Path("b.json").write_text(content, "utf-8")
    assert cli.main([*FOUND, "--baseline", "b.json"]) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert fix in err


def test_an_excluded_invariant_is_searched_past() -> None:
    assert cli.main(FOUND) == cli.EXIT_FOUND
    first = summary_json()["findings"][0]["invariant"]
    argv = [*FOUND, "--exclude-invariant", first]
    assert cli.main(argv) == cli.EXIT_FOUND
    (finding,) = summary_json()["findings"]
    assert finding["invariant"] != first
    # The report tells the same: its replay ignores the excluded invariant too.
    report = json.loads(Path(finding["report"]).read_text("utf-8"))
    assert first not in {v["invariant"] for v in report["violations"]}


def test_keep_going_reports_each_distinct_defect_once_up_to_max_failures(tmp_path: Path) -> None:
    argv = ["check", "--sut", "mutant:draft_not_suspended", "--scenario", "chunked-prefill"]
    argv += ["--profile", "ci", "-q"]
    assert cli.main(argv) == cli.EXIT_FOUND
    (alone,) = summary_json()["findings"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main([*argv, "--max-failures", "3", "--junit-xml", "j.xml"])
    assert code == cli.EXIT_FOUND
    data = summary_json()
    findings = data["findings"]
    # The first is the one a check that stops at it finds; the search went on past it.
    assert len(findings) == 3 and findings[0] == alone
    assert [r["examples"] for r in data["runs"]] == sorted({r["examples"] for r in data["runs"]})
    # Each defect once: no two reports' cases break the invariant by the same calls.
    cases = [load_json(Path(f["report"])) for f in findings]
    named = {signature(replay(case)) for case in cases}
    assert len(named) == 3
    assert out.getvalue().count("counterexample found after") == 3
    assert data["rerun"].endswith("--max-failures 3")
    junit_cases = list(ET.parse(tmp_path / "j.xml").getroot().iter("testcase"))
    stories = set()
    for case, finding in zip(junit_cases, findings, strict=True):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props["peftlife_trace"] == finding["trace"]
        story = case.findtext("failure") or ""
        assert story.startswith(f"peftlife counterexample: {finding['invariant']}")
        stories.add(story)
    assert len(stories) == 3  # each case its own finding's story


def test_an_unknown_invariant_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "--exclude-invariant", "nope"]) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unknown invariant 'nope'" in err
    assert "drain_completes" in err


# ---- the example database ----


def test_a_failure_found_once_is_tried_first_next_time() -> None:
    argv = [
        "check",
        "--sut",
        "mutant:pause_flag_dropped",
        "--scenario",
        "chunked-prefill",
        "--profile",
        "ci",
        "--seed",
        "20261130",
        "--database",
        "db",
        "-q",
    ]
    assert cli.main(argv) == cli.EXIT_FOUND
    first = summary_json()["runs"][0]["examples"]
    assert cli.main(argv) == cli.EXIT_FOUND
    second = summary_json()["runs"][0]["examples"]
    assert second <= 2 < first, (first, second)


# ---- listings, version, help ----


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"peftlife {peftlife.__version__}"


@pytest.mark.parametrize("command", ["check", "mutants", "replay", "fuzz", "explore"])
def test_help_shows_defaults_and_no_markup(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    for argv in (["--help"], [command, "--help"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        out = capsys.readouterr().out
        assert "``" not in out and "(default: None)" not in out
        assert ") (default:" not in out  # a default said once, not twice
    if command == "check":
        assert "(default: peftlife-reports)" in out
        assert "peftlife-ci when CI is set" in " ".join(out.split())
    if command in ("fuzz", "explore"):
        words = " ".join(out.split())
        assert "--junit-xml FILE" in out and "$GITHUB_STEP_SUMMARY" in words
        assert "summary.json go (default: peftlife-reports)" in words


def test_invariants_lists_every_invariant_with_its_meaning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["invariants"]) == cli.EXIT_HELD
    out = capsys.readouterr().out
    for invariant in registry.REGISTRY:
        assert invariant.name in out
        assert invariant.meaning.split()[1] in out
    assert "drain_completes" in out and "the overlap executor" in out


def test_mutants_list_runs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    start = time.perf_counter()
    assert cli.main(["mutants", "--list"]) == cli.EXIT_HELD
    out = capsys.readouterr().out
    for mutant in CATALOGUE:
        assert mutant.name in out
    assert "caught" not in out.split("caught by")[-1]  # no gate verdicts
    print(f"mutants --list took {time.perf_counter() - start:.2f} s")


@pytest.mark.parametrize(
    "argv", [["invariants"], ["mutants", "--list"], ["scenarios"]], ids=" ".join
)
def test_every_table_reads_at_80_columns(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(argv) == cli.EXIT_HELD
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80


def test_the_gate_table_reads_at_80_columns_with_every_column() -> None:
    long = "recompute_pause_keeps_ownership"
    cells = [
        ["reference", "held", "chunked-prefill", "-", "417", "-", "5.0"],
        [long, "yes, unexpected invariant", "tight-lora-cache", "no_scheduler_caused_fault"],
    ]
    cells[1] += ["1102", "11", "22.0"]
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(mutants.gate_table(cells))
    text = out.getvalue()
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    for header in gate.HEADER:
        assert header in text
    for value in ("1102", "11", "22.0", "417"):
        assert value in text


# ---- progress ----


def test_off_a_terminal_a_heartbeat_line_says_the_run_is_alive() -> None:
    stream = io.StringIO()
    console = Console(file=io.StringIO(), force_terminal=False)
    with progress(console, "checking x", 300, show=True, heartbeat=0.02, stream=stream) as tick:
        tick(events.ExamplesRan(12, 40))
        time.sleep(0.2)
    lines = stream.getvalue().splitlines()
    assert lines, "no heartbeat"
    assert lines[-1].startswith("checking x: 12/300 examples, 40 iterations,")


def test_on_a_terminal_a_bar_shows_the_totals() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    with progress(console, "checking x", 300, show=True) as tick:
        tick(events.ExamplesRan(12, 40))
        time.sleep(0.3)
    assert "12/300" in out.getvalue()


def test_while_a_finding_shrinks_the_heartbeat_and_the_bar_say_so() -> None:
    stream = io.StringIO()
    console = Console(file=io.StringIO(), force_terminal=False)
    with progress(console, "checking x", 300, show=True, heartbeat=0.02, stream=stream) as tick:
        tick(events.ExamplesRan(12, 40))
        tick(events.ShrinkStep(replays=7, best_actions=3))
        time.sleep(0.2)
    assert (
        "checking x: 12/300 examples, 40 iterations, shrinking: 7 replays, best 3 actions,"
        in (stream.getvalue().splitlines()[-1])
    )
    stream = io.StringIO()
    with progress(console, "checking x", 300, show=True, heartbeat=0.02, stream=stream) as tick:
        tick(events.ExamplesRan(12, 40))
        tick(events.PhaseStarted("shrinking"))  # before its first step: said at once
        time.sleep(0.2)
    assert "12/300 examples, 40 iterations, shrinking, " in stream.getvalue().splitlines()[-1]
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160, color_system=None)
    with progress(console, "checking x", 300, show=True) as tick:
        tick(events.ShrinkStep(replays=7, best_actions=3))
        time.sleep(0.3)
    assert "shrinking: 7 replays, best 3 actions" in out.getvalue()


@pytest.mark.parametrize("command", ["check", "mutants"])
def test_check_and_the_gate_tell_their_progress_the_shrink_phase(
    command: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    phases: list[str | None] = []

    @contextlib.contextmanager
    def recording(*args: object, **kwargs: object) -> Iterator[Display]:
        yield Display(lambda done, iterations, phase: phases.append(phase))

    monkeypatch.setattr(check, "progress", recording)
    monkeypatch.setattr(mutants, "progress", recording)
    if command == "mutants":
        # One mutant, in this process: the same news a worker process queues.
        monkeypatch.setattr(gate, "CATALOGUE", CATALOGUE[:1])
        monkeypatch.setattr(scenarios, "shipped_names", lambda: ["default"])
        argv = ["mutants", "--profile", "ci", "--jobs", "1"]
        monkeypatch.setattr(gate, "SHRINK_NEWS_EVERY", 0.0)
    else:
        argv = [*FOUND, "--report-dir", str(tmp_path)]
    cli.main(argv)
    assert any(p and "shrinking: " in p and "replays, best" in p for p in phases), phases


def test_quiet_means_no_progress() -> None:
    stream = io.StringIO()
    console = Console(file=io.StringIO(), force_terminal=True)
    with progress(console, "x", 3, show=False, heartbeat=0.01, stream=stream) as tick:
        tick(events.ExamplesRan(1, 1))
        time.sleep(0.05)
    assert stream.getvalue() == ""
    assert console.file.getvalue() == ""  # type: ignore[attr-defined]
