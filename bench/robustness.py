"""Robustness: every kind of bad scheduler through every door that takes a scheduler.

    python -m bench.robustness [--quick] [--deadline 2] [--out docs/benchmarks.md]

Each bad scheduler of ``tests/bad_schedulers.py`` (raises, returns garbage,
hangs in Python, hangs in native code holding the GIL, ends its process,
segfaults, allocates without bound) goes through ``check``, the pytest door
(a ``lifecycle_machine`` test file), ``explore``, ``diff`` (against the
reference), ``bisect`` (a repository whose third commit of four brings the bad
scheduler in), ``fuzz`` and ``replay`` (of the report ``check`` wrote), each as
a user runs it: a process of its own in a fresh directory, with the scheduler's
deadline set short (``PEFTLIFE_SCHEDULE_DEADLINE``) and the supervised
child's memory capped (``PEFTLIFE_MEMORY_LIMIT_MB``). A watchdog ends a cell
that outlives its bound. Each cell gives the exit code, the seconds to the
verdict and what the report holds (its invariant and what was found).

A cell is wrong if it hung, printed a traceback, or did not give its door's
verdict on a finding: exit 1 everywhere but ``bisect``, whose verdict on a
named first bad commit is exit 0, and which must name the commit that brought
the bad scheduler in. Any other exit is a verdict of its own, and wrong: 2 (bad
input), pytest's 3 or 4 (an internal or usage error), a signal. The exit code is
1 when any cell is wrong. ``mutants`` is not a column: it runs only the shipped
reference and mutants.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench import write_section
from peftlife.search import diff

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
KINDS = (
    "Raising",
    "ReturnsGarbage",
    "HangsInPython",
    "HangsInNativeCode",
    "EndsItsProcess",
    "Segfaults",
    "AllocatesWithoutBound",
)
DOORS = ("check", "pytest", "explore", "diff", "bisect", "fuzz", "replay")
HEADING = "## Robustness: bad schedulers at every door"
# Seconds a fuzz cell's campaign may run (its --duration).
FUZZ_S = 40
# Wall seconds past the deadline a cell may take before it counts as a hang.
WATCHDOG_S = 120.0
PARALLEL = 2
# Every door's exit code on a finding (bisect's, on the first bad commit named, is 0).
FOUND = 1


@dataclass
class Cell:
    kind: str
    door: str
    code: int | None  # None: ended by the watchdog
    seconds: float
    traceback: bool
    report: str
    # The cell's own directory (a replay reads the check cell's report there).
    where: Path | None = None
    # Whether the door gave its verdict on a finding (bisect: named the right commit).
    verdict: bool = True

    @property
    def ok(self) -> bool:
        verdict = 0 if self.door == "bisect" else FOUND
        return self.code == verdict and self.verdict and not self.traceback

    def text(self) -> str:
        code = "HANG" if self.code is None else f"exit {self.code}"
        mark = "" if self.ok else " **wrong**"
        return f"{code}, {self.seconds:.1f} s, {self.report}{mark}"


def _command(kind: str, door: str, where: Path, quick: bool) -> list[str]:
    sut = f"bad_schedulers:{kind}"
    cli = [sys.executable, "-m", "peftlife.doors.cli"]
    reports = ["--report-dir", str(where / "reports")]
    examples = "10" if quick else "40"
    if door == "check":
        return [*cli, "check", "--sut", sut, "--max-examples", examples,
                "--shrink-timeout", "10", *reports]  # fmt: skip
    if door == "pytest":
        (where / "test_bad.py").write_text(
            "from peftlife import lifecycle_machine\n"
            f"TestBad = lifecycle_machine({sut!r}, 'default').TestCase\n"
        )
        return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "--peftlife-profile", "peftlife-ci", "--peftlife-shrink-timeout", "10",
                "--peftlife-report-dir", str(where / "reports"), "test_bad.py"]  # fmt: skip
    if door == "explore":
        return [*cli, "explore", "--sut", sut, "--scenario", "default", "--depth", "3", *reports]
    if door == "diff":
        return [*cli, "diff", "reference", sut, "--max-examples", examples,
                "--shrink-timeout", "10", *reports]  # fmt: skip
    if door == "bisect":
        repo = where / "repo"
        good = bisect_repo(repo, kind)
        return [*cli, "bisect", "--repo", str(repo), "--good", good, "--bad", "HEAD",
                "--scenario", "default", "--max-examples", examples,
                "--path", "ourscheduler.py", "--sut-prefix", "ourscheduler:Scheduler",
                "--shrink-timeout", "10", *reports]  # fmt: skip
    if door == "fuzz":
        # A campaign spends its whole budget, finding or not: one whose every example
        # waits out a hang is held to a duration, as a campaign in CI is.
        return [*cli, "fuzz", "-q", "--sut", sut, "--scenario", "default", "--workers", "1",
                "--max-examples", examples, "--duration", str(FUZZ_S), "--seed", "1",
                *reports]  # fmt: skip
    raise ValueError(door)


# The scheduler file at each commit of a bisect cell's repository: the reference,
# a harmless edit, the bad scheduler (the first bad commit), another harmless edit.
_SCHED = "from peftlife.sut.reference import ReferenceScheduler as Scheduler\n"
BAD_COMMIT = "Scheduler: the new pass"
_COMMITS = (
    ("Scheduler: the reference", _SCHED),
    ("Scheduler: say where it comes from", "# The reference, for now.\n" + _SCHED),
    (BAD_COMMIT, "# The new pass.\nfrom bad_schedulers import {kind} as Scheduler\n"),
    (
        "Scheduler: say what it is",
        "# The new pass, in use.\nfrom bad_schedulers import {kind} as Scheduler\n",
    ),
)


def bisect_repo(repo: Path, kind: str) -> str:
    """A repository whose third of four commits brings ``kind`` in; its first commit."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@example.com",
           "GIT_COMMITTER_NAME": "A", "GIT_COMMITTER_EMAIL": "a@example.com"}  # fmt: skip

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    repo.mkdir(parents=True)
    git("init", "--quiet")
    for subject, text in _COMMITS:
        (repo / "ourscheduler.py").write_text(text.format(kind=kind), "utf-8")
        git("add", "ourscheduler.py")
        git("commit", "--quiet", "-m", subject)
    return git("rev-list", "--max-parents=0", "HEAD")


