"""``keeps_no_state_between_passes`` is read one way: by ``Engine.state_declaration``.

Only the bool ``True`` declares a scheduler stateless, for the drain's livelock
verdict and for the explorer's merging of states alike. Anything else means the
scheduler keeps state, and a declaration that raises or hangs when read is a
``scheduler_protocol`` finding, never a crash of the harness.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from peftlife.checker.drain import drain
from peftlife.doors import cli
from peftlife.search import profiles
from peftlife.search.explore import explore
from peftlife.search.hunt import search
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
from peftlife.world.protocol import SchedulerOutput


class NeverSchedules:
    def __init__(self, env: object) -> None:
        pass

    def schedule_request(self, active_requests: object, inflight: object) -> SchedulerOutput:
        return SchedulerOutput()


def never_schedules(declaration: object) -> type[NeverSchedules]:
    """A scheduler that lists nothing, declaring ``declaration``."""
    return type("Declares", (NeverSchedules,), {"keeps_no_state_between_passes": declaration})


class Raises(NeverSchedules):
    @property
    def keeps_no_state_between_passes(self) -> bool:
        raise RuntimeError("cannot say")


class RaisesAttributeError(NeverSchedules):
    @property
    def keeps_no_state_between_passes(self) -> bool:
        return self.missing  # type: ignore[attr-defined, no-any-return]


class Hangs(NeverSchedules):
    @property
    def keeps_no_state_between_passes(self) -> bool:
        time.sleep(30)
        return True


class AnswersAnything(NeverSchedules):
    """A ``__getattr__`` that makes up every attribute: no declaration is made."""

    def __getattr__(self, name: str) -> Any:
        return "yes"


@pytest.mark.parametrize(
    ("factory", "stateless"),
    [
        (never_schedules(True), True),
        (never_schedules("yes"), False),
        (never_schedules(1), False),
        (never_schedules(False), False),
        (NeverSchedules, False),
        (AnswersAnything, False),
    ],
)
def test_only_the_bool_true_declares_no_state(factory: Any, stateless: bool) -> None:
    declaration = Engine(EngineConfig(), factory).state_declaration()
    assert (declaration.stateless, declaration.error) == (stateless, None)


@pytest.mark.parametrize("factory", [Raises, RaisesAttributeError])
def test_a_declaration_that_raises_is_a_finding(factory: Any) -> None:
    declaration = Engine(EngineConfig(), factory).state_declaration()
    assert not declaration.stateless
    assert declaration.error is not None and declaration.error.kind == "scheduler_raised"
    assert declaration.error.message.startswith("keeps_no_state_between_passes raised ")
    assert "in keeps_no_state_between_passes" in declaration.error.message  # its frame


def test_a_declaration_that_hangs_is_a_finding() -> None:
    engine = Engine(EngineConfig(), Hangs, schedule_deadline=0.2)
    declaration = engine.state_declaration()
    assert not declaration.stateless
    assert declaration.error is not None and declaration.error.kind == "scheduler_hung"


def _drained(factory: Any) -> Any:
    engine = Engine(EngineConfig(), factory)
    engine.submit(prompt_len=1, max_new_tokens=1)
    return drain(engine)


def test_the_drain_calls_a_repeated_world_only_for_true() -> None:
    result = _drained(never_schedules(True))
    (v,) = result.violations
    assert result.iterations == 2
    assert "(the world repeated exactly after 2 drain iterations" in v.found


@pytest.mark.parametrize("declaration", ["yes", 1, False])
def test_the_drain_waits_out_its_bound_for_anything_else(declaration: object) -> None:
    result = _drained(never_schedules(declaration))
    (v,) = result.violations
    assert result.iterations == result.bound
    # Every pass stalls, so past its bound the drain steps on to upstream's count.
    assert v.found.endswith("stalled passes (still live after 1000 iterations)")


def test_a_declaration_that_raises_is_a_protocol_finding_at_the_first_drain_iteration() -> None:
    result = _drained(Raises)
    assert result.iterations == 1
    (v,) = result.violations
    assert (v.invariant, str(v.subject), v.iteration) == ("scheduler_protocol", "the scheduler", 1)
    assert "RuntimeError: cannot say" in v.found


def test_nothing_to_drain_reads_no_declaration() -> None:
    # A finding is told at an iteration: with nothing to drain there is none.
    assert drain(Engine(EngineConfig(), Raises)).violations == ()


def test_the_explorer_merges_states_only_for_true() -> None:
    def states(sut: str) -> int:
        result = explore(sut, "kv-pressure", depth=2)
        assert result.held
        return result.states

    merged = states("reference")
    assert ReferenceScheduler.keeps_no_state_between_passes is True
    tree = states("tests.bad_schedulers:KeepsState")
    assert merged < tree
    assert states("tests.bad_schedulers:SaysYes") == tree


def test_explore_reports_a_declaration_that_raises(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["explore", "--sut", "tests.bad_schedulers:DeclarationRaises", "--depth", "2"]
    code = cli.main([*argv, "--scenario", "kv-pressure", "--report-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_FOUND
    assert "Traceback" not in out + err
    assert "keeps_no_state_between_passes raised RuntimeError: cannot say" in out
    (report,) = (p for p in tmp_path.glob("*.json") if p.name != "summary.json")
    assert "scheduler_protocol" in report.name


def test_check_reports_a_declaration_that_raises(tmp_path: Path) -> None:
    result = search(
        "tests.bad_schedulers:DeclarationRaises",
        "default",
        profiles.for_search(profiles.get("ci"), max_examples=30),
    )
    assert result.failure is not None and result.failure.invariant == "scheduler_protocol"
    # Shrunk, it still has a request to drain: the finding is told at an iteration.
    assert [a.kind for a in result.failure.run.actions] == ["submit"]
