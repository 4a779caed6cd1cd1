"""The configuration table, and several scenarios and SUTs at once.

``[tool.peftlife]`` in a project's ``pyproject.toml`` is what ``peftlife check``
runs when the command line names nothing; the command line overrides it, the
``PEFTLIFE_*`` limits sit between the two, and a key it does not know is one
line and exit 2. ``--scenario`` and ``--sut`` repeated are honoured (``check``)
or refused with one line, never silently cut to the last.

The runs that must see the limits in the world are subprocesses, as a user runs
``peftlife``: the world reads its deadline once, as it is imported.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from peftlife.doors import cli, config
from peftlife.search import scenarios

ROOT = Path(__file__).parents[2]
# A project's scheduler module: a defect of the catalogue under the issue's name, and
# a scheduler whose first call says which limits its process was started under.
SCHED = """\
import os

from peftlife.sut.mutants import NoReleaseOnSuspend as ForgetsRelease
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world import engine


class TellsItsLimits(ReferenceScheduler):
    def schedule_request(self, *args, **kwargs):
        memory = os.environ.get("PEFTLIFE_MEMORY_LIMIT_MB")
        raise RuntimeError(f"deadline {engine.DEFAULT_SCHEDULE_DEADLINE:g} s, memory {memory} MiB")
"""
VALID = ", ".join(config.BY_NAME)
# ``run_main(cwd, *args)``: peftlife's exit code, stdout and stderr.
Main = Callable[..., tuple[int, str, str]]


def _project(root: Path, table: str, *, pytest_ini: str = "") -> Path:
    """A repository with ``mypkg/sched.py`` and a pyproject.toml holding ``table``."""
    (root / ".git").mkdir()
    (root / "mypkg").mkdir()
    (root / "mypkg" / "__init__.py").write_text("")
    (root / "mypkg" / "sched.py").write_text(SCHED)
    ini = f"\n[tool.pytest.ini_options]\n{pytest_ini}" if pytest_ini else ""
    (root / "pyproject.toml").write_text(f"[tool.peftlife]\n{table}{ini}")
    return root


def _env(**extra: str) -> dict[str, str]:
    """This environment without peftlife's or pytest's variables, under CI (derandomized)."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("PEFTLIFE_", "PYTEST_"))}
    return {**kept, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'tests'}", "CI": "1", **extra}


