"""A deep copy of the engine, as the explorer and the drain make one for every state:
it behaves as the original, it is independent of it, and what it shares is immutable
(peftlife.world.immutable)."""

from __future__ import annotations

import copy
import enum
import types
import typing

import attrs
import pytest

from peftlife.checker.drain import drain
from peftlife.search.trace import Action, apply, replay
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
from peftlife.world.immutable import IMMUTABLE, SharedMemo
from peftlife.world.kv import CacheView
from peftlife.world.snapshot import Snapshot


def submit(task: int | None, prompt_len: int, max_new_tokens: int) -> Action:
    return Action(
        "submit",
        lora_task_id=task,
        lora_weights=task is not None,
        prompt_len=prompt_len,
        max_new_tokens=max_new_tokens,
    )


STEP = Action("step")
# Worlds under pressure, so that a run suspends, recompute-pauses, evicts and fails:
# every part of the engine holds something by the middle of it.
PRESSED = EngineConfig(
    device_pages=4,
    tokens_per_block=2,
    enable_chunked_context=True,
    chunk_unit_size=1,
    max_num_tokens=3,
    max_batch_size=3,
    lora_device_pages=1,
    lora_host_pages=2,
    adapter_pages=((1, 1), (2, 1)),
)
WORLDS = {
    "simple": PRESSED,
    "overlap": attrs.evolve(PRESSED, executor="overlap", hold_reason="batch_waiting"),
    "draft and host tiers": attrs.evolve(
        PRESSED, host_pages=4, draft_device_pages=3, draft_host_pages=4
    ),
}
ACTIONS = (
    submit(1, 4, 2),
    submit(2, 3, 3),
    submit(1, 2, 1),
    STEP,
    STEP,
    Action("fail_grow"),
    STEP,
    Action("eos", request_id=1),
    Action("hold_batch"),
    submit(None, 2, 2),
    STEP,
    Action("refuse_resume"),
    Action("fail_grow", pool="draft"),
    STEP,
    Action("cancel", request_id=2),
    STEP,
    submit(2, 4, 1),
    STEP,
    STEP,
    STEP,
)


def run(engine: Engine, actions: tuple[Action, ...]) -> list[Snapshot]:
    return [s for s in (apply(engine, a) for a in actions) if s is not None]


def mid_run(world: EngineConfig, cut: int) -> Engine:
    """The engine after the first ``cut`` actions."""
    return replay(world, ACTIONS[:cut], ReferenceScheduler)[0]


CUTS = [pytest.param(name, cut, id=f"{name}-{cut}") for name in WORLDS for cut in (3, 7, 11, 16)]


# ---- a copy behaves as the original ----


@pytest.mark.parametrize(("name", "cut"), CUTS)
def test_a_copy_goes_on_as_the_original_does(name: str, cut: int) -> None:
    world = WORLDS[name]
    original = mid_run(world, cut)
    twin = copy.deepcopy(original)
    rest = ACTIONS[cut:]
    went_on = run(twin, rest)
    assert went_on == run(original, rest)
    # Snapshot for snapshot as the whole trace replayed on a fresh engine, too.
    _, whole = replay(world, ACTIONS, ReferenceScheduler)
    assert went_on == whole[len(whole) - len(went_on) :]
    assert twin.ledger == original.ledger
    drained, twin_drained = drain(original), drain(twin)
    assert twin_drained.snapshots == drained.snapshots
    assert twin_drained.violations == drained.violations


# ---- a copy is independent of the original ----


def dump(root: object) -> object:
    """Everything reachable from ``root`` as plain nested values, cycles as references,
    the shared caches left out (they are shared on purpose: ``SharedMemo``)."""
    seen: dict[int, int] = {}

    def walk(obj: object) -> object:
        if isinstance(obj, SharedMemo):
            return "shared memo"
        if type(obj) in (type(None), bool, int, float, str) or isinstance(obj, enum.Enum):
            return obj
        if id(obj) in seen:
            return ("seen", seen[id(obj)])
        seen[id(obj)] = len(seen)
        if isinstance(obj, dict):
            return ("dict", [(walk(k), walk(v)) for k, v in obj.items()])
        if isinstance(obj, list | tuple):
            return (type(obj).__name__, [walk(v) for v in obj])
        if isinstance(obj, set | frozenset):
            return (type(obj).__name__, sorted(obj))
        return (type(obj).__name__, [(k, walk(v)) for k, v in fields(obj)])

    return walk(root)


