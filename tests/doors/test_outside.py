"""Every way a scheduler can break the harness's hold is a finding, at ``check`` and pytest.

Each bad scheduler of ``bad_schedulers`` runs in a subprocess, as a user would
run it, with a one-second deadline: the verdict must be a ``scheduler_protocol``
finding with exit 1, never a hang, a traceback or a silent exit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).parents[1]
# The scheduler's deadline in these runs; a native hang is ended a MARGIN later.
DEADLINE = 1
BAD: dict[str, str | tuple[str, ...]] = {
    "Raising": "schedule_request raised RuntimeError",
    "ReturnsGarbage": "scheduler_protocol",
    "HangsInPython": "did not return within 1",
    "HangsInNativeCode": "could not be interrupted",
    "EndsItsProcess": "ended the process with exit code 3",
    "Segfaults": "crashed the process (was killed by SIGSEGV)",
    # Capped, it meets a MemoryError; on a loaded machine the deadline may come first.
    "AllocatesWithoutBound": ("MemoryError", "did not return within 1"),
}
# Those the outside watchdog turns into a finding: their process ends or is ended.
TAKE_THE_PROCESS_DOWN = ("HangsInNativeCode", "EndsItsProcess", "Segfaults")
# Deadline, margin and a replay: what the slowest verdict may take (a shrink of a
# Python hang waits out several short deadlines).
LIMIT_S = 60


def _told(kind: str, text: str) -> bool:
    """Whether ``text`` says what that kind of bad scheduler did."""
    expected = BAD[kind]
    return any(e in text for e in ((expected,) if isinstance(expected, str) else expected))


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(TESTS),
        "PEFTLIFE_SCHEDULE_DEADLINE": str(DEADLINE),
        "PEFTLIFE_MEMORY_LIMIT_MB": "256",
    }


def _run(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    result = subprocess.run(
        args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=LIMIT_S + 30
    )
    return result, time.monotonic() - start


@pytest.mark.parametrize("kind", sorted(BAD))
def test_check_turns_every_bad_scheduler_into_a_finding(kind: str, tmp_path: Path) -> None:
    result, _ = _run(
        [sys.executable, "-m", "peftlife.doors.cli", "check", "--sut",
         f"bad_schedulers:{kind}", "--max-examples", "20", "--shrink-timeout", "5",
         "--report-dir", str(tmp_path / "reports")],
        tmp_path,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "scheduler_protocol" in out and _told(kind, out), out
    assert "Traceback" not in out, out
    # A scheduler that takes its process down is not shrunk, and the verdict says so.
    if kind in TAKE_THE_PROCESS_DOWN:
        assert "not shrunk (" in out and "shrunk to" not in out, out
    elif kind != "AllocatesWithoutBound":  # capped: a MemoryError, or a hang in Python
        assert "shrunk to" in out and "not shrunk" not in out, out
    (report,) = (p for p in (tmp_path / "reports").glob("*.json") if p.name != "summary.json")
    replayed, _ = _run(
        [sys.executable, "-m", "peftlife.doors.cli", "replay", str(report)], tmp_path
    )
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "scheduler_protocol" in replayed.stdout


@pytest.mark.parametrize("kind", sorted(BAD))
def test_the_pytest_door_turns_every_bad_scheduler_into_a_failed_test(
    kind: str, tmp_path: Path
) -> None:
    (tmp_path / "test_bad.py").write_text(
        "from peftlife import lifecycle_machine\n"
        f"TestBad = lifecycle_machine('bad_schedulers:{kind}', 'default').TestCase\n"
    )
    result, _ = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "--peftlife-profile", "peftlife-ci", "--peftlife-shrink-timeout", "5",
         "--peftlife-report-dir", str(tmp_path / "reports"), "test_bad.py"],
        tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "scheduler_protocol" in result.stdout and _told(kind, result.stdout), result.stdout
    assert "1 failed" in result.stdout


def test_ctrl_c_inside_a_native_hang_is_one_line_and_exit_130(tmp_path: Path) -> None:
    env = {**_env(), "PEFTLIFE_SCHEDULE_DEADLINE": "60"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "peftlife.doors.cli", "check", "-q", "--sut",
         "bad_schedulers:HangsInNativeCode", "--report-dir", str(tmp_path / "reports")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A test run in the background inherits SIGINT ignored; a terminal's Ctrl-C is not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    time.sleep(4)  # imported, searching, and by now inside the hang
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    # The hang lasts 60 s: an exit before it is the interrupt's, whatever the load.
    # How soon (a second or two) is bench/interrupt.py's to measure, not a verdict.
    assert time.monotonic() - start < 45
    assert proc.returncode == 130, out + err
    assert err.strip() == "peftlife: interrupted", err


# ---- Ctrl-C in the middle of a shrink: the case so far is written ----


def _children(pid: int) -> set[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listed:
            return {int(child) for child in listed.read().split()}
    except OSError:
        return set()


def _interrupt_mid_shrink(args: list[str], cwd: Path) -> tuple[int, str, str, float]:
    """Run ``args``, send SIGINT a second into its shrink, and return its exit code,
    stdout, stderr and the seconds from the signal to the exit.

    The shrink is the second child the command forks (the search is the first, under
    the outside watchdog): seeing it is how the test knows the shrink has begun.
    """
    proc = subprocess.Popen(
        args, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    seen: set[int] = set()
    until = time.monotonic() + LIMIT_S
    while len(seen) < 2 and proc.poll() is None and time.monotonic() < until:
        seen |= _children(proc.pid)
        time.sleep(0.02)
    time.sleep(1)
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err, time.monotonic() - start


def _only_report(directory: Path) -> dict[str, object]:
    (report,) = (p for p in directory.glob("*.json") if p.name != "summary.json")
    data: dict[str, object] = json.loads(report.read_text("utf-8"))
    return data


def test_ctrl_c_mid_shrink_writes_the_case_so_far_and_exits_130(tmp_path: Path) -> None:
    code, out, err, _ = _interrupt_mid_shrink(
        [sys.executable, "-m", "peftlife.doors.cli", "check", "-q", "--sut",
         "bad_schedulers:SlowNoReleaseOnSuspend", "--seed", "1", "--shrink-timeout", "0",
         "--report-dir", str(tmp_path / "reports")],
        tmp_path,
    )  # fmt: skip
    assert code == 130, out + err
    assert err.strip() == "peftlife: interrupted", err
    # The interrupt, not the shrink's end, stopped it: the report's note says so.
    report = _only_report(tmp_path / "reports")
    assert "interrupted" in str(report["shrink_note"]), report
    assert "the shrink was interrupted" in out, out
    replayed, _ = _run(
        [sys.executable, "-m", "peftlife.doors.cli", "replay", "-q",
         *map(str, (tmp_path / "reports").glob("bad_*.json"))],
        tmp_path,
    )  # fmt: skip
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr


def test_ctrl_c_mid_shrink_at_the_pytest_door_reports_the_case_so_far(tmp_path: Path) -> None:
    (tmp_path / "test_slow.py").write_text(
        "from peftlife import lifecycle_machine\n"
        "TestSlow = lifecycle_machine('bad_schedulers:SlowNoReleaseOnSuspend').TestCase\n"
    )
    code, out, err, _ = _interrupt_mid_shrink(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "--hypothesis-seed", "1", "--peftlife-shrink-timeout", "0",
         "--peftlife-report-dir", str(tmp_path / "reports"), "test_slow.py"],
        tmp_path,
    )  # fmt: skip
    # pytest's own exit code for an interrupted run; the test failed with its story.
    assert code == 2, out + err
    assert "KeyboardInterrupt" in out and "1 failed" in out, out
    assert "Traceback" not in out + err, out + err
    # The interrupt, not the shrink's end, stopped it: the report's note says so
    # (how soon is bench/interrupt.py's to measure).
    report = _only_report(tmp_path / "reports")
    assert "interrupted" in str(report["shrink_note"]), report


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_stops_the_mutant_gate_at_once(jobs: str, tmp_path: Path) -> None:
    # In one process (--jobs 1) the gate runs its searches itself: Ctrl-C is still Ctrl-C.
    proc = subprocess.Popen(
        [sys.executable, "-m", "peftlife.doors.cli", "mutants", "-q", "--profile", "ci",
         "--jobs", jobs],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    time.sleep(4)  # imported, and the gate under way
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    # A gate left to run ends with 0 or 1: exit 130 with the one line is the interrupt's
    # (how soon is bench/interrupt.py's to measure).
    assert proc.returncode == 130, out + err
    assert err.strip() == "peftlife: interrupted", err
