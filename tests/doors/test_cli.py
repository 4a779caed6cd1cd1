"""The ``peftlife`` command, end to end.

One shrinking ``check`` against ``mutant:no_release_on_suspend`` runs once per
module; its reports are then kept as a regression test, replayed, and compared
across the doors that read them. Every bad-input path must exit 2 with one line
on stderr that says how to fix it. The mutant gate runs on a shrunken
catalogue and a single scenario so it stays quick.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import hypothesis
import pytest

from peftlife import reports as report
from peftlife import sut
from peftlife.doors import cli
from peftlife.search import gate, profiles, scenarios
from peftlife.sut import mutants
from peftlife.sut.mutants import BY_NAME, Mutant
from peftlife.sut.reference import ReferenceScheduler

MUTANT = "mutant:no_release_on_suspend"
SHIPPED = scenarios.shipped_names()
DEFAULT_TOML = (Path(scenarios.__file__).parent / "strategies" / "default.toml").read_text("utf-8")


@attrs.frozen
class Finding:
    """What the one shrinking ``peftlife check`` left behind."""

    code: int
    stdout: str
    directory: Path
    json: Path
    markdown: Path
    test: Path


@pytest.fixture(scope="module")
def finding(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Finding]:
    """``peftlife check --sut mutant:no_release_on_suspend --profile ci``, run once."""
    root = tmp_path_factory.mktemp("check")
    directory = root / "D"
    saved_path, saved_cwd = list(sys.path), os.getcwd()
    out = io.StringIO()
    os.chdir(root)  # main puts the cwd on sys.path; keep the repository out of it
    try:
        with contextlib.redirect_stdout(out):
            argv = ["check", "--sut", MUTANT, "--profile", "ci", "--report-dir", str(directory)]
            code = cli.main(argv)
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
    jsons = sorted(p for p in directory.glob("*.json") if p.name != "summary.json")
    markdowns = sorted(directory.glob("*.md"))
    tests = sorted(directory.glob("test_peftlife_*.py"))
    assert (len(jsons), len(markdowns), len(tests)) == (1, 1, 1), sorted(directory.iterdir())
    yield Finding(code, out.getvalue(), directory, jsons[0], markdowns[0], tests[0])


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # main() prepends the cwd to sys.path on every call, and the dev profile keeps a
    # Hypothesis database in the cwd: run each test in its own directory, path restored.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))


def _subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_CURRENT_TEST"):
        env.pop(name, None)
    return env


def _pytest(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run pytest on one file from its own directory: no repository conftest or pyproject."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", str(path), "-p", "no:cacheprovider", *extra],
        cwd=path.parent,
        env=_subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


# ---- 1. check finds the mutant and writes its reports ----


def test_check_against_the_mutant_exits_1_and_writes_every_report(finding: Finding) -> None:
    assert finding.code == cli.EXIT_FOUND, finding.stdout
    data = json.loads(finding.json.read_text("utf-8"))
    assert data["schema_version"] == report.SCHEMA_VERSION
    assert data["sut"] == MUTANT
    assert data["profile"] == "ci"
    invariant = data["violation"]["invariant"]
    assert invariant in BY_NAME["no_release_on_suspend"].acceptable
    # Shrunk: a person reads it in a minute.
    assert 1 <= len(data["actions"]) <= 12, len(data["actions"])
    markdown = finding.markdown.read_text("utf-8")
    assert f"`{invariant}` violated" in markdown
    # As the report folder was named (here an absolute path): the line runs as written.
    assert f"peftlife replay {finding.json}" in markdown
    assert str(finding.test) in markdown
    # Without -q the story comes first; then a summary line names every report it wrote.
    assert f"peftlife counterexample: {invariant}" in finding.stdout
    assert "counterexample found after" in finding.stdout
    for path in (finding.json, finding.markdown, finding.test):
        assert path.name in finding.stdout.replace("\n", "")


# ---- 2. the kept regression test ----


def test_regression_test_fails_against_the_mutant(finding: Finding) -> None:
    result = _pytest(finding.test)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed" in result.stdout
    invariant = json.loads(finding.json.read_text("utf-8"))["violation"]["invariant"]
    assert invariant in result.stdout


def test_regression_test_passes_against_the_reference(finding: Finding) -> None:
    result = _pytest(finding.test, "--peftlife-sut", "reference")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_regression_test_keeps_the_same_case_as_the_json(finding: Finding) -> None:
    kept = runpy.run_path(str(finding.test))["CASE"]
    assert report.Case.from_json(kept) == report.load_json(finding.json)


# ---- 3. replay ----


def test_replay_exits_1_against_the_recorded_mutant(
    finding: Finding, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["replay", str(finding.json)]) == cli.EXIT_FOUND
    out = capsys.readouterr().out
    invariant = json.loads(finding.json.read_text("utf-8"))["violation"]["invariant"]
    assert f"peftlife counterexample: {invariant}" in out
    assert f"SUT {MUTANT}" in out


def test_replay_exits_0_against_the_reference(
    finding: Finding, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["replay", str(finding.json), "--sut", "reference"]) == cli.EXIT_HELD
    out = capsys.readouterr().out
    assert "every invariant held" in out
    assert "SUT reference" in out


def test_replay_quiet_prints_nothing(finding: Finding, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["replay", "-q", str(finding.json)]) == cli.EXIT_FOUND
    assert capsys.readouterr() == ("", "")


def test_replay_takes_a_glob_of_reports_each_in_turn(
    finding: Finding, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The README passes replay a glob: two findings fail again, each told, exit 1."""
    other = tmp_path / "other.json"
    other.write_text(finding.json.read_text("utf-8"), "utf-8")
    assert cli.main(["replay", str(finding.json), str(other)]) == cli.EXIT_FOUND
    out = capsys.readouterr().out
    assert out.count("peftlife counterexample:") == 2
    assert f"{other}:" in out
    argv = ["replay", str(finding.json), str(other), "--sut", "reference"]
    assert cli.main(argv) == cli.EXIT_HELD