def _report(where: Path) -> str:
    """What the first JSON report of a cell holds: its invariant and what was found."""
    found = sorted(p for p in (where / "reports").glob("*.json") if p.name != "summary.json")
    if not found:
        return "no report"
    data = json.loads(found[0].read_text("utf-8"))
    if divergence := data.get("divergence"):  # a diff report
        cells = ", ".join(str(diff.Cell(**cell)) for cell in divergence.get("cells", ()))
        return f"divergence at iteration {divergence.get('iteration')}: {cells}"[:90]
    violation = (data.get("violations") or [{}])[0]
    return f"{violation.get('invariant', '?')}: {violation.get('found', '?')}"[:90]


def run_cell(kind: str, door: str, deadline: float, quick: bool, check_dir: Path | None) -> Cell:
    where = Path(tempfile.mkdtemp(prefix=f"peftlife-robust-{kind}-{door}-"))
    if door == "replay":
        found = sorted(
            p for p in ((check_dir or where) / "reports").glob("*.json") if p.name != "summary.json"
        )
        if not found:
            return Cell(kind, door, 0, 0.0, False, "no check report to replay", where)
        args = [sys.executable, "-m", "peftlife.doors.cli", "replay", str(found[0])]
        report_of = check_dir or where
    else:
        args = _command(kind, door, where, quick)
        report_of = where
    env = {
        **os.environ,
        "PYTHONPATH": str(TESTS),
        "PEFTLIFE_SCHEDULE_DEADLINE": str(deadline),
        "PEFTLIFE_MEMORY_LIMIT_MB": "512",
    }
    start = time.monotonic()
    try:
        done = subprocess.run(
            args, cwd=where, env=env, capture_output=True, text=True,
            timeout=deadline + WATCHDOG_S, start_new_session=True,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        seconds = time.monotonic() - start
        return Cell(kind, door, None, seconds, False, "ended by the watchdog", where)
    seconds = time.monotonic() - start
    text = done.stdout + done.stderr
    named = door != "bisect" or ("first bad commit: " in text and BAD_COMMIT in text)
    return Cell(
        kind, door, done.returncode, seconds, "Traceback" in text, _report(report_of), where, named
    )


def table(kinds: tuple[str, ...], deadline: float, quick: bool) -> dict[tuple[str, str], Cell]:
    cells: dict[tuple[str, str], Cell] = {}

    def first(kind: str, door: str) -> Cell:
        cell = run_cell(kind, door, deadline, quick, None)
        print(f"robustness: {kind} at {door}: {cell.text()}", file=sys.stderr, flush=True)
        return cell

    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = {(k, d): pool.submit(first, k, d) for k in kinds for d in DOORS if d != "replay"}
        for key, future in futures.items():
            cells[key] = future.result()
    for kind in kinds:  # a replay of the report check wrote
        cell = run_cell(kind, "replay", deadline, quick, cells[kind, "check"].where)
        print(f"robustness: {kind} at replay: {cell.text()}", file=sys.stderr, flush=True)
        cells[kind, "replay"] = cell
    return cells


def section(cells: dict[tuple[str, str], Cell], kinds: tuple[str, ...], note: str) -> str:
    lines = [f"{HEADING} (bench/robustness.py)", "", note, ""]
    lines.append("| scheduler | " + " | ".join(DOORS) + " |")
    lines.append("|---|" + "---|" * len(DOORS))
    for kind in kinds:
        lines.append(f"| {kind} | " + " | ".join(cells[kind, d].text() for d in DOORS) + " |")
    wrong = [c for c in cells.values() if not c.ok]
    lines += [
        "",
        f"{len(cells)} cells, {len(wrong)} wrong (hung, a traceback, or not the door's verdict: "
        "exit 1, and for bisect exit 0 naming the commit that brought the bad scheduler in).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.robustness", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer examples per cell")
    parser.add_argument("--deadline", type=float, default=2.0, help="the scheduler's deadline")
    parser.add_argument("--kind", action="append", choices=KINDS, help="only these (repeatable)")
    parser.add_argument("--out", default=None, help="write the section into this Markdown file")
    args = parser.parse_args(argv)
    kinds = tuple(args.kind or KINDS)
    started = time.monotonic()
    cells = table(kinds, args.deadline, args.quick)
    note = (
        f"Deadline {args.deadline:g} s (PEFTLIFE_SCHEDULE_DEADLINE), supervised child capped "
        f"at 512 MiB over the parent; each cell: exit code, seconds to the verdict, the "
        f"report's invariant and what it found. {time.monotonic() - started:.0f} s in all."
    )
    text = section(cells, kinds, note)
    print(text)
    if args.out:
        write_section(Path(args.out), HEADING, text)
    return 0 if all(c.ok for c in cells.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
