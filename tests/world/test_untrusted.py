"""The scheduler's code is called one way (``peftlife.world.untrusted``), by every caller.

Whatever it raises, ``SystemExit`` and ``KeyboardInterrupt`` included, and a
hang are findings with the scheduler's frames; the output it returns and its
declaration are its code too. Only a SIGINT stops the run.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any, NoReturn

import pytest

from peftlife.doors import cli
from peftlife.search.explore import explore
from peftlife.sut import wired
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world import untrusted
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
from peftlife.world.request import Request


def _raises(err: BaseException) -> Any:
    def scheduler_code() -> NoReturn:
        raise err

    return scheduler_code


@pytest.mark.parametrize(
    "err", [RuntimeError("boom"), SystemExit(3), KeyboardInterrupt("raised, not pressed")]
)
def test_any_raise_is_a_finding_with_the_schedulers_frames(err: BaseException) -> None:
    with pytest.raises(untrusted.Failed) as failed:
        untrusted.call(_raises(err), "schedule_request", deadline=None, arm=True)
    error = failed.value.error
    assert failed.value.cause is err
    assert (error.kind, error.exception) == ("scheduler_raised", type(err).__name__)
    assert error.message.startswith(f"schedule_request raised {type(err).__name__}: ")
    (frame,) = error.frames
    assert frame.endswith("in scheduler_code")


def test_a_hang_is_a_finding() -> None:
    with pytest.raises(untrusted.Failed) as failed:
        untrusted.call(lambda: time.sleep(30), "schedule_request", deadline=0.2, arm=True)
    assert failed.value.error.kind == "scheduler_hung"
    assert failed.value.error.message == "schedule_request did not return within 0.2 s"


def test_a_sigint_while_the_scheduler_runs_stops_the_run() -> None:
    # The test's worker may ignore SIGINT; the user's terminal does not.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            untrusted.call(
                lambda: signal.raise_signal(signal.SIGINT), "a pass", deadline=None, arm=True
            )
        # The handler was only wrapped: Ctrl-C outside the scheduler's code is as before.
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
            time.sleep(1)
    finally:
        signal.signal(signal.SIGINT, previous)


class CtrlCDuringAPass(ReferenceScheduler):
    def schedule_request(self, active: list[Request], inflight: set[int]) -> Any:
        signal.raise_signal(signal.SIGINT)
        return super().schedule_request(active, inflight)


def test_an_engine_started_after_the_handler_changed_lets_ctrl_c_through() -> None:
    # An engine reads the handler once, when it starts: one set before it counts.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        engine = Engine(EngineConfig(), CtrlCDuringAPass)
        engine.submit(prompt_len=4, max_new_tokens=1)
        with pytest.raises(KeyboardInterrupt):
            engine.step()
    finally:
        signal.signal(signal.SIGINT, previous)


# ---- the output the scheduler returns is its code too ----


class HangingOutput(ReferenceScheduler):
    def schedule_request(self, active: list[Request], inflight: set[int]) -> Any:
        return _Hangs()


class _Hangs:
    @property
    def context_requests(self) -> list[Request]:
        time.sleep(30)
        return []


def test_an_output_that_hangs_when_read_is_a_finding() -> None:
    engine = Engine(EngineConfig(), HangingOutput, schedule_deadline=0.2)
    engine.submit(prompt_len=1, max_new_tokens=1)
    snap = engine.step()
    assert snap.step is not None
    (error,) = snap.step.errors
    assert error.kind == "scheduler_hung"
    assert "reading schedule_request's output did not return" in error.message


def test_explore_reports_an_output_that_raises(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["explore", "--sut", "tests.bad_schedulers:OutputRaises", "--depth", "2"]
    code = cli.main([*argv, "--scenario", "kv-pressure", "--report-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_FOUND
    assert "Traceback" not in out + err
    assert "reading schedule_request's output raised RuntimeError: cannot list" in out
    assert "tests/bad_schedulers.py:" in out and "in recompute_paused_requests" in out


# ---- the explorer copies the scheduler: that runs its code ----


def test_a_scheduler_that_cannot_be_copied_is_explored_by_replay() -> None:
    def states(spec: str) -> int:
        result = explore(spec, "kv-pressure", depth=2)
        assert result.held and result.complete
        return result.states

    assert states("tests.bad_schedulers:HoldsALock") == states("reference")


def test_the_explorer_finds_the_same_shortest_failure_by_replay() -> None:
    def shortest(spec: str) -> list[str]:
        failure = explore(spec, "kv-pressure", depth=3).failure
        assert failure is not None
        return [a.describe() for a in failure.run.actions]

    locked = shortest("tests.bad_schedulers:LockedNoReleaseOnSuspend")
    assert locked == shortest("mutant:no_release_on_suspend")


# ---- the wiring check ----


class ScheduleRequestRaises:
    def __init__(self, env: object) -> None:
        pass

    @property
    def schedule_request(self) -> Any:
        raise RuntimeError("no method today")


def test_a_schedule_request_that_raises_when_looked_up_is_left_to_the_search() -> None:
    factory = wired(f"{__name__}:ScheduleRequestRaises")
    engine = Engine(EngineConfig(), factory)
    engine.submit(prompt_len=1, max_new_tokens=1)
    snap = engine.step()
    assert snap.step is not None
    (error,) = snap.step.errors
    assert error.message.startswith("schedule_request raised RuntimeError: no method today")
