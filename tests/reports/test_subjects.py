"""Every rendering marks the rows a violation is about, and the same ones: its subject's.

For each invariant of the catalogue, every shape of subject it can give (a request
with its adapter as context, a scheduled request, a request that ended, an
adapter, the drain's live requests, a pool or the batch, which mark no row) is
built from the checker's own test worlds, then told as the story (which the
terminal and the Markdown render) and as the HTML timeline. Both must mark
exactly the rows named by the violations' ``requests`` and ``adapters``.
"""

from __future__ import annotations

import attrs
import pytest
from tests.builders import (
    BREAKS,
    DONE,
    SUSPENDED_KV,
    adapter,
    baseline,
    empty_world,
    phantom_release,
    refused,
    running,
    scheduled,
    waiting,
    with_calls,
    with_requests,
    with_step,
)
from tests.html_structure import grid_structure
from tests.report_cases import DRAIN_CASE

from peftlife.checker import registry
from peftlife.checker.drain import _drained_empty
from peftlife.checker.invariants import Violation
from peftlife.reports import Case, Outcome, Step, story
from peftlife.reports.finding.case import replay
from peftlife.reports.finding.html import render_html
from peftlife.search.trace import Action, Entry
from peftlife.world.config import EngineConfig
from peftlife.world.snapshot import Snapshot

STEP = Case("reference", "default", EngineConfig(), (Action("step"),))


def _one_step(violations: list[Violation], world: Snapshot) -> tuple[Case, Outcome]:
    """A one-action case whose only iteration is ``world``, failing with ``violations``."""
    assert violations, "the world breaks nothing"
    return STEP, Outcome((Entry(0, world),), tuple(violations), "step")


def _checked(name: str, world: Snapshot) -> tuple[Case, Outcome]:
    found = registry.check(world, STEP.config)
    return _one_step([v for v in found if v.invariant == name], world)


# A request refused as not cached after it had registered fails and leaves the world.
_ENDED = attrs.evolve(
    with_calls(baseline(), refused("not_cached", True, "prepare_resources")),
    requests=(running(),),
    ended=((2, "failed"),),
)

# Every request ended, yet adapter 7 still has request 1 as a paused owner.
_DRAINED_OWNED = empty_world(adapters=(adapter(active=(), paused=(1,), device=DONE, host=DONE),))

# (id, invariant, the case and its outcome): every subject shape of every invariant.
SHAPES: list[tuple[str, str, tuple[Case, Outcome]]] = [
    *(
        (f"{name}: {subject}", name, _checked(name, broken(baseline())))
        for name, broken, subject in BREAKS
    ),
    (
        "no_phantom_owner: a release with pause",
        "no_phantom_owner",
        _checked("no_phantom_owner", with_calls(baseline(), phantom_release())),
    ),
    (
        "scheduled_owned_and_resident: KV",
        "scheduled_owned_and_resident",
        _checked(
            "scheduled_owned_and_resident",
            with_step(baseline(), after_prepare=(scheduled(target=SUSPENDED_KV),)),
        ),
    ),
    (
        "draft_mirrors_target: no adapter",
        "draft_mirrors_target",
        _checked(
            "draft_mirrors_target",
            with_requests(baseline(), running(lora_task_id=None, draft=SUSPENDED_KV), waiting()),
        ),
    ),
    (
        "no_scheduler_caused_fault: a request that ended",
        "no_scheduler_caused_fault",
        _checked("no_scheduler_caused_fault", _ENDED),
    ),
    (
        "drain_completes: an adapter left owned",
        "drain_completes",
        _one_step(list(_drained_empty(_DRAINED_OWNED)), _DRAINED_OWNED),
    ),
    ("drain_completes: the live requests", "drain_completes", (DRAIN_CASE, replay(DRAIN_CASE))),
]


def story_marks(case: Case, outcome: Outcome) -> dict[str, str]:
    """Row -> invariant, as the story marks them (request, ended and adapter lines)."""
    marks: dict[str, str] = {}
    for item in story(case, outcome):
        view = item.view() if isinstance(item, Step) else None
        if view is None:
            continue
        for row in (*view.requests, *view.adapters):
            if row.mark is not None:
                marks[row.name] = row.mark
        for text, mark in view.ended:  # "request 2 failed"
            if mark is not None:
                marks[text.rsplit(" ", 1)[0]] = mark
    return marks


def timeline_marks(case: Case, outcome: Outcome) -> dict[str, str]:
    """Row -> invariant, as the HTML timeline outlines the cells."""
    cells = grid_structure(render_html(case, outcome))["marked"]
    return {cell["row"]: cell["invariant"] for cell in cells}


def subjects(outcome: Outcome) -> dict[str, str]:
    """Row -> the first invariant whose subject names it, from the violations' fields."""
    rows: dict[str, str] = {}
    for v in outcome.violations:
        for rid in v.subject.requests:
            rows.setdefault(f"request {rid}", v.invariant)
        for task in v.subject.adapters:
            rows.setdefault(f"adapter {task}", v.invariant)
    return rows


def test_every_invariant_of_the_catalogue_has_its_subjects_here() -> None:
    # The overlap executor's four are told in tests/world/test_overlap.py.
    everywhere = {i.name for i in registry.REGISTRY if i.scope is registry.EVERY_WORLD}
    assert {name for _, name, _ in SHAPES} == everywhere
    for _, name, (_, outcome) in SHAPES:
        assert {v.invariant for v in outcome.violations} == {name}
    # Every kind of row is among them: requests, adapters, a request that ended.
    rows = {row for _, _, (_, outcome) in SHAPES for row in subjects(outcome)}
    assert {"request 1", "request 2", "adapter 7"} <= rows


@pytest.mark.parametrize(
    ("name", "found"), [(s[1], s[2]) for s in SHAPES], ids=[s[0] for s in SHAPES]
)
def test_story_and_timeline_mark_the_subjects(name: str, found: tuple[Case, Outcome]) -> None:
    case, outcome = found
    assert story_marks(case, outcome) == timeline_marks(case, outcome) == subjects(outcome)
