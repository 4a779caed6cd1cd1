"""Every door that searches randomly prints the command that finds the same case again.

As a user runs peftlife: no ``CI``, so the random ``dev`` profile, in a fresh
directory or in one whose ``.hypothesis/`` example database already holds an
earlier run's finding. The printed command, run in a fresh directory and in the
populated one, finds the same case (the same invariant, the same shrunk trace):
a command with a seed leaves the database out, as pytest's ``--hypothesis-seed``
does. A finding met replaying the database came from no seed, and says so: the
command it prints replays its report instead.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from peftlife.doors import cli

MUTANT = "mutant:no_release_on_suspend"
SCENARIO = "default"
MACHINE = (
    "from peftlife import lifecycle_machine\n"
    f'TestBug = lifecycle_machine("{MUTANT}", "{SCENARIO}").TestCase\n'
)


def run(folder: Path, line: str) -> tuple[int, str]:
    """A command line as a user types it in ``folder``: outside CI and pytest, wide."""
    folder.mkdir(exist_ok=True)
    (folder / "test_bug.py").write_text(MACHINE, "utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CI"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "300"
    done = subprocess.run(
        ["bash", "-c", line], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )
    return done.returncode, done.stdout + done.stderr


def found(folder: Path) -> set[tuple[str, str]]:
    """The cases written in ``folder``'s report directories: (the report's kind, its trace)."""
    cases = set()
    for path in folder.glob("*/*.json"):
        if path.name != "summary.json":
            data = json.loads(path.read_text("utf-8"))
            trace = json.dumps([data["config"], data["actions"]], sort_keys=True)
            cases.add((data.get("kind", "finding"), trace))
    return cases


def clear_reports(folder: Path) -> None:
    for path in [*folder.glob("peftlife-reports/*"), *folder.glob("r/*")]:
        path.unlink()


# Each door: its command line as a user first types it, and the pattern of the
# line that says how to run it again.
DOORS = {
    "check": (f"peftlife check --sut {MUTANT}", r"rerun with (peftlife check .*--seed \d+)"),
    "check --scenario all": (
        f"peftlife check --sut {MUTANT} --scenario all",
        r"rerun with (peftlife check .*--seed \d+)",
    ),
    "diff": (f"peftlife diff reference {MUTANT}", r"rerun with (peftlife diff .*--seed \d+)"),
    "pytest": (
        "pytest -q -p no:cacheprovider test_bug.py",
        r"rerun with: (pytest \S+ --hypothesis-seed=\d+)",
    ),
}


@pytest.mark.parametrize("door", DOORS)
def test_the_printed_command_finds_the_same_case_in_a_fresh_and_a_populated_directory(
    tmp_path: Path, door: str
) -> None:
    line, rerun_pattern = DOORS[door]
    code, text = run(tmp_path / "first", line)
    assert code == cli.EXIT_FOUND, text
    assert "derandomized" not in text
    rerun = re.search(rerun_pattern, text)
    assert rerun is not None, text
    case = found(tmp_path / "first")
    assert len(case) == 1, case
    # A fresh directory.
    code, again = run(tmp_path / "fresh", rerun.group(1))
    assert code == cli.EXIT_FOUND, again
    assert found(tmp_path / "fresh") == case
    # A directory whose database holds other findings of the same search, saved by
    # random runs there (each with its own seed).
    populated = tmp_path / "populated"
    for _ in range(3):
        run(populated, line)
    assert list(populated.glob(".hypothesis/examples/*")), "nothing saved"
    clear_reports(populated)
    code, again = run(populated, rerun.group(1))
    assert code == cli.EXIT_FOUND, again
    assert found(populated) == case


REPLAYED = r"met replaying the example database|(pytest \S+test_peftlife_\S+\.py)"


@pytest.mark.parametrize("door", ["check", "pytest", "diff"])
def test_a_finding_met_in_the_database_says_so_and_how_to_meet_it_again(
    tmp_path: Path, door: str
) -> None:
    line, _ = DOORS[door]
    run(tmp_path, line)  # saves its finding in the directory's database
    clear_reports(tmp_path)
    code, text = run(tmp_path, line)
    assert code == cli.EXIT_FOUND, text
    assert "met replaying the example database" in text, text
    if door != "diff":  # the story's header says it in place of a seed
        assert "· seed none (met replaying the example database)" in text, text
    case = found(tmp_path)
    assert len(case) == 1
    if door == "diff":
        # No report replays a divergence: the same diff in the same directory meets it.
        command = re.search(r"seed \d+: (peftlife diff .*) \(in this directory\) meets", text)
        assert command is not None and "--seed" not in command.group(1), text
        clear_reports(tmp_path)
        code, again = run(tmp_path, command.group(1))
        assert code == cli.EXIT_FOUND, again
        assert found(tmp_path) == case
        return
    if door == "check":
        command = re.search(r"(peftlife replay \S+) meets it again", text)
        summary = json.loads((tmp_path / "peftlife-reports" / "summary.json").read_text("utf-8"))
        assert command is not None and summary["rerun"] == command.group(1), (summary, text)
    else:
        command = re.search(r"rerun with: (pytest \S+)", text)
    assert command is not None, text
    code, again = run(tmp_path, command.group(1))
    assert code == cli.EXIT_FOUND, again
    story = again[again.index("peftlife counterexample") :]
    invariant = story.splitlines()[0].split(": ")[1]
    assert invariant in text
    # The same steps: the replay's story tells the report's actions.
    first_action = json.loads(next(iter(case))[1])[1][0]
    assert shlex.quote(first_action["kind"]) in story


def test_the_pytest_doors_junit_carries_the_seed_and_the_rerun_it_prints(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    code, text = run(tmp_path, f"{DOORS['pytest'][0]} --junitxml=junit.xml")
    assert code == cli.EXIT_FOUND, text
    rerun = re.search(DOORS["pytest"][1], text)
    assert rerun is not None, text
    case = ET.parse(tmp_path / "junit.xml").getroot().find(".//testcase")
    assert case is not None
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["peftlife_rerun"] == rerun.group(1)
    assert rerun.group(1).endswith(f"--hypothesis-seed={props['peftlife_seed']}")


# The mutant gate, cut to two mutants and two scenarios so that it runs in seconds.
SMALL_GATE = """
import sys
from peftlife.doors import cli
from peftlife.search import gate, scenarios
from peftlife.sut.mutants import BY_NAME

