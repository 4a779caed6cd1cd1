"""``peftlife check --max-failures N``: each distinct defect told and written once, up to N per SUT.

The scheduler ``two_defects:TwoDefects`` holds two catalogue defects; the check
must find both by search (no invariant named, none excluded), in one run.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from peftlife.doors import cli
from peftlife.reports import load_json, replay
from peftlife.search.defect import signature

TWO = "tests.doors.two_defects:TwoDefects"
ONE = "mutant:no_release_on_suspend"
# The two defects' first invariants: the catalogue's for each mutant composed.
BOTH = {"ownership_follows_residency", "output_lists_well_formed"}


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def _check(*argv: str) -> tuple[int, str, dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["check", "--scenario", "default", "--profile", "ci", *argv])
    summary = json.loads(Path("peftlife-reports/summary.json").read_text("utf-8"))
    return code, out.getvalue(), summary


def test_a_check_stops_at_its_first_defect_by_default() -> None:
    code, _, summary = _check("--sut", TWO, "-q")
    assert code == cli.EXIT_FOUND
    assert len(summary["findings"]) == 1


def test_two_defects_are_each_told_and_written_once() -> None:
    code, out, summary = _check("--sut", TWO, "--max-failures", "4", "--junit-xml", "j.xml")
    assert code == cli.EXIT_FOUND
    findings = summary["findings"]
    # Both defects, found by search: each one's invariant, and no defect twice.
    assert {f["invariant"] for f in findings} == BOTH
    named = [signature(replay(load_json(Path(f["report"])))) for f in findings]
    assert len(set(named)) == len(findings) == 2
    assert len({f["report"] for f in findings}) == 2
    assert out.count("counterexample found after") == 2
    assert f"{TWO}: 2 distinct defects (up to --max-failures 4)" in out
    assert summary["rerun"].endswith("--max-failures 4")
    # A JUnit case and failure per defect, each with its own story.
    cases = list(ET.parse("j.xml").getroot().iter("testcase"))
    assert len(cases) == 2
    for case, finding in zip(cases, findings, strict=True):
        story = case.findtext("failure") or ""
        assert story.startswith(f"peftlife counterexample: {finding['invariant']}")
        assert story.count("peftlife counterexample:") == 1


def test_max_failures_applies_to_each_sut() -> None:
    argv = ["--sut", TWO, "--sut", ONE, "--max-failures", "2", "--max-examples", "30", "-q"]
    code, _, summary = _check(*argv)
    assert code == cli.EXIT_FOUND
    per_sut = Counter(run["sut"] for run in summary["runs"] if run.get("finding"))
    # The first SUT's two do not use up the second's: each is searched up to N.
    assert per_sut[TWO] == 2
    assert 1 <= per_sut[ONE] <= 2
    assert len(summary["findings"]) == per_sut.total()


def test_max_failures_must_be_a_whole_number(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "--max-failures", "0"]) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--max-failures: '0' is not a whole number of at least 1" in err
