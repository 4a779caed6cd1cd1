"""The worked examples of docs/diff.md and docs/bisect.md run as written.

As with the README's example (``test_docs.py``), each page's command block is
extracted from the page itself and run line by line in a fresh directory, as a
user runs it: without ``CI``, so under the random ``dev`` profile; each line's
exit code is the one its comment promises (0 when it promises none). Output a
page shows verbatim is that of a derandomized run, and is compared with one.
``python -m bench.examples`` runs the same lines over many seeds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests import bisect_repo
from tests.docs.test_docs import ROOT, blocks, expected_exit

DIFF = (ROOT / "docs" / "diff.md").read_text("utf-8")
BISECT = (ROOT / "docs" / "bisect.md").read_text("utf-8")


def commands(page: str, first: str) -> list[str]:
    (block,) = [body for _, body in blocks(page) if body.startswith(first)]
    return [line for line in block.splitlines() if line.strip()]


def run_lines(lines: list[str], cwd: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("CI", None)  # as a user runs them: the dev profile, a fresh seed each time
    env["COLUMNS"] = "100"  # as the pages show the output
    outputs = []
    for line in lines:
        run = subprocess.run(
            ["bash", "-c", line],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert run.returncode == expected_exit(line), f"{line}\n{run.stdout}\n{run.stderr}"
        outputs.append(run.stdout)
    return outputs


def test_the_diff_example_runs_as_written(tmp_path: Path) -> None:
    (source,) = [body for lang, body in blocks(DIFF) if body.startswith("# mypkg/twice.py")]
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("", "utf-8")
    (tmp_path / "mypkg" / "twice.py").write_text(source, "utf-8")
    lines = commands(DIFF, "peftlife diff reference mutant:")
    assert len(lines) == 3
    outputs = run_lines(lines, tmp_path)
    assert "A reference: every invariant held" in outputs[0]
    assert "breaks ownership_follows_residency" in outputs[0]
    assert list((tmp_path / "reports").glob("diff_*.html"))
    assert outputs[2].startswith("same: ")
    # A random run: its seed, and the command that finds the divergence again.
    assert re.search(r"seed \d+: rerun with peftlife diff .* --seed \d+", outputs[0])
    # The page shows the first command's output as a derandomized run prints it.
    (shown,) = [body for _, body in blocks(DIFF) if body.startswith("peftlife divergence at")]
    (derandomized,) = run_lines([lines[0].replace("  #", " --profile peftlife-ci  #", 1)], tmp_path)
    printed = [line.rstrip() for line in derandomized.splitlines()]
    assert shown.splitlines() == printed[: len(shown.splitlines())]


def test_the_bisect_example_runs_as_written(tmp_path: Path) -> None:
    shas = bisect_repo.build(tmp_path / "sched-repo")
    lines = commands(BISECT, "peftlife check --sut trtllm:sched-repo")
    assert len(lines) == 3
    outputs = run_lines(lines, tmp_path)
    for out in outputs[1:]:
        assert f"first bad commit: {shas[4]} {bisect_repo.SUBJECTS[4]}" in out
    assert "skip" in outputs[1] and "log_once" in outputs[1]
    # The page shows the second command's output: its lines are the ones it prints.
    shown = [body for _, body in blocks(BISECT) if body.startswith("bisecting ")]

    # The case is the nightly run's, found from a fresh seed each time: the report's
    # header names that seed, and its verdict names the request, the adapter and the
    # iteration of that run's shrunk case, as the page says.
    def pattern(line: str) -> str:
        if " · seed " in line:
            return (
                re.escape(line.partition(" · seed ")[0]) + r" · seed \d+ \(peftlife-dev profile\)"
            )
        said = re.escape(line)
        return re.sub(r"\d+", r"\\d+", said) if line.startswith("✗") else said

    missing = [
        line
        for line in shown[0].splitlines()
        if line and line.strip() != "..." and not re.search(pattern(line), outputs[1])
    ]
    assert shown and not missing, (missing, outputs[1])


def test_the_readmes_diff_and_explore_lines_find_what_the_readme_says(tmp_path: Path) -> None:
    """The first ``diff`` line compares the reference with a mutant (a divergence: exit 1),
    and ``explore`` reports "a shortest counterexample" for a mutant (exit 1)."""
    readme = (ROOT / "README.md").read_text("utf-8")
    (diff_line,) = commands(readme, "peftlife diff reference mutant:")[:1]
    (explore_line,) = commands(readme, "peftlife explore")
    for line in (diff_line, explore_line):
        (out,) = run_lines([f"{line}  # exit 1"], tmp_path)
        assert "peftlife divergence at" in out or "peftlife counterexample" in out, out
