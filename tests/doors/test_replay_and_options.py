"""A random run can be run again, and Hypothesis's pytest options reach the machines.

``peftlife check`` under the random ``dev`` profile picks a seed of its own, prints
it with the command that reruns it, and writes it to every report; rerunning
that command in a fresh directory finds the same case. "derandomized" is said
only of a run that was. The pytest door does the same with ``--hypothesis-seed``,
and honours ``--hypothesis-profile`` and ``--hypothesis-show-statistics``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from peftlife.doors import cli
from peftlife.search import profiles

MUTANT = "mutant:pause_flag_dropped"
SCENARIO = "kv-pressure"


def _check(folder: Path, *extra: str) -> tuple[int, str, dict[str, object]]:
    """``peftlife check`` as a user runs it, in a fresh ``folder`` (whose example
    database then starts empty)."""
    folder.mkdir()
    argv = ["check", "--sut", MUTANT, "--scenario", SCENARIO, "--report-dir", "r", *extra]
    done = _user_runs(folder, "peftlife.doors.cli", *argv)
    found = [p for p in (folder / "r").glob("*.json") if p.name != "summary.json"]
    data = json.loads(found[0].read_text("utf-8")) if found else {}
    return done.returncode, done.stdout + done.stderr, data


def test_a_random_finding_reports_its_seed_and_its_rerun_reproduces_it(tmp_path: Path) -> None:
    code, text, data = _check(tmp_path / "first", "--profile", "dev")
    assert code == cli.EXIT_FOUND, text
    seed = data["seed"]
    assert isinstance(seed, int)
    assert "derandomized" not in text
    rerun = re.search(r"rerun with (peftlife check .*--seed (\d+))", " ".join(text.split()))
    assert rerun is not None, text
    assert int(rerun.group(2)) == seed
    words = rerun.group(1).split()[2:]  # the printed command, after "peftlife check"
    again_code, again_text, again = _check(tmp_path / "again", *words)
    assert again_code == cli.EXIT_FOUND, again_text
    # The same search: the same first failure, so the same shrunk case.
    assert again["seed"] == seed
    assert (again["actions"], again["config"]) == (data["actions"], data["config"])
    found = re.search(r"found after (\d+) examples?", " ".join(text.split()))
    found_again = re.search(r"found after (\d+) examples?", " ".join(again_text.split()))
    assert found and found_again and found.group(1) == found_again.group(1)


def test_only_a_derandomized_run_says_so(tmp_path: Path) -> None:
    code, text, data = _check(tmp_path / "ci", "--profile", "ci", "-q")
    assert code == cli.EXIT_FOUND, text
    assert data["seed"] is None
    assert profiles.run_seed(profiles.get("ci")) is None
    assert profiles.run_seed(profiles.get("dev")) is not None


def test_the_pytest_door_names_the_seed_that_reruns_it(tmp_path: Path) -> None:
    _machine_test(tmp_path)

    def pytest_run(*extra: str) -> str:
        done = _pytest(tmp_path, *extra)
        assert "1 failed" in done.stdout, done.stdout + done.stderr
        return done.stdout

    first = pytest_run()
    rerun = re.search(r"rerun with: pytest \S+ --hypothesis-seed=(\d+)", first)
    assert rerun is not None, first
    seed = rerun.group(1)
    assert f"seed {seed}" in first
    again = pytest_run(f"--hypothesis-seed={seed}")
    assert f"seed {seed}" in again

    def case(text: str) -> str:
        return text[text.index("peftlife counterexample") : text.index("rerun with")]

    assert case(again) == case(first)


def test_hypothesis_options_apply_to_a_machine(tmp_path: Path) -> None:
    _machine_test(tmp_path)
    done = _pytest(tmp_path, "--hypothesis-profile=peftlife-ci", "--hypothesis-show-statistics")
    text = done.stdout
    assert "1 failed" in text, text + done.stderr
    # The profile asked for, derandomized: no seed to rerun with.
    assert "seed derandomized (peftlife-ci profile)" in text
    assert "rerun with" not in text
    statistics = text[text.index("Hypothesis Statistics") :]
    assert "during generate phase" in statistics
    assert re.search(r"peftlife: \d+ examples, \d+ executor iterations, first failure", statistics)
    assert re.search(r"witnesses reached: \d+ of \d+", statistics)
    assert re.search(r"shrink: \d+ replays", statistics)


def test_statistics_under_dev_tell_each_search_once_with_peftlifes_counts(tmp_path: Path) -> None:
    """Random, in a directory whose database then holds the finding: the second run meets
    it replaying the database, and its statistics say so."""
    _machine_test(tmp_path)
    for run in ("fresh", "database"):
        done = _pytest(tmp_path, "--hypothesis-show-statistics")
        text = done.stdout
        assert "1 failed" in text, text + done.stderr
        statistics = text[text.index("Hypothesis Statistics") : text.index("short test summary")]
        # One block for the one search: the database's replay, when it ran nothing, is no
        # search of its own.
        assert statistics.count("test_bug.py::TestBug::runTest:") == 1, statistics
        phase = "generate" if run == "fresh" else "reuse"
        assert f"during {phase} phase" in statistics, statistics
        counts = re.search(
            r"peftlife: \d+ examples, \d+ executor iterations, first failure after \d+ examples?"
            r"(, replaying the example database)? \(ownership_follows_residency\)",
            statistics,
        )
        assert counts is not None, statistics
        assert bool(counts.group(1)) == (run == "database"), statistics
        assert re.search(r"witnesses reached: \d+ of \d+", statistics)
        assert re.search(r"shrink: \d+ replays, \d+ steps, [\d.]+ s, to \d+ actions?", statistics)


@pytest.mark.parametrize(
    ("verbosity", "shown"), [("verbose", "Test case: "), ("debug", "state.build_world(")]
)
def test_hypothesis_verbosity_shows_each_example_as_for_any_test(
    tmp_path: Path, verbosity: str, shown: str
) -> None:
    _machine_test(tmp_path)
    quiet = _pytest(tmp_path, "-s").stdout
    assert shown not in quiet
    done = _pytest(tmp_path, "-s", f"--hypothesis-verbosity={verbosity}")
    assert "1 failed" in done.stdout, done.stdout + done.stderr
    assert shown in done.stdout


def _machine_test(folder: Path) -> None:
    (folder / "test_bug.py").write_text(
        "from peftlife import lifecycle_machine\n"
        f'TestBug = lifecycle_machine("{MUTANT}", "{SCENARIO}").TestCase\n',
        "utf-8",
    )


def _pytest(folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _user_runs(folder, "pytest", "-q", "test_bug.py", "-p", "no:cacheprovider", *extra)


def _user_runs(folder: Path, module: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m module argv`` as a user runs it: in ``folder``, outside CI and pytest."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CI"))}
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("given", [None, 5])
def test_a_given_seed_is_kept(given: int | None) -> None:
    chosen = profiles.run_seed(profiles.get("dev"), given)
    assert chosen == given if given is not None else isinstance(chosen, int)
