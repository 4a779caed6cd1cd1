"""How often each command line the README and the guide promise something of does it
under the random ``dev`` profile, as a user runs it.

    python -m bench.examples [--runs 20] [--only TEXT] [--out FILE]

Each example is a command block read from the page itself (README.md's "Test
your scheduler", its ``diff`` and ``explore`` lines, docs/diff.md's and
docs/bisect.md's worked examples, docs/skeleton.md's "Try it"), run line by line
``--runs`` times, each time in a fresh directory holding what the page says it
holds (the skeleton as ``mypkg/sched.py``, ``mypkg/twice.py``, the bisect
page's ``sched-repo``), without ``CI``: the ``dev`` profile, a fresh seed each
time. A line behaves as written when its exit code is the one its comment
promises (0 when it promises none, 1 for a ``diff`` or ``explore`` line the page
shows finding something) and what the page says it prints is printed. With
``--out`` the table goes to that Markdown file as its own section
(``write_section``). Not part of ``make test`` nor of ``make bench``: a few
minutes at the default 20 runs.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from bench import write_section

ROOT = Path(__file__).resolve().parents[1]
SKELETON = ROOT / "docs" / "examples" / "skeleton.py"
HEADING = "## The documented examples under dev"


def blocks(page: str) -> list[str]:
    return [body for _, body in re.findall(r"```(\w*)\n(.*?)```", page, flags=re.S)]


def block_lines(page: str, first: str) -> list[str]:
    """The lines of the page's command block that begins with ``first``."""
    text = (ROOT / page).read_text("utf-8")
    (body,) = [b for b in blocks(text) if b.startswith(first)]
    return [line for line in body.splitlines() if line.strip()]


def promised_exit(line: str, default: int = 0) -> int:
    said = re.search(r"exit (\d)", line.partition("#")[2])
    return int(said[1]) if said else default


# What a line must print besides its exit code: (page, a line's start) -> check of stdout.
Check = Callable[[str], bool]


@attrs.frozen
class Example:
    """A page's command block: its lines, how to set up a directory, what each must print."""

    name: str
    lines: list[str]
    setup: Callable[[Path], None]
    prints: dict[int, Check] = attrs.field(factory=dict)
    exits: dict[int, int] = attrs.field(factory=dict)

    def expected_exit(self, index: int) -> int:
        return self.exits.get(index, promised_exit(self.lines[index]))


def readme_setup(folder: Path) -> None:
    text = (ROOT / "README.md").read_text("utf-8")
    (test_file,) = [b for b in blocks(text) if b.startswith("# test_scheduler.py")]
    (folder / "mypkg").mkdir()
    (folder / "mypkg" / "sched.py").write_text(SKELETON.read_text("utf-8"), "utf-8")
    (folder / "test_scheduler.py").write_text(test_file, "utf-8")


def diff_setup(folder: Path) -> None:
    text = (ROOT / "docs" / "diff.md").read_text("utf-8")
    (source,) = [b for b in blocks(text) if b.startswith("# mypkg/twice.py")]
    (folder / "mypkg").mkdir()
    (folder / "mypkg" / "__init__.py").write_text("", "utf-8")
    (folder / "mypkg" / "twice.py").write_text(source, "utf-8")