gate.CATALOGUE = (BY_NAME["no_release_on_suspend"], BY_NAME["draft_not_suspended"])
scenarios.shipped_names = lambda: ["default", "draft-pool"]
sys.exit(cli.main(sys.argv[1:]))
"""


def gate_rows(folder: Path) -> list[tuple[object, ...]]:
    data = json.loads((folder / "gate.json").read_text("utf-8"))
    keep = ("mutant", "caught", "scenario", "invariant", "examples", "shrunk_steps")
    return [tuple(row[k] for k in keep) for row in data["rows"]]


def test_a_random_mutant_gate_prints_its_seed_and_its_rerun_gives_the_same_table(
    tmp_path: Path,
) -> None:
    (tmp_path / "gate.py").write_text(SMALL_GATE, "utf-8")
    gate_line = f"python {tmp_path / 'gate.py'} mutants --jobs 1 --json gate.json"
    gate_line += " --junit-xml junit.xml"
    code, text = run(tmp_path / "first", gate_line)
    assert code == 0, text
    rerun = re.search(
        r"seed (\d+): rerun with peftlife mutants --profile peftlife-dev --seed \1", text
    )
    assert rerun is not None, text
    table = gate_rows(tmp_path / "first")
    # Every JUnit case of the gate carries its seed and the command that reruns it.
    import xml.etree.ElementTree as ET

    junit = ET.parse(tmp_path / "first" / "junit.xml").getroot()
    for case in junit.iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props["peftlife_seed"] == rerun.group(1), props
        assert props["peftlife_rerun"].endswith(f"--seed {rerun.group(1)}"), props
    again = f"{gate_line} --profile peftlife-dev --seed {rerun.group(1)}"
    code, text = run(tmp_path / "fresh", again)
    assert code == 0, text
    assert gate_rows(tmp_path / "fresh") == table
    populated = tmp_path / "populated"
    for _ in range(2):
        run(populated, gate_line)
    assert list(populated.glob(".hypothesis/examples/*")), "nothing saved"
    code, text = run(populated, again)
    assert code == 0, text
    assert gate_rows(populated) == table
