"""Ctrl-C at every door: how long each command takes to end, and what it leaves written.

    python -m bench.interrupt [--out docs/benchmarks.md]

Each door runs as a user runs it, in a fresh directory, and gets a terminal's
Ctrl-C (SIGINT to its whole process group) at two moments:

- inside scheduler code: ``HangsInNativeCode`` (``tests/bad_schedulers.py``)
  stuck in C holding the GIL, with a deadline of a minute so that only Ctrl-C
  can end it (``mutants`` runs only the shipped schedulers: it is stopped in
  the middle of its gate instead);
- during a shrink: ``SlowNoReleaseOnSuspend``, a known defect whose passes take
  20 ms, stopped a second into the shrink of its finding (the moment is read
  off the command: its second supervised child, the end of its search, or the
  line naming the first bad commit, a campaign's heartbeat naming a shrink).

Each row gives the exit code, the seconds from the signal to the exit, whether
stderr is the one line ``peftlife: interrupted`` (pytest prints its own
summary and exits 2), and what the report directory holds. A row is wrong if
the command outlived ``LIMIT_S``, printed a traceback, or exited 0; the exit
code is 1 when any row is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import write_section
from bench.robustness import bisect_repo
from peftlife.world.words import count

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
HEADING = "## Ctrl-C at every door"
# Seconds a command may take to end after Ctrl-C before the row is wrong.
LIMIT_S = 5.0
# Seconds a command may take to reach the moment it is interrupted at.
REACH_S = 120.0
CLI = [sys.executable, "-m", "peftlife.doors.cli"]

# When to interrupt: given the process, its stdout so far and the seconds since it
# started, whether the moment has come.
Moment = Callable[[subprocess.Popen[str], str, float], bool]


@dataclass
class Row:
    door: str
    moment: str
    code: int | None
    seconds: float
    one_line: bool
    traceback: bool
    written: str

    @property
    def ok(self) -> bool:
        return self.code not in (None, 0) and self.seconds < LIMIT_S and not self.traceback

    def cells(self) -> list[str]:
        code = "still running" if self.code is None else f"exit {self.code}"
        mark = "" if self.ok else " **wrong**"
        line = "yes" if self.one_line else "no"
        return [
            self.door,
            self.moment,
            f"{code}{mark}",
            f"{self.seconds:.2f} s",
            line,
            self.written,
        ]


def _children(pid: int) -> set[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listed:
            return {int(child) for child in listed.read().split()}
    except OSError:
        return set()


def after(seconds: float) -> Moment:
    return lambda _proc, _out, elapsed: elapsed > seconds


def nth_child(n: int, then: float = 1.0) -> Moment:
    """``then`` seconds after the command forks its ``n``-th child."""
    seen: set[int] = set()
    since: list[float] = []

    def moment(proc: subprocess.Popen[str], _out: str, elapsed: float) -> bool:
        seen.update(_children(proc.pid))
        if len(seen) >= n and not since:
            since.append(elapsed)
        return bool(since) and elapsed > since[0] + then

    return moment


def first_child_ended(then: float = 1.0) -> Moment:
    """``then`` seconds after the command's first child (its search) has ended."""
    seen: set[int] = set()
    since: list[float] = []

    def moment(proc: subprocess.Popen[str], _out: str, elapsed: float) -> bool:
        now = _children(proc.pid)
        if seen and not (seen & now) and not since:
            since.append(elapsed)
        seen.update(now)
        return bool(since) and elapsed > since[0] + then

    return moment


def line_seen(text: str, then: float = 1.0) -> Moment:
    since: list[float] = []

    def moment(_proc: subprocess.Popen[str], out: str, elapsed: float) -> bool:
        if text in out and not since:
            since.append(elapsed)
        return bool(since) and elapsed > since[0] + then

    return moment


