"""One seed, one scenario, one SUT: the same case whichever door started the run.

The pytest plugin (its ``peftlife_search`` fixture), the command line and a
replay of the saved JSON must agree byte for byte on the world, the actions,
every snapshot and the violation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from peftlife import reports as report
from peftlife.doors import cli

SUT, SCENARIO, SEED = "mutant:pause_flag_dropped", "default", 20261130

# The parts of a report that describe what happened, not how the run was started.
STORY = ("sut", "scenario", "config", "actions", "during", "violation", "violations", "steps")


def story_of(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text("utf-8"))
    return {key: data[key] for key in STORY}


def test_pytest_command_line_and_replay_agree(tmp_path: Path) -> None:
    cli_dir, plugin_dir = tmp_path / "cli", tmp_path / "plugin"
    code = cli.main(
        [
            "check",
            "--sut",
            SUT,
            "--scenario",
            SCENARIO,
            "--profile",
            "ci",
            "--seed",
            str(SEED),
            "--report-dir",
            str(cli_dir),
            "-q",
        ]
    )
    assert code == 1
    (cli_json,) = (p for p in cli_dir.glob("*.json") if p.name != "summary.json")

    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "test_door.py").write_text(
        "def test_door(peftlife_search):\n"
        f"    peftlife_search({SUT!r}, {SCENARIO!r}, seed={SEED})\n",
        "utf-8",
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_door.py",
            "--peftlife-profile",
            "ci",
            "--peftlife-report-dir",
            str(plugin_dir),
        ],
        cwd=inner,
        capture_output=True,
        check=False,
    )
    (plugin_json,) = plugin_dir.glob("*.json")

    replayed = report.replay(report.load_json(cli_json))
    replay_story = {k: report.to_json(report.load_json(cli_json), replayed)[k] for k in STORY}
    assert story_of(cli_json) == story_of(plugin_json) == replay_story
