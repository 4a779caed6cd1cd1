"""The public API from a scheduler package outside this repository, through both doors.

The author's package lives in a temporary directory with no conftest and no
configuration; it imports only peftlife's public API. The same bug must come
out of ``pytest`` and out of ``peftlife check`` as the same story, each with a
JUnit file CI can read, and the run must leave Hypothesis's own ``ci`` profile
as it was. The two doors' times are printed (and kept in ``times.json``) for the
record; the standards keep timing out of assertions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from peftlife import reports

# The upstream pre-fix defect, written as an author would: suspend forgets the adapter.
BUGGY = '''
from peftlife import Environment, ReferenceScheduler, Request


class Buggy(ReferenceScheduler):
    """Suspends a request's KV but never releases its adapter."""

    def release_on_suspend(self, req: Request) -> None:
        pass


def make_scheduler(env: Environment) -> Buggy:
    return Buggy(env)
'''

MACHINE = """
from peftlife import lifecycle_machine

TestBuggy = lifecycle_machine("buggy_sched:make_scheduler", "default").TestCase
"""

# Runs in the same pytest session as the machine, with the plugin loaded.
PROBE = """
import json

from hypothesis import settings


def test_probe():
    seen = {name: repr(settings.get_profile(name)) for name in ("ci", "default")}
    with open("probe.json", "w") as f:
        json.dump(seen, f)
"""

HYPOTHESIS_ALONE = (
    "import json; from hypothesis import settings; "
    "print(json.dumps({'ci': repr(settings.get_profile('ci')), "
    "'default': repr(settings.get_profile('default'))}))"
)


def _env() -> dict[str, str]:
    drop = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.pop("GITHUB_STEP_SUMMARY", None)
    return env


def _run(argv: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.perf_counter()
    done = subprocess.run(
        argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600, check=False
    )
    return done, time.perf_counter() - start


def _story(report_dir: Path) -> tuple[str, str]:
    """The invariant and the terminal story of the one report in ``report_dir``."""
    (path,) = (p for p in report_dir.glob("*.json") if p.name != "summary.json")
    case = reports.load_json(path)
    outcome = reports.replay(case)
    assert outcome.violations
    return outcome.violations[0].invariant, reports.terminal_text(case, outcome, width=100)


def _junit_cases(path: Path) -> list[ET.Element]:
    return list(ET.parse(path).getroot().iter("testcase"))


@pytest.fixture(scope="module")
def author(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("author")
    (root / "buggy_sched.py").write_text(BUGGY, "utf-8")
    (root / "test_buggy.py").write_text(MACHINE, "utf-8")
    (root / "test_probe.py").write_text(PROBE, "utf-8")
    return root


def test_both_doors_tell_the_same_story(author: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(author))  # the reports replay the author's scheduler here
    pytest_run, pytest_seconds = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--peftlife-profile",
            "ci",
            "--peftlife-report-dir",
            "pytest-reports",
            "--junitxml",
            "pytest-junit.xml",
        ],
        author,
    )
    peftlife = Path(sys.executable).with_name("peftlife")
    check_run, check_seconds = _run(
        [
            str(peftlife),
            "check",
            "--sut",
            "buggy_sched:make_scheduler",
            "--profile",
            "ci",
            "--report-dir",
            "check-reports",
            "--junit-xml",
            "check-junit.xml",
        ],
        author,
    )
    # Two figures per door: the finding itself (the JUnit test case's time: search,
    # shrink, story, reports) and the whole process (interpreter and imports included).
    finding = {
        door: max(float(c.get("time", "0")) for c in _junit_cases(author / f"{door}-junit.xml"))
        for door in ("pytest", "check")
    }
    times = {
        "finding_seconds": finding,
        "process_seconds": {"pytest": round(pytest_seconds, 2), "check": round(check_seconds, 2)},
        "finding_ratio": round(finding["pytest"] / max(finding["check"], 1e-3), 2),
    }
    (author / "times.json").write_text(json.dumps(times), "utf-8")
    print(f"\nnew-user times: {json.dumps(times)}")

    # pytest: one failure (the machine), the probe passes, the story is the message.
    assert pytest_run.returncode == 1, pytest_run.stdout + pytest_run.stderr
    assert "1 failed, 1 passed" in pytest_run.stdout, pytest_run.stdout
    invariant, story = _story(author / "pytest-reports")
    for line in story.splitlines():
        assert line.rstrip() in pytest_run.stdout, line
    for noise in ("ExceptionGroup", "distinct failures", "EngineConfig(", "Traceback"):
        assert noise not in pytest_run.stdout, noise

    # check: exit 1 and the same kind of story, on the same invariant.
    assert check_run.returncode == 1, check_run.stdout + check_run.stderr
    check_invariant, check_story = _story(author / "check-reports")
    assert check_invariant == invariant
    assert check_story.splitlines()[0] == story.splitlines()[0]
    assert f"peftlife counterexample: {invariant}" in check_run.stdout
    assert "SUT buggy_sched:make_scheduler · scenario default" in check_run.stdout

    # Both JUnit files parse and carry the invariant.
    for path in ("pytest-junit.xml", "check-junit.xml"):
        failing = [c for c in _junit_cases(author / path) if c.find("failure") is not None]
        assert len(failing) == 1, path
        props = {p.get("name"): p.get("value") for p in failing[0].iter("property")}
        assert props["peftlife_invariant"] == invariant, path
        assert Path(author / props["peftlife_report"]).is_file(), path

    # Hypothesis's own profiles, seen inside the pytest session, are Hypothesis's.
    alone = subprocess.run(
        [sys.executable, "-c", HYPOTHESIS_ALONE],
        cwd=author,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    inside = json.loads((author / "probe.json").read_text("utf-8"))
    assert inside == json.loads(alone.stdout)