def bisect_setup(folder: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from tests import bisect_repo

    bisect_repo.build(folder / "sched-repo")


def flat(text: str) -> str:
    """Text with its line breaks and runs of spaces as single spaces: a long line wraps."""
    return " ".join(text.split())


def skeleton_warning() -> str:
    """The warning docs/skeleton.md says ``check`` prints after the skeleton held."""
    text = (ROOT / "docs" / "skeleton.md").read_text("utf-8")
    return next(b for b in blocks(text) if b.startswith("warning: ")).strip()


def nothing(folder: Path) -> None:
    pass


def examples() -> list[Example]:
    readme = block_lines("README.md", "pytest -q test_scheduler.py")
    diff_page = block_lines("docs/diff.md", "peftlife diff reference mutant:")
    return [
        Example(
            "README: Test your scheduler",
            readme,
            readme_setup,
            prints={
                0: lambda out: "1 passed" in out,
                3: lambda out: "every invariant held" not in out,
                4: lambda out: "every invariant held" in out,
            },
        ),
        Example(
            "README: diff",
            block_lines("README.md", "peftlife diff reference mutant:")[:1],
            nothing,
            exits={0: 1},
        ),
        Example(
            "README: explore",
            block_lines("README.md", "peftlife explore")[:1],
            nothing,
            exits={0: 1},
        ),
        Example(
            "docs/diff.md: worked example",
            diff_page,
            diff_setup,
            prints={
                0: lambda out: (
                    "A reference: every invariant held" in out
                    and "breaks ownership_follows_residency" in out
                ),
                2: lambda out: out.startswith("same: "),
            },
        ),
        Example(
            "docs/bisect.md: worked example",
            block_lines("docs/bisect.md", "peftlife check --sut trtllm:sched-repo"),
            bisect_setup,
            prints={
                1: lambda out: "first bad commit:" in out and "Scheduler: leave the adapter" in out,
                2: lambda out: "first bad commit:" in out and "Scheduler: leave the adapter" in out,
            },
        ),
        Example(
            "docs/skeleton.md: Try it",
            block_lines("docs/skeleton.md", "peftlife check --sut docs.examples.skeleton"),
            nothing,
            prints={0: lambda out: out.startswith("held: ") and skeleton_warning() in flat(out)},
        ),
    ]


@attrs.define
class Tally:
    example: str
    line: str
    expected: int
    runs: int = 0
    as_written: int = 0
    # Each way it misbehaved, with its count: "exit 0", "output".
    misses: dict[str, int] = attrs.field(factory=dict)
    seconds: float = 0.0


def user_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CI"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)  # docs.examples.skeleton, as from the checkout's root
    env["COLUMNS"] = "100"
    return env


def run_example(example: Example, tallies: list[Tally], env: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="peftlife-example-") as tmp:
        folder = Path(tmp)
        example.setup(folder)
        for index, line in enumerate(example.lines):
            tally = tallies[index]
            start = time.perf_counter()
            done = subprocess.run(
                ["bash", "-c", line],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            tally.seconds += time.perf_counter() - start
            tally.runs += 1
            miss = None
            if done.returncode != tally.expected:
                miss = f"exit {done.returncode}"
            elif (check := example.prints.get(index)) and not check(done.stdout):
                miss = "output"
            if miss is None:
                tally.as_written += 1
            else:
                tally.misses[miss] = tally.misses.get(miss, 0) + 1
                # What it printed, for finding out why (the table only counts).
                told = (done.stdout + done.stderr)[-3000:]
                print(f"--- {example.name}: {line}: {miss}\n{told}", file=sys.stderr)


def table(tallies: list[Tally], runs: int, seconds: float) -> str:
    rows = [
        HEADING,
        "",
        f"`python -m bench.examples --runs {runs}`: each command block below, read from its page, "
        f"run {runs} times in fresh directories without `CI` (the random `dev` profile, a new "
        f"seed each time), {seconds:.0f} s in all. A line behaves as written when it exits as "
        "its comment promises and prints what the page says it prints.",
        "",
        "| example | line | exit | as written | misses | s per run |",
        "|---|---|---|---|---|---|",
    ]
    for t in tallies:
        line = t.line.partition("  #")[0].strip()
        misses = ", ".join(f"{k} x{v}" for k, v in t.misses.items()) or "-"
        rows.append(
            f"| {t.example} | `{line}` | {t.expected} | {t.as_written}/{t.runs} | {misses} "
            f"| {t.seconds / max(1, t.runs):.1f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.examples", description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", default=None, help="only the examples whose name has TEXT")
    parser.add_argument("--out", type=Path, default=None, help="a Markdown file to write to")
    args = parser.parse_args(argv)
    env = user_env()
    chosen = [e for e in examples() if args.only is None or args.only in e.name]
    start = time.perf_counter()
    tallies: list[Tally] = []
    for example in chosen:
        mine = [
            Tally(example.name, line, example.expected_exit(i))
            for i, line in enumerate(example.lines)
        ]
        for run in range(args.runs):
            run_example(example, mine, env)
            print(f"{example.name}: run {run + 1}/{args.runs}", file=sys.stderr, flush=True)
        tallies += mine
    text = table(tallies, args.runs, time.perf_counter() - start)
    print(text)
    if args.out is not None:
        write_section(args.out, HEADING, text)
    return 0 if all(t.as_written == t.runs for t in tallies) else 1


if __name__ == "__main__":
    sys.exit(main())