def _written(where: Path) -> str:
    """What the command wrote in its report directory (``reports``)."""
    found = sorted(p for p in (where / "reports").glob("*.json") if p.name != "summary.json")
    if not found:
        return "no report"
    data = json.loads(found[0].read_text("utf-8"))
    actions = len(data.get("actions", data.get("case", {}).get("actions", [])))
    note = data.get("shrink_note") or ("not shrunk" if data.get("shrunk") is False else "")
    said = f"{count(len(found), 'report')}, {count(actions, 'action')}"
    return said + (f" ({note})" if note else "")


def run(
    door: str, moment_name: str, args: list[str], where: Path, moment: Moment, env: dict[str, str]
) -> Row:
    proc = subprocess.Popen(
        args, cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert proc.stdout is not None
    stdout = proc.stdout.fileno()
    out = ""
    start = time.monotonic()
    while proc.poll() is None and time.monotonic() - start < REACH_S:
        if select.select([stdout], [], [], 0)[0]:
            out += os.read(stdout, 1 << 16).decode("utf-8", "replace")
        if moment(proc, out, time.monotonic() - start):
            break
        time.sleep(0.02)
    if proc.poll() is not None:  # it ended before the moment came: nothing was timed
        rest, err = proc.communicate()
        early = "ended before Ctrl-C: " + _written(where)
        traceback = "Traceback" in out + rest + err
        return Row(door, moment_name, proc.returncode, float("nan"), False, traceback, early)
    signalled = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole group
    try:
        rest, err = proc.communicate(timeout=60)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        rest, err = proc.communicate()
        code = None
    seconds = time.monotonic() - signalled
    text = out + rest + err
    one_line = err.strip() == "peftlife: interrupted"
    return Row(door, moment_name, code, seconds, one_line, "Traceback" in text, _written(where))


def _env(deadline: float) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(TESTS),
        "PEFTLIFE_SCHEDULE_DEADLINE": str(deadline),
        "PEFTLIFE_MEMORY_LIMIT_MB": "512",
    }


def _pytest_file(where: Path, kind: str) -> None:
    (where / "test_it.py").write_text(
        "from peftlife import lifecycle_machine\n"
        f"TestIt = lifecycle_machine('bad_schedulers:{kind}').TestCase\n"
    )


PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
          "--hypothesis-seed", "1", "--peftlife-shrink-timeout", "0",
          "--peftlife-report-dir", "reports", "test_it.py"]  # fmt: skip


def hang_rows() -> list[Row]:
    """Ctrl-C while a scheduler hangs in native code holding the GIL."""
    sut = "bad_schedulers:HangsInNativeCode"
    env = _env(60)
    rows = []
    reports = ["--report-dir", "reports"]
    commands: dict[str, tuple[list[str], Moment]] = {
        "check": ([*CLI, "check", "-q", "--sut", sut, "--seed", "1", *reports], after(5)),
        "pytest": (PYTEST, after(7)),
        "explore": ([*CLI, "explore", "-q", "--sut", sut, "--depth", "3", *reports], after(5)),
        "diff": ([*CLI, "diff", "-q", "reference", sut, "--seed", "1", *reports], after(5)),
        "fuzz": (
            [
                *CLI,
                "fuzz",
                "-q",
                "--sut",
                sut,
                "--scenario",
                "default",
                "--workers",
                "1",
                "--seed",
                "1",
                *reports,
            ],
            after(8),
        ),
    }
    for door, (args, moment) in commands.items():
        where = Path(tempfile.mkdtemp(prefix=f"peftlife-int-{door}-"))
        if door == "pytest":
            _pytest_file(where, "HangsInNativeCode")
        rows.append(run(door, "native hang", args, where, moment, env))
    # bisect: the bad end is probed first, and hangs
    where = Path(tempfile.mkdtemp(prefix="peftlife-int-bisect-"))
    good = bisect_repo(where / "repo", "HangsInNativeCode")
    args = [*CLI, "bisect", "--repo", "repo", "--good", good, "--bad", "HEAD", "--scenario",
            "default", "--path", "ourscheduler.py", "--sut-prefix", "ourscheduler:Scheduler",
            *reports]  # fmt: skip
    rows.append(run("bisect", "native hang", args, where, after(5), env))
    # replay: a report of the hang, made with a short deadline, replayed with a long one
    where = Path(tempfile.mkdtemp(prefix="peftlife-int-replay-"))
    subprocess.run([*CLI, "check", "-q", "--sut", sut, "--seed", "1", "--report-dir", "made"],
                   cwd=where, env=_env(1), capture_output=True, timeout=REACH_S)  # fmt: skip
    made = sorted(p for p in (where / "made").glob("*.json") if p.name != "summary.json")
    args = [*CLI, "replay", str(made[0])] if made else [*CLI, "replay", "missing.json"]
    rows.append(run("replay", "native hang", args, where, after(3), env))
    for jobs in ("1", "2"):
        where = Path(tempfile.mkdtemp(prefix="peftlife-int-mutants-"))
        args = [*CLI, "mutants", "-q", "--jobs", jobs, "--profile", "ci"]
        rows.append(run(f"mutants --jobs {jobs}", "mid-gate", args, where, after(6), env))
    return rows