def fields(obj: object) -> list[tuple[str, object]]:
    if attrs.has(type(obj)):
        return [(f.name, getattr(obj, f.name)) for f in attrs.fields(type(obj))]
    if isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType):
        return [("name", obj.__qualname__)]
    return list(vars(obj).items())


@pytest.mark.parametrize(("name", "cut"), CUTS)
def test_stepping_a_copy_leaves_the_original_as_it_was(name: str, cut: int) -> None:
    original = mid_run(WORLDS[name], cut)
    before = dump(original)
    twin = copy.deepcopy(original)
    assert dump(twin) == before
    run(twin, (*ACTIONS[cut:], submit(1, 3, 2), Action("cancel", request_id=1), STEP))
    drain(twin)
    assert dump(original) == before


def reachable(root: object) -> dict[int, object]:
    found: dict[int, object] = {}
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in found:
            continue
        found[id(obj)] = obj
        if isinstance(obj, dict):
            stack.extend([*obj.keys(), *obj.values()])
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") or attrs.has(type(obj)):
            stack.extend(v for _, v in fields(obj))
    return found


def may_share(obj: object) -> bool:
    """What an original and its copy may both hold: an immutable value or a shared cache."""
    return (
        type(obj) in (type(None), bool, int, float, str, tuple, frozenset, SharedMemo)
        or type(obj) in IMMUTABLE
        or isinstance(obj, enum.Enum | type | types.FunctionType)
    )


@pytest.mark.parametrize(("name", "cut"), CUTS)
def test_a_copy_shares_only_immutable_values_and_caches(name: str, cut: int) -> None:
    original = mid_run(WORLDS[name], cut)
    ours = reachable(original)
    shared = [obj for key, obj in reachable(copy.deepcopy(original)).items() if key in ours]
    assert [obj for obj in shared if not may_share(obj)] == []
    # The records that make a copy cheap are among them.
    kept = {id(obj) for obj in shared}
    assert id(original.config) in kept
    assert id(original.snapshot().step) in kept


# ---- what is marked immutable is ----


def immutable_type(kind: object) -> bool:
    """Whether every value of a resolved field type is immutable."""
    if kind in (type(None), bool, int, float, str) or kind in IMMUTABLE:
        return True
    if isinstance(kind, type):
        return issubclass(kind, enum.Enum)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Literal:
        return all(type(a) in (type(None), bool, int, str) for a in args)
    if origin in (typing.Union, types.UnionType, tuple, frozenset):
        return all(a is Ellipsis or immutable_type(a) for a in args)
    return False


@pytest.mark.parametrize("cls", IMMUTABLE, ids=lambda cls: cls.__name__)
def test_a_marked_class_is_frozen_with_immutable_fields(cls: type) -> None:
    assert attrs.has(cls)
    hints = typing.get_type_hints(cls)
    kinds = {f.name: hints[f.name] for f in attrs.fields(cls)}
    assert {name: kind for name, kind in kinds.items() if not immutable_type(kind)} == {}
    blank = object.__new__(cls)
    for f in attrs.fields(cls):
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(blank, f.name, None)


def test_the_records_a_copy_shares_are_marked() -> None:
    names = {cls.__name__ for cls in IMMUTABLE}
    assert {"EngineConfig", "Call", "Facts", "StepRecord", "Snapshot", "CacheView"} <= names


def test_the_type_walk_refuses_a_mutable_field() -> None:
    assert not immutable_type(list[int])
    assert not immutable_type(tuple[int, dict[int, int]])
    assert not immutable_type(int | set[int])
    assert not immutable_type(object)
    assert immutable_type(tuple[tuple[int, CacheView], ...])


def test_a_subclass_of_a_marked_class_is_copied_the_ordinary_way() -> None:
    @attrs.frozen
    class NotedView(CacheView):
        notes: list[str] = attrs.Factory(list)

    view = NotedView()
    twin = copy.deepcopy(view)
    assert twin == view and twin is not view and twin.notes is not view.notes

    class Watched(Engine):
        __slots__ = ("watch",)

    engine = Watched(PRESSED, ReferenceScheduler)
    engine.watch = [1]
    assert copy.deepcopy(engine).watch == [1]
