"""The breadth-first search: remembering the drains' verdicts changes nothing it finds."""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import pytest

from peftlife.checker import drain
from peftlife.search import breadth, scenarios
from peftlife.search.breadth import Alphabet
from peftlife.search.trace import Action
from peftlife.sut import load
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine

# The world shrunk findings of the catalogue's mutants share in the scenario
# ``no-lower-tier``: a draft pool, no lower tier, one adapter on a one-page LoRA cache.
NO_LOWER_TIER = EngineConfig(
    device_pages=2,
    draft_device_pages=2,
    tokens_per_block=2,
    lora_device_pages=1,
    lora_host_pages=1,
    adapter_pages=((1, 1),),
    max_num_tokens=1,
    max_batch_size=1,
    enable_chunked_context=True,
    chunk_unit_size=1,
)


def _world(**changes: object) -> EngineConfig:
    """A world of ``no-lower-tier`` as small as the catalogue's shrunk findings there."""
    return attrs.evolve(NO_LOWER_TIER, **changes)


@attrs.frozen
class Case:
    """A world of a scenario, the request sizes its submits take, how deep to search
    and for which invariant (None: any)."""

    scenario: str
    world: EngineConfig
    prompt_lens: tuple[int, ...]
    max_new_tokens: tuple[int, ...]
    depth: int
    invariant: str | None = None

    def letters(self, spec: str) -> Alphabet:
        s = scenarios.for_sut(scenarios.load(self.scenario), spec)
        return Alphabet.of(s, self.world, self.prompt_lens, self.max_new_tokens)


# Each mutant in the world of one of its shrunk findings, with the finding's sizes, as
# deep as the finding is long.
CASES = {
    "no_release_on_suspend": Case("no-lower-tier", _world(), (1,), (2,), 4),
    "draft_not_suspended": Case("no-lower-tier", _world(), (2,), (1,), 4),
    "phantom_pause_unstarted": Case(
        "no-lower-tier", _world(device_pages=1, draft_device_pages=1), (1,), (1,), 3
    ),
    "recompute_pause_terminates": Case(
        "no-lower-tier", _world(recompute_teardown="scheduler_only"), (2, 3), (1,), 4
    ),
    # The failure on one invariant: shortest for it, passing over none shorter.
    "no_reregister_on_resume": Case(
        "no-lower-tier",
        _world(device_pages=3, draft_device_pages=3, max_num_tokens=2),
        (3,),
        (2,),
        5,
        "scheduled_owned_and_resident",
    ),
}
# Under the overlap executor (test_explore.py's oracle case): a failure on the invariant
# in three actions, and one on another in two, passed over.
PASSED_OVER = Case(
    "overlap-kv-pressure",
    EngineConfig(
        device_pages=4,
        host_pages=0,
        tokens_per_block=1,
        lora_device_pages=1,
        lora_host_pages=1,
        adapter_pages=((1, 1),),
        max_num_tokens=2,
        max_batch_size=2,
        enable_chunked_context=True,
        chunk_unit_size=1,
        executor="overlap",
    ),
    (1, 2),
    (1, 2),
    3,
    "scheduled_owned_and_resident",
)