def shrink_rows() -> list[Row]:
    """Ctrl-C a second into the shrink of a finding."""
    sut = "bad_schedulers:SlowNoReleaseOnSuspend"
    env = _env(10)
    reports = ["--report-dir", "reports", "--shrink-timeout", "0"]
    rows = []
    commands: dict[str, tuple[list[str], Moment]] = {
        "check": ([*CLI, "check", "-q", "--sut", sut, "--seed", "1", *reports], nth_child(2)),
        "pytest": (PYTEST, nth_child(2)),
        "diff": (
            [*CLI, "diff", "-q", "reference", sut, "--seed", "1", *reports],
            first_child_ended(),
        ),
    }
    for door, (args, moment) in commands.items():
        where = Path(tempfile.mkdtemp(prefix=f"peftlife-int-{door}-"))
        if door == "pytest":
            _pytest_file(where, "SlowNoReleaseOnSuspend")
        rows.append(run(door, "mid-shrink", args, where, moment, env))
    # fuzz: the heartbeat line names a worker's shrink (every few seconds)
    where = Path(tempfile.mkdtemp(prefix="peftlife-int-fuzz-"))
    args = [*CLI, "fuzz", "--sut", sut, "--scenario", "default", "--workers", "1", "--seed",
            "1", *reports]  # fmt: skip
    rows.append(run("fuzz", "mid-shrink", args, where, line_seen("shrinking:", 0.3), env))
    where = Path(tempfile.mkdtemp(prefix="peftlife-int-bisect-"))
    good = bisect_repo(where / "repo", "SlowNoReleaseOnSuspend")
    args = [*CLI, "bisect", "--repo", "repo", "--good", good, "--bad", "HEAD", "--scenario",
            "default", "--path", "ourscheduler.py", "--sut-prefix", "ourscheduler:Scheduler",
            *reports]  # fmt: skip
    rows.append(run("bisect", "mid-shrink", args, where, line_seen("first bad commit"), env))
    return rows


def section(rows: list[Row], note: str) -> str:
    head = ["door", "Ctrl-C", "exit", "signal to exit", "one line", "what is written"]
    lines = [f"{HEADING} (bench/interrupt.py)", "", note, ""]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    wrong = [r for r in rows if not r.ok]
    lines += ["", f"{len(rows)} rows, {len(wrong)} wrong (slower than {LIMIT_S:g} s, "
              "a traceback or exit 0)."]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.interrupt", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", default=None, help="write the section into this Markdown file")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows = []
    for row in [*hang_rows(), *shrink_rows()]:
        rows.append(row)
        print("interrupt: " + " | ".join(row.cells()), file=sys.stderr, flush=True)
    note = (
        "A terminal's Ctrl-C (SIGINT to the process group); pytest's own exit code for an "
        "interrupted run is 2 and its summary is its own. "
        f"{time.monotonic() - started:.0f} s in all."
    )
    text = section(rows, note)
    print(text)
    if args.out:
        write_section(Path(args.out), HEADING, text)
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
