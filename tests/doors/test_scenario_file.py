"""A user's own scenario file, given by path, is the scenario its finding shrinks in.

The file restricts the world (a draft pool always there) where a mutant whose
defect needs no draft pool fails: the shrinker must keep the case one the file
could generate, searching its alphabet, and the case file must load the scenario
again from anywhere (by its absolute path) so that it replays. A file gone by
then is one line and exit 2.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from peftlife import reports
from peftlife.doors import cli
from peftlife.search import scenarios

MUTANT = "mutant:no_release_on_suspend"
# The shipped draft-pool scenario's text: its draft pool is "on", never "either".
DRAFT_POOL = (Path(scenarios.__file__).parent / "strategies" / "draft-pool.toml").read_text("utf-8")


@attrs.frozen
class Checked:
    code: int
    out: str
    scenario: Path
    report: Path


def _main(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    saved = list(sys.path)  # main puts the cwd on sys.path
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(argv))
    finally:
        sys.path[:] = saved
    return code, out.getvalue() + err.getvalue()


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Checked]:
    """``peftlife check --scenario ./mine.toml`` from the file's folder, run once."""
    root = tmp_path_factory.mktemp("user")
    (root / "mine.toml").write_text(DRAFT_POOL, "utf-8")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        argv = ("check", "--sut", MUTANT, "--scenario", "./mine.toml", "--profile", "ci")
        code, out = _main(*argv, "--report-dir", "r", "-q")
    finally:
        os.chdir(cwd)
    (report,) = (p for p in (root / "r").glob("*.json") if p.name != "summary.json")
    yield Checked(code, out, root / "mine.toml", report)


def test_the_finding_shrinks_within_the_scenario_file(checked: Checked) -> None:
    assert checked.code == cli.EXIT_FOUND, checked.out
    case = reports.load_json(checked.report)
    s = scenarios.load(str(checked.scenario))
    # The file's draft pool is "on": a case without one is not a case it generates.
    assert case.config.draft_device_pages is not None
    assert s.admits_case(case.config, case.actions)
    assert case.scenario == "mine"
    assert case.scenario_path == str(checked.scenario.resolve())


def test_the_case_file_replays_from_another_folder(
    checked: Checked, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out = _main("replay", str(checked.report))
    assert code == cli.EXIT_FOUND, out
    assert "no_release_on_suspend" in out
    # The scenario loads again from the case alone: explore takes its world and actions.
    code, out = _main("explore", "--sut", MUTANT, "--world", str(checked.report), "--depth", "2")
    assert code in (cli.EXIT_HELD, cli.EXIT_FOUND), out


def test_a_case_whose_scenario_file_is_gone_is_one_line_and_exit_2(
    checked: Checked, tmp_path: Path
) -> None:
    data = json.loads(checked.report.read_text("utf-8"))
    data["scenario_path"] = str(tmp_path / "gone" / "mine.toml")
    moved = tmp_path / "case.json"
    moved.write_text(json.dumps(data), "utf-8")
    code, out = _main("replay", str(moved))
    assert code == cli.EXIT_BAD_INPUT
    (line,) = out.strip().splitlines()
    assert str(tmp_path / "gone" / "mine.toml") in line and "does not exist" in line


def test_an_old_case_naming_a_file_by_its_stem_still_replays(
    checked: Checked, tmp_path: Path
) -> None:
    data = json.loads(checked.report.read_text("utf-8"))
    del data["scenario_path"]  # as written before cases recorded their scenario's path
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data), "utf-8")
    code, out = _main("replay", str(old))
    assert code == cli.EXIT_FOUND, out
