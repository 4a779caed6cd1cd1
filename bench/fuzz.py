"""Fuzzing campaigns: how examples per second scale with workers, and how fast a finding travels.

    python -m bench.fuzz [--seconds 20] [--out docs/benchmarks.md]

Prints a Markdown table and puts it in ``--out`` as its fuzzing section, in
place of an earlier one (``make bench`` runs it after ``bench.search``).
Scaling runs ``peftlife fuzz`` against the reference (every example holds, so
the whole duration is search) with 1 and then 2 workers and divides the
totals. The hand-over starts a campaign against a mutant with a directory
database, stops it at its first finding, and times a fresh ``peftlife check``
process pointing at the same database until it has found the bug again.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import write_section

MUTANT = "mutant:no_release_on_suspend"
# The section's heading; an earlier section under it is replaced.
HEADING = "## Fuzzing campaigns"


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "peftlife.doors.cli", *args, "--profile", "ci"]


def examples_per_second(workers: int, seconds: float, directory: Path) -> float:
    out = subprocess.run(
        _command(
            *("fuzz", "--sut", "reference", "--scenario", "all", "--seed", "1"),
            *("--workers", str(workers), "--duration", str(seconds)),
            *("--report-dir", str(directory / f"w{workers}")),
        ),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"(\d+) examples in ([\d.]+) s", out)
    assert found, out
    return int(found.group(1)) / float(found.group(2))


def hand_over(directory: Path) -> tuple[float, int]:
    """Seconds from a campaign's first finding to a fresh check finding it again; its examples."""
    database = str(directory / "db")
    campaign = subprocess.Popen(
        _command(
            *("fuzz", "--sut", MUTANT, "--scenario", "default", "--workers", "1"),
            *("--duration", "120", "--database", database),
            *("--report-dir", str(directory / "campaign")),
        ),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert campaign.stdout is not None
    for line in campaign.stdout:
        if line.startswith("finding: "):
            break
    found_at = time.perf_counter()
    campaign.terminate()
    campaign.wait()
    out = subprocess.run(
        _command(
            *("check", "--sut", MUTANT, "--scenario", "default", "-q"),
            *("--database", database, "--report-dir", str(directory / "check")),
        ),
        capture_output=True,
        text=True,
    ).stdout
    elapsed = time.perf_counter() - found_at
    examples = re.search(r"after (\d+) examples?", out)
    assert examples, out
    return elapsed, int(examples.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fuzz", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of each scaling run")
    parser.add_argument(
        "--out",
        default=None,
        help="put the section in this Markdown file, in place of an earlier one",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        one = examples_per_second(1, args.seconds, directory)
        two = examples_per_second(2, args.seconds, directory)
        seconds, examples = hand_over(directory)
    goal = 1.7
    verdict = "met" if two / one >= goal else f"SHORT by {goal - two / one:.2f}"
    section = "\n".join(
        [
            f"{HEADING} (bench/fuzz.py, {args.seconds:.0f} s per scaling run)",
            "",
            "| fuzzing | figure | goal |",
            "|---|---:|---|",
            f"| examples/s, 1 worker | {one:.0f} | |",
            f"| examples/s, 2 workers | {two:.0f} | |",
            f"| scaling, 2 workers / 1 | {two / one:.2f}x | >= {goal}x: {verdict} |",
            f"| finding to replay in another process | {seconds:.1f} s | |",
            f"| examples the replaying check needed | {examples} | <= 2 |",
        ]
    )
    print(section)
    if args.out:
        write_section(Path(args.out), HEADING, section)


if __name__ == "__main__":
    main()
