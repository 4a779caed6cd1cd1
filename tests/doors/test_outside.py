"""Every way a scheduler can break the harness's hold is a finding, at ``check`` and pytest.

Each bad scheduler of ``bad_schedulers`` runs in a subprocess, as a user would
run it, with a one-second deadline: the verdict must be a ``scheduler_protocol``
finding with exit 1, never a hang, a traceback or a silent exit.
"""

from __future__ import annotations

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
    result, seconds = _run(
        [sys.executable, "-m", "peftlife.doors.cli", "check", "--sut",
         f"bad_schedulers:{kind}", "--max-examples", "20", "--shrink-timeout", "5",
         "--report-dir", str(tmp_path / "reports")],
        tmp_path,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "scheduler_protocol" in out and _told(kind, out), out
    assert "Traceback" not in out, out
    assert seconds < LIMIT_S
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
    result, seconds = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "--peftlife-profile", "peftlife-ci", "--peftlife-shrink-timeout", "5",
         "--peftlife-report-dir", str(tmp_path / "reports"), "test_bad.py"],
        tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "scheduler_protocol" in result.stdout and _told(kind, result.stdout), result.stdout
    assert "1 failed" in result.stdout
    assert seconds < LIMIT_S


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
    assert time.monotonic() - start < 3
    assert proc.returncode == 130, out + err
    assert err.strip() == "peftlife: interrupted", err