def _peftlife(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "peftlife.doors.cli", *args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Main:
    """``peftlife ARGS`` in-process in a folder, under CI: its exit code, stdout, stderr."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # main puts the cwd on it
    monkeypatch.setenv("CI", "1")
    for name in (config.DEADLINE_ENV, config.MEMORY_ENV):
        monkeypatch.delenv(name, raising=False)

    def run(cwd: Path, *args: str) -> tuple[int, str, str]:
        monkeypatch.chdir(cwd)
        code = cli.main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


# ---- the table ----


def test_the_issues_table_makes_check_find_the_bug(tmp_path: Path) -> None:
    """Issue 37, item 3: with the SUT in [tool.peftlife], ``peftlife check -q`` checks it,
    from the project's folder and from one below it; the table's report_dir is its own."""
    _project(tmp_path, 'sut = "mypkg.sched:ForgetsRelease"\nreport_dir = "reports"\n')
    (tmp_path / "src").mkdir()
    for cwd in (tmp_path, tmp_path / "src"):
        result = _peftlife(["check", "-q"], cwd)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "counterexample found" in result.stdout
        summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
        (run,) = summary["runs"]
        assert run["sut"] == "mypkg.sched:ForgetsRelease"
        assert run["finding"]["invariant"] == "ownership_follows_residency"


def test_the_command_line_overrides_the_table(tmp_path: Path, run_main: Main) -> None:
    _project(tmp_path, 'sut = "mutant:no_release_on_suspend"\nscenario = "kv-pressure"\n')
    code, out, _ = run_main(tmp_path, "check", "--sut", "reference", "--max-examples", "3")
    assert code == 0, out
    assert "held: " in out and "of reference in scenario kv-pressure" in out


def test_help_shows_the_tables_value_as_the_default_in_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``peftlife check --help`` under a table says what a bare ``check`` will use,
    not peftlife's own defaults (reference, default, peftlife-dev)."""
    table = 'sut = "mypkg.sched:ForgetsRelease"\nscenario = ["kv-pressure", "overlap-loop"]\n'
    _project(tmp_path, table + 'profile = "ci"\nshrink_timeout = 0\n')
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        cli.main(["check", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "(default: mypkg.sched:ForgetsRelease, from [tool.peftlife])" in said
    assert "(default: kv-pressure, overlap-loop, from [tool.peftlife])" in said
    assert "(default: ci, from [tool.peftlife])" in said
    assert "(default: 0, from [tool.peftlife]; 0 for no cap)" in said
    assert "(default: reference)" not in said and "(default: default)" not in said


@pytest.mark.parametrize(
    ("table", "line"),
    [
        ('sutt = "mypkg.sched:ForgetsRelease"\n', "has no key 'sutt'"),
        ('schedule_deadline = "ten"\n',
         "schedule_deadline must be a number of seconds above 0, not 'ten'"),
        ("scenario = 3\n", "scenario must be a string or an array of strings, not 3"),
        ("memory_limit_mb = 0.5\n",
         "memory_limit_mb must be a whole number of MiB, at least 1, not 0.5"),
    ],
)  # fmt: skip
def test_an_unknown_key_or_a_wrong_type_is_one_line_naming_it_and_the_valid_keys(
    tmp_path: Path, run_main: Main, table: str, line: str
) -> None:
    _project(tmp_path, table)
    code, out, err = run_main(tmp_path, "check", "-q")
    assert code == 2 and out == ""
    assert err == (
        f"peftlife: error: {tmp_path / 'pyproject.toml'}: [tool.peftlife] {line}; "
        f"valid keys: {VALID}\n"
    )


def test_a_table_value_that_names_nothing_is_told_with_its_key(
    tmp_path: Path, run_main: Main
) -> None:
    _project(tmp_path, 'scenario = ["kv-pressure", "kv-presure"]\n')
    code, _, err = run_main(tmp_path, "check")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(
        f"peftlife: error: {tmp_path / 'pyproject.toml'}: [tool.peftlife] scenario: "
        "unknown scenario 'kv-presure'"
    )


def test_the_table_is_the_nearest_one_up_to_the_repository_root(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.peftlife]\nsut = "outside"\n')
    repo = tmp_path / "repo"
    (repo / "a" / "b").mkdir(parents=True)
    (repo / ".git").mkdir()
    assert config.find(repo / "a" / "b") is None  # above the repository: not its table
    (repo / "pyproject.toml").write_text('[tool.peftlife]\nsut = "mine"\n')
    # A pyproject.toml without the table is passed over, as pytest and ruff pass it.
    (repo / "a" / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n")
    assert config.find(repo / "a" / "b") == (repo / "pyproject.toml", {"sut": "mine"})


def test_the_limits_come_from_the_command_line_then_the_environment_then_the_table(
    tmp_path: Path,
) -> None:
    """What the world was started under, as the scheduler's first call tells it."""
    table = 'sut = "mypkg.sched:TellsItsLimits"\nschedule_deadline = 3\nmemory_limit_mb = 300\n'
    _project(tmp_path, table)
    runs = {
        "deadline 3 s, memory 300 MiB": ([], {}),
        "deadline 4 s, memory 200 MiB": (["--memory-limit-mb", "200"], {config.DEADLINE_ENV: "4"}),
        "deadline 5 s, memory 300 MiB": (["--schedule-deadline", "5"], {config.DEADLINE_ENV: "4"}),
    }
    for told, (args, env) in runs.items():
        result = _peftlife(["check", "--max-examples", "2", *args], tmp_path, **env)
        assert result.returncode == 1, result.stdout + result.stderr
        assert told in result.stdout, result.stdout


def test_the_tables_deadline_is_the_one_a_hang_is_held_to(tmp_path: Path) -> None:
    _project(tmp_path, 'sut = "bad_schedulers:HangsInPython"\nschedule_deadline = 0.5\n')
    result = _peftlife(["check", "-q", "--max-examples", "1", "--shrink-timeout", "1"], tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    (report,) = (tmp_path / "peftlife-reports").glob("*.md")
    assert "did not return within 0.5 s" in report.read_text()


def test_a_bad_limit_in_the_environment_is_one_line(
    tmp_path: Path, run_main: Main, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(config.MEMORY_ENV, "lots")
    code, _, err = run_main(tmp_path, "replay", "r.json")
    assert code == 2
    assert err == (
        "peftlife: error: PEFTLIFE_MEMORY_LIMIT_MB='lots': "
        "'lots' is not a whole number of MiB of at least 1\n"
    )


def test_the_pytest_door_reads_its_ini_and_its_option_over_it(tmp_path: Path) -> None:
    _project(tmp_path, "", pytest_ini='peftlife_memory_limit_mb = "300"\n')
    (tmp_path / "test_mine.py").write_text(
        "from peftlife import lifecycle_machine\n"
        "TestMine = lifecycle_machine('mypkg.sched:TellsItsLimits').TestCase\n"
    )
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "test_mine.py"]
    for extra, told in (
        ([], "memory 300 MiB"),
        (["--peftlife-memory-limit-mb", "200"], "memory 200 MiB"),
    ):
        result = subprocess.run(
            [*pytest_cmd, *extra],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 1, result.stdout + result.stderr
        assert told in result.stdout, result.stdout


# ---- several scenarios and SUTs ----


def test_a_repeated_scenario_checks_both(tmp_path: Path, run_main: Main) -> None:
    code, out, _ = run_main(
        tmp_path, "check", "--scenario", "kv-pressure", "--scenario", "default",
        "--max-examples", "3", "--report-dir", "r",
    )  # fmt: skip
    assert code == 0, out
    assert "of reference in scenarios kv-pressure, default" in out
    (run,) = json.loads((tmp_path / "r" / "summary.json").read_text())["runs"]
    assert sorted(run["scenario"].split(",")) == ["default", "kv-pressure"]
    assert run["examples"] >= 6 and run["budget"] == 6  # each one spent its own budget


def test_the_groups_name_scenarios_by_their_loop_and_engine() -> None:
    shipped = set(scenarios.shipped_names())
    simple, overlap = set(scenarios.group("simple-loop")), set(scenarios.group("overlap-loop"))
    assert {"default", "kv-pressure"} <= simple and {"overlap", "upstream-defaults"} <= overlap
    assert simple | overlap == shipped and not simple & overlap
    assert set(scenarios.group("trtllm")) == set(scenarios.group("all")) == shipped
    assert not set(scenarios.GROUPS) & shipped  # no group hides a scenario of its name
    assert scenarios.expand(["overlap", "overlap-loop"]) == scenarios.group("overlap-loop")


def test_a_group_is_searched_and_listed(tmp_path: Path, run_main: Main) -> None:
    code, out, _ = run_main(
        tmp_path, "check", "--scenario", "overlap-loop", "--max-examples", "1", "--report-dir", "r"
    )
    assert code == 0, out
    (run,) = json.loads((tmp_path / "r" / "summary.json").read_text())["runs"]
    assert sorted(run["scenario"].split(",")) == scenarios.group("overlap-loop")
    code, out, _ = run_main(tmp_path, "scenarios")
    for name in scenarios.GROUPS:
        assert re.search(rf"\b{name}\b", out)
    with pytest.raises(SystemExit):
        cli.main(["check", "--help"])


def test_check_checks_every_sut_it_is_given(tmp_path: Path, run_main: Main) -> None:
    code, _, _ = run_main(
        tmp_path, "check", "-q", "--sut", "reference", "--sut", "mutant:no_release_on_suspend",
        "--report-dir", "r", "--max-examples", "10",
    )  # fmt: skip
    assert code == 1
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    verdicts = {run["sut"]: run["finding"] for run in summary["runs"]}
    assert verdicts["reference"] is None
    assert verdicts["mutant:no_release_on_suspend"]["invariant"] == "ownership_follows_residency"
    assert "--sut reference --sut mutant:no_release_on_suspend" in summary["rerun"]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["fuzz", "--sut", "reference", "--sut", "mutant:evicts_inflight"],
         "fuzz takes one --sut, not 2 (reference, mutant:evicts_inflight): start one campaign "
         "per scheduler"),
        (["explore", "--sut", "reference", "--sut", "reference"],
         "explore takes one --sut, not 2 (reference, reference): explore one scheduler at a time"),
        (["replay", "r.json", "--sut", "reference", "--sut", "reference"],
         "replay takes one --sut, not 2 (reference, reference): replay on each scheduler in turn"),
        (["diff", "reference", "reference", "--scenario", "default", "--scenario", "overlap"],
         "diff takes one --scenario, not 2 (default, overlap): a diff searches one scenario, "
         "or all: every shipped one taking turns"),
        (["explore", "--scenario", "simple-loop"],
         "explore explores one scenario's world exhaustively, not the group 'simple-loop': "
         "name one scenario ('peftlife scenarios' lists them)"),
    ],
)  # fmt: skip
def test_a_second_value_a_command_cannot_use_is_refused_in_one_line(
    tmp_path: Path, run_main: Main, args: list[str], line: str
) -> None:
    code, out, err = run_main(tmp_path, *args)
    assert (code, out, err) == (2, "", f"peftlife: error: {line}\n")


# ---- the docs ----


def test_the_configuration_page_lists_every_key_option_and_variable() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    for key in config.KEYS:
        assert f"`{key.name}`" in page and f"`{key.option}`" in page, key.name
    used = {
        name
        for folder in ("src", "tests", "bench")
        for path in (ROOT / folder).rglob("*.py")
        for name in re.findall(r"PEFTLIFE_[A-Z_]*[A-Z]", path.read_text())
    }
    assert {config.DEADLINE_ENV, config.MEMORY_ENV} <= used
    assert not {name for name in used if f"`{name}" not in page}
    assert "configuration.md" in (ROOT / "docs" / "README.md").read_text()
    assert "docs/configuration.md" in (ROOT / "README.md").read_text()