@pytest.fixture
def drains(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The number of drains each search ran, in order."""
    counts: list[int] = []
    real = drain.drain

    def counted(engine: Engine) -> drain.DrainResult:
        counts[-1] += 1
        return real(engine)

    monkeypatch.setattr(drain, "drain", counted)
    yield counts


def _search(
    spec: str, case: Case, counts: list[int], max_states: int = 2_000
) -> tuple[breadth.Searched, breadth.Searched]:
    """``spec`` searched in ``case`` with the drains' verdicts remembered, then without."""
    searched = []
    for memo in (True, False):
        counts.append(0)
        searched.append(
            breadth.search(
                load(spec),
                case.world,
                case.letters(spec),
                case.depth,
                max_states=max_states,
                invariant=case.invariant,
                drain_memo=memo,
            )
        )
    return searched[0], searched[1]


@pytest.mark.parametrize("mutant", sorted(CASES))
def test_remembered_drains_find_what_every_drain_finds(mutant: str, drains: list[int]) -> None:
    remembered, drained = _search(f"mutant:{mutant}", CASES[mutant], drains)
    assert remembered.failure is not None and remembered.complete
    # The same failure at the same depth, the same states, as complete, none passed over.
    assert remembered == drained
    assert drains[0] < drains[1]  # and memory was used: a state with a fault armed, say


def test_remembered_drains_pass_over_what_every_drain_passes_over(drains: list[int]) -> None:
    remembered, drained = _search("mutant:no_reregister_on_resume", PASSED_OVER, drains)
    assert remembered.failure is not None and remembered.passed_over is not None
    assert len(remembered.passed_over) < len(remembered.failure)
    assert remembered == drained


def test_remembered_drains_stop_at_the_state_limit_where_every_drain_does(
    drains: list[int],
) -> None:
    remembered, drained = _search("reference", CASES["recompute_pause_terminates"], drains, 300)
    assert not remembered.complete and remembered.states == 300
    assert remembered == drained


def test_the_reference_fails_nowhere_with_or_without_remembering(drains: list[int]) -> None:
    for case in (CASES["no_release_on_suspend"], CASES["phantom_pause_unstarted"], PASSED_OVER):
        remembered, drained = _search("reference", case, drains)
        assert remembered.complete and remembered.failure is None
        assert remembered == drained
    assert sum(drains[::2]) < sum(drains[1::2])


def _submit(adapter: int, prompt: int) -> Action:
    """A request as no-lower-tier draws them (no weights sent, a path named), two tokens out."""
    return Action(
        "submit",
        lora_task_id=adapter,
        lora_weights=False,
        lora_path=True,
        prompt_len=prompt,
        max_new_tokens=2,
    )


def test_a_cases_own_alphabet_holds_its_kinds_its_adapters_and_no_more_requests() -> None:
    s = scenarios.load("no-lower-tier")  # prompts drawn from 3 to 10, outputs from 1 to 3
    submit = _submit(1, 7)
    case = (submit, Action("step"), Action("fail_grow", pool="draft"))
    around = Alphabet.around(s, NO_LOWER_TIER, case)
    own = around.own(case)
    assert sorted(letter.name for letter in own.letters) == ["fail_grow", "step", "submit"]
    assert {(a.lora_task_id, a.lora_weights, a.lora_path) for a in own.submits} == {
        (1, False, True)
    }
    sizes = {(a.prompt_len, a.max_new_tokens) for a in own.submits}
    assert sizes == {(p, o) for p in (3, 7, 10) for o in (1, 2, 3)}  # its own and the ends
    assert own.max_requests == 1
    # Everything it holds, the scenario's actions around the case hold too.
    assert set(own.submits) < set(around.submits)


def test_a_cases_exact_alphabet_holds_its_very_requests_and_its_own_letters() -> None:
    s = scenarios.load("no-lower-tier")
    first, second = _submit(1, 7), _submit(1, 4)
    case = (first, Action("step"), second, first, Action("fail_grow", pool="draft"))
    own = Alphabet.around(s, NO_LOWER_TIER, case).own(case)
    exact = own.exact(case)
    assert set(exact.submits) == {first, second}  # each once, however often submitted
    assert exact.letters == own.letters
    assert exact.max_requests == own.max_requests == 3


def test_an_alphabet_by_owner_holds_one_adapters_requests_at_a_time() -> None:
    s = scenarios.load("no-lower-tier")
    first, second = _submit(1, 7), _submit(2, 7)
    two = attrs.evolve(NO_LOWER_TIER, adapter_pages=((1, 1), (2, 1)))
    case = (first, second, Action("step"))
    own = Alphabet.around(s, two, case).own(case)
    mine, theirs = own.by_owner()
    assert {a.lora_task_id for a in mine.submits} == {1}
    assert {a.lora_task_id for a in theirs.submits} == {2}
    assert set(mine.submits) | set(theirs.submits) == set(own.submits)
    assert (mine.letters, mine.max_requests) == (own.letters, own.max_requests)
    # One owner only: the alphabet itself, so no search of its own.
    alone = (first, Action("step"))
    assert Alphabet.around(s, two, alone).own(alone).by_owner() == ()