def test_replay_of_a_summary_names_the_findings_to_replay_instead(
    finding: Finding, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _bad_input(capsys, ["replay", str(finding.directory / "summary.json")])
    assert "is a run summary (peftlife check), not a finding" in line
    assert str(finding.json) in line
    assert "schema_version" not in line


def test_replay_of_a_diff_report_says_what_it_is(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "d.json").write_text(
        json.dumps({"diff_schema_version": 1, "sut_a": "reference", "sut_b": MUTANT}), "utf-8"
    )
    line = _bad_input(capsys, ["replay", str(tmp_path / "d.json")])
    assert f"a diff report (reference against {MUTANT}), not a finding" in line
    assert "'peftlife diff'" in line and "schema_version" not in line


def test_the_same_json_replayed_twice_gives_identical_snapshots(finding: Finding) -> None:
    first = report.replay(report.load_json(finding.json))
    second = report.replay(report.load_json(finding.json))
    assert first.entries, "the replay ran no iteration"
    assert first.entries == second.entries
    assert first.violations == second.violations
    assert first.during == second.during


def test_the_written_json_is_what_its_replay_reports(finding: Finding) -> None:
    # The search that found the case, the CLI that wrote it and a later replay agree.
    case = report.load_json(finding.json)
    replayed = json.loads(json.dumps(report.to_json(case, report.replay(case))))
    assert replayed == json.loads(finding.json.read_text("utf-8"))


# ---- 4. bad input: exit 2, one line, with the fix ----


def _bad_input(capsys: pytest.CaptureFixture[str], argv: Sequence[str]) -> str:
    """Run main, expect exit 2 with one 'peftlife: error:' line on stderr; return it."""
    try:
        code = cli.main(list(argv))
    except SystemExit as err:
        pytest.fail(f"peftlife {' '.join(argv)}: SystemExit({err.code}) escaped main")
    except Exception as err:
        pytest.fail(f"peftlife {' '.join(argv)}: crashed with {type(err).__name__}: {err}")
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == cli.EXIT_BAD_INPUT, (code, out, err)
    assert len(lines) == 1, err
    assert lines[0].startswith("peftlife: error:"), err
    assert out == "", out
    return lines[0]


MUTANT_NAMES = tuple(BY_NAME)
COMMANDS = ("check", "mutants", "replay", "scenarios")


@pytest.mark.parametrize(
    ("argv", "hints"),
    [
        pytest.param(["check", "--sut", "bogus"], [sut.FORMS, *MUTANT_NAMES], id="unknown-sut"),
        pytest.param(["check", "--sut", "mutant:nope"], ["'nope'", *MUTANT_NAMES], id="mutant"),
        pytest.param(
            ["check", "--sut", "no_such_package_xyz.schedulers:factory"],
            ["no_such_package_xyz", "sys.path", sut.FORMS],
            id="missing-module",
        ),
        pytest.param(
            ["check", "--sut", "peftlife.sut.reference:NoSuchFactory"],
            ["NoSuchFactory", "Environment -> Scheduler"],
            id="missing-attribute",
        ),
        pytest.param(["check", "--sut", ".relative:factory"], [sut.FORMS], id="relative-module"),
        pytest.param(["check", "--scenario", "nope"], ["'nope'", *SHIPPED], id="scenario"),
        pytest.param(
            ["check", "--profile", "weekly"], ["--profile", "dev", "ci", "nightly"], id="profile"
        ),
        pytest.param(["check", "--seed", "x"], ["--seed", "int", "--help"], id="seed"),
        pytest.param([], ["command", "--help"], id="no-subcommand"),
        pytest.param(["frob"], ["'frob'", *COMMANDS], id="unknown-subcommand"),
        pytest.param(["replay"], ["report", "--help"], id="replay-without-a-file"),
        pytest.param(["mutants", "--jobs", "many"], ["--jobs", "--help"], id="jobs"),
        pytest.param(["mutants", "--jobs", "0"], ["--jobs", "at least 1"], id="no-jobs"),
        pytest.param(["fuzz", "--workers", "0"], ["--workers", "at least 1"], id="no-workers"),
        pytest.param(
            ["explore", "--max-states", "0"], ["--max-states", "at least 1"], id="no-states"
        ),
        pytest.param(
            ["check", "--shrink-timeout", "-1"], ["--shrink-timeout", "0 for no cap"], id="cap"
        ),
        pytest.param(
            ["mutants", "--shrink-timeout", "nan"], ["--shrink-timeout", "seconds"], id="cap-nan"
        ),
        pytest.param(["fuzz", "--seed", "x"], ["--seed", "int", "--help"], id="fuzz-seed"),
        pytest.param(["fuzz", "-q", "--profile", "weekly"], ["--profile", "ci"], id="fuzz-profile"),
        pytest.param(
            ["explore", "--seed", "1"], ["--seed", "peftlife explore --help"], id="not-taken"
        ),
    ],
)
def test_bad_argument(
    capsys: pytest.CaptureFixture[str], argv: list[str], hints: list[str]
) -> None:
    line = _bad_input(capsys, argv)
    for hint in hints:
        assert hint in line, (hint, line)


# A valid value of each common option, as a command line gives it, and as argparse keeps it.
COMMON_VALUES: dict[str, tuple[list[str], object]] = {
    "quiet": (["-q"], True),
    "verbose": (["-v"], True),
    "profile": (["--profile", "ci"], "ci"),
    "seed": (["--seed", "7"], 7),
    "report_dir": (["--report-dir", "out"], "out"),
    "database": (["--database", "db"], "db"),
    "schedule_deadline": (["--schedule-deadline", "2.5"], 2.5),
    "memory_limit_mb": (["--memory-limit-mb", "512"], 512),
}


@pytest.mark.parametrize("command", list(cli.COMMON_OPTIONS))
def test_every_command_takes_the_common_options_that_apply_to_it(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = cli.COMMON_OPTIONS[command]
    positional = {
        "replay": ["report.json"],
        "diff": ["reference", "reference"],
        "bisect": ["--repo", ".", "--good", "a", "--bad", "b", "--scenario", "default"],
    }.get(command, [])
    argv = [command, *positional, *(arg for name in taken for arg in COMMON_VALUES[name][0])]
    args = cli._parser().parse_args(argv)
    assert {name: getattr(args, name) for name in taken} == {
        name: COMMON_VALUES[name][1] for name in taken
    }
    # The others are refused, and the top-level help says which command takes which.
    for name in set(COMMON_VALUES) - set(taken):
        flag = COMMON_VALUES[name][0][0]
        assert flag in _bad_input(capsys, [command, *positional, *COMMON_VALUES[name][0]])
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    help_lines = capsys.readouterr().out.splitlines()
    row = next(line.split() for line in help_lines if line.startswith(f"  {command} "))
    assert row[1:] == [COMMON_VALUES[name][0][0] for name in taken]


def test_missing_scenario_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    line = _bad_input(capsys, ["check", "--scenario", str(missing)])
    assert str(missing) in line
    assert "does not exist" in line
    for name in SHIPPED:
        assert name in line


@pytest.mark.parametrize(
    ("old", "new", "hints"),
    [
        pytest.param(
            "max_requests = 8",
            "",
            ["missing keys ['max_requests']", "[workload]", "valid keys"],
            id="missing-key",
        ),
        pytest.param(
            "device_pages = [1, 10]",
            "device_pages = [10, 1]",
            ["device_pages", "[low, high]", "0 <= low <= high"],
            id="reversed-range",
        ),
        pytest.param(
            "device_pages = [1, 10]",
            'device_pages = [1, "ten"]',
            ["device_pages", "[low, high]"],
            id="non-integer-range",
        ),
        pytest.param(
            'lower_tier = "either"', 'lower_tier = "maybe"', ["on, off, either"], id="switch"
        ),
        pytest.param("[nemesis]", "[nemesis", ["not valid TOML"], id="not-toml"),
        pytest.param(
            "max_requests = 8",
            "max_requests = 8\nmax_request = 9",
            ["unknown keys ['max_request']", "valid keys"],
            id="unknown-key",
        ),
    ],
)
def test_malformed_scenario_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, old: str, new: str, hints: list[str]
) -> None:
    assert old in DEFAULT_TOML
    path = tmp_path / "broken.toml"
    path.write_text(DEFAULT_TOML.replace(old, new), "utf-8")
    line = _bad_input(capsys, ["check", "--scenario", str(path)])
    for hint in hints:
        assert hint in line, (hint, line)


def test_scenario_file_that_is_not_utf8(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(DEFAULT_TOML.encode("utf-8") + b"# caf\xe9\n")
    line = _bad_input(capsys, ["check", "--scenario", str(path)])
    assert str(path) in line or "latin1" in line


def test_replay_of_a_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "gone.json"
    line = _bad_input(capsys, ["replay", str(missing)])
    assert str(missing) in line
    assert "cannot read" in line


@pytest.mark.parametrize(
    ("content", "hints"),
    [
        pytest.param(b"not json at all\n", ["is not JSON", "give a peftlife report"], id="text"),
        pytest.param(b"[1, 2, 3]\n", ["JSON object"], id="array"),
        pytest.param(b'{"schema_version": 99}\n', ["99", "regenerate"], id="schema-version"),
        pytest.param(b'{"schema_version": 1}\n', ["missing", "config"], id="fields-missing"),
        pytest.param(b"\xff\xfe{}\n", ["bad.json"], id="not-utf8"),
    ],
)
def test_replay_of_a_file_that_is_not_a_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, hints: list[str]
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    line = _bad_input(capsys, ["replay", str(path)])
    for hint in hints:
        assert hint in line, (hint, line)


def test_replay_of_a_report_with_an_unknown_action(
    capsys: pytest.CaptureFixture[str], finding: Finding, tmp_path: Path
) -> None:
    # A corrupted action must not silently replay as some other action.
    data = json.loads(finding.json.read_text("utf-8"))
    data["actions"][0]["kind"] = "frobnicate"
    path = tmp_path / "corrupt.json"
    path.write_text(json.dumps(data), "utf-8")
    line = _bad_input(capsys, ["replay", str(path)])
    assert "frobnicate" in line


def test_replay_against_an_unknown_sut(
    capsys: pytest.CaptureFixture[str], finding: Finding
) -> None:
    line = _bad_input(capsys, ["replay", str(finding.json), "--sut", "bogus"])
    assert sut.FORMS in line


def test_report_dir_that_is_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Refused before the search, so a finding is never lost to a bad directory.
    (tmp_path / "reports").write_text("a file, not a directory\n")
    argv = ["check", "--sut", MUTANT, "--profile", "ci", "-q"]
    line = _bad_input(capsys, [*argv, "--report-dir", "reports"])
    assert "'reports' is a file" in line


@pytest.mark.parametrize(
    ("option", "value", "hint"),
    [
        pytest.param("--peftlife-sut", "bogus", sut.FORMS, id="sut"),
        pytest.param("--peftlife-scenario", "nowhere.toml", "does not exist", id="scenario"),
    ],
)
def test_plugin_bad_input_is_a_usage_error_with_one_line(
    tmp_path: Path, option: str, value: str, hint: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", option, value],
        cwd=tmp_path,
        env=_subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert len(lines) == 1, lines
    assert lines[0].startswith("ERROR: peftlife: error:")
    assert hint in lines[0]


# ---- 5. check that holds, scenarios ----


def test_check_reference_quiet_exits_0_and_prints_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["check", "--sut", "reference", "--profile", "dev", "-q", "--report-dir", "out"]
    assert cli.main(argv) == cli.EXIT_HELD
    assert capsys.readouterr() == ("", "")
    # A passing run writes its summary and nothing else, in a folder git ignores.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".gitignore", "summary.json"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text("utf-8"))
    assert summary["ok"] is True
    assert summary["findings"] == []
    (run,) = summary["runs"]
    assert run["verdict"] == "held"
    assert run["budget"] == 40 <= run["examples"]
    assert run["iterations"] > 0


def test_check_accepts_a_scenario_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "my-default.toml"
    path.write_text(DEFAULT_TOML, "utf-8")
    assert cli.main(["check", "--scenario", str(path), "--profile", "dev"]) == cli.EXIT_HELD
    out, err = capsys.readouterr()
    # Off a terminal a run slower than the heartbeat (a loaded machine) adds its lines.
    assert all(line.startswith("checking reference in ") for line in err.splitlines()), err
    assert out.startswith("held: ")
    assert "my-default.toml" in out.replace("\n", "")


def test_scenarios_lists_every_shipped_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["scenarios"]) == cli.EXIT_HELD
    out = capsys.readouterr().out
    assert len(SHIPPED) >= 6
    for name in SHIPPED:
        assert f" {name} " in out, name
    # What each stresses: the start of every description.
    for name in SHIPPED:
        assert scenarios.load(name).description.split()[0] in out


# ---- 6. the mutant gate, on a small catalogue ----


# What the gate tests below read is its verdicts and files, not its budget: the ci
# profile's settings at thirty examples a row. Every mutant they hunt is caught in
# default within eight (the same draws as at three hundred: a hunt's slices take
# their seeds from the scenario and the turn, not from the budget).
GATE_PROFILE = "ci-thirty"


def _gate(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    catalogue: tuple[Mutant, ...],
    *extra: str,
) -> tuple[int, str, dict[str, Any]]:
    known = profiles.get
    thirty = hypothesis.settings(known("ci"), max_examples=30)
    monkeypatch.setattr(
        profiles, "get", lambda name: thirty if name == GATE_PROFILE else known(name)
    )
    monkeypatch.setattr(gate, "CATALOGUE", catalogue)
    for mutant in catalogue:
        monkeypatch.setitem(mutants.BY_NAME, mutant.name, mutant)
    monkeypatch.setattr(scenarios, "shipped_names", lambda: ["default"])
    monkeypatch.setenv("COLUMNS", "200")  # one line per row, whatever the runner's terminal
    path = tmp_path / "gate.json"
    argv = ["mutants", "--profile", GATE_PROFILE, "--jobs", "1", "--no-shrink", "-q"]
    argv += ["--json", str(path)]
    code = cli.main([*argv, *extra])
    out, err = capsys.readouterr()
    assert err == ""
    return code, out, json.loads(path.read_text("utf-8"))


def rows_invariant(data: dict[str, Any], name: str) -> str:
    (row,) = [r for r in data["rows"] if r["mutant"] == name]
    invariant: str = row["invariant"]
    return invariant


def _row_line(out: str, name: str) -> str:
    rows = [line for line in out.splitlines() if f" {name} " in line]
    assert len(rows) == 1, out
    return rows[0]


def test_mutant_gate_passes_when_every_mutant_is_caught(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    names = ("draft_not_suspended", "no_reregister_on_resume")
    catalogue = tuple(BY_NAME[n] for n in names)
    code, out, data = _gate(monkeypatch, capsys, tmp_path, catalogue)
    assert code == cli.EXIT_HELD, out
    assert data["ok"] is True
    rows = {row["mutant"]: row for row in data["rows"]}
    assert set(rows) == {"reference @ default", *names}
    reference = rows["reference @ default"]
    assert (reference["caught"], reference["acceptable"], reference["invariant"]) == (
        False,
        True,
        "-",
    )
    for name in names:
        row = rows[name]
        assert row["caught"] is True
        assert row["acceptable"] is True
        assert row["invariant"] in BY_NAME[name].acceptable
        assert row["scenario"] == "default"
        assert row["examples"] >= 1
        assert row["shrunk_steps"] is None  # --no-shrink
        line = _row_line(out, name)
        assert "yes" in line
        assert "default" in line
        assert "unexpected" not in line
    assert "the reference held and every mutant was caught" in out
    # The gate's table shows on the index page of the directory it was written to.
    index = (tmp_path / "index.html").read_text("utf-8")
    assert "the reference held and every mutant was caught" in index
    assert all(name in index for name in names)


def test_mutant_gate_fails_on_an_uncaught_or_misfiled_mutant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fake = Mutant("fake", ReferenceScheduler, "no defect", "ownership_follows_residency")
    # A real defect, filed under an invariant it does not break first.
    misfiled = attrs.evolve(
        BY_NAME["draft_not_suspended"], name="misfiled", expected="no_phantom_owner"
    )
    misfiled = attrs.evolve(misfiled, also_acceptable=())
    xml, md = tmp_path / "gate.xml", tmp_path / "summary.md"
    extra = ("--junit-xml", str(xml), "--summary", str(md))
    code, out, data = _gate(monkeypatch, capsys, tmp_path, (fake, misfiled), *extra)
    assert code == cli.EXIT_FOUND, out
    # One JUnit test case per mutant and per reference scenario; the two bad ones fail.
    cases = {c.get("name"): c for c in ET.parse(xml).getroot().iter("testcase")}
    assert set(cases) == {"reference@default", "fake", "misfiled"}
    failed = {name for name, c in cases.items() if c.find("failure") is not None}
    assert failed == {"fake", "misfiled"}
    props = {p.get("name"): p.get("value") for p in cases["misfiled"].iter("property")}
    assert props["peftlife_invariant"] == rows_invariant(data, "misfiled")
    summary = md.read_text("utf-8")
    assert "peftlife mutants: FAILED" in summary
    assert "| fake | NO |" in summary
    assert data["ok"] is False
    rows = {row["mutant"]: row for row in data["rows"]}
    assert rows["reference @ default"]["acceptable"] is True
    assert rows["fake"]["caught"] is False
    assert rows["fake"]["invariant"] == "-"
    assert "NO" in _row_line(out, "fake").split()
    assert rows["misfiled"]["caught"] is True
    assert rows["misfiled"]["acceptable"] is False
    assert "unexpected" in _row_line(out, "misfiled")
    assert "the gate FAILED" in out


# ---- what --help says ----


@pytest.mark.parametrize("command", ["check", "diff"])
def test_the_database_default_is_what_each_profile_keeps(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: no database)" not in text
    assert ".hypothesis/ in the working directory under dev and nightly, none under ci" in text
    # What the text says of the profiles is so: Hypothesis's own database, or none.
    assert profiles.get("dev").database is not None
    assert profiles.get("nightly").database is not None
    assert profiles.get("ci").database is None
