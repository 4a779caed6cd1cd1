"""The history of a run: the actions a run applied to the world, and their replay.

The state machine's rules, the shrinker, the command line's replay and a
generated regression test all go through ``apply`` (and ``checked_replay``),
so one list of actions gives the same snapshots byte for byte whichever door
started it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

import attrs

from peftlife.checker.drain import drain
from peftlife.checker.invariants import Violation
from peftlife.checker.registry import checker
from peftlife.world.config import EngineConfig
from peftlife.world.engine import DEFAULT_SCHEDULE_DEADLINE, Engine
from peftlife.world.fields import InvalidField, boolean, one_of, whole
from peftlife.world.protocol import SchedulerFactory
from peftlife.world.snapshot import Snapshot
from peftlife.world.words import article

ActionKind = Literal["submit", "step", "cancel", "refuse_resume", "fail_grow", "eos", "hold_batch"]
KINDS: tuple[ActionKind, ...] = (
    "submit",
    "step",
    "cancel",
    "refuse_resume",
    "fail_grow",
    "eos",
    "hold_batch",
)
# The kinds that name a request by its id (ids count submits from 1).
REQUEST_KINDS: tuple[ActionKind, ...] = ("cancel", "eos")


@attrs.frozen
class Action:
    """One thing done to the world between or as iterations.

    ``submit`` carries ``lora_task_id``, ``lora_weights``, ``prompt_len`` and
    ``max_new_tokens`` (the id it is given is the next in order); ``cancel``
    a ``request_id``; the two faults a ``pool`` (target or draft). The overlap
    executor's two: ``eos`` ends a ``request_id`` of the batch in flight by
    end-of-sequence at its read-back, and ``hold_batch`` makes the next batch
    one that cannot be queued; under the simple executor both do nothing.

    >>> Action("cancel", request_id=3).describe()
    'cancel(request_id=3)'
    """

    kind: ActionKind = attrs.field(validator=one_of(*KINDS))
    request_id: int | None = attrs.field(default=None, validator=whole(1, optional=True))
    lora_task_id: int | None = attrs.field(default=None, validator=whole(1, optional=True))
    lora_weights: bool = attrs.field(default=False, validator=boolean)
    prompt_len: int = attrs.field(default=0, validator=whole(0))
    max_new_tokens: int = attrs.field(default=0, validator=whole(0))
    pool: str = attrs.field(default="target", validator=one_of("target", "draft"))
    # A submit's LoRA path to load the adapter from again (upstream's py_lora_path).
    lora_path: bool = attrs.field(default=False, validator=boolean)

    def __attrs_post_init__(self) -> None:
        # What each kind needs; the other fields keep their defaults.
        if self.kind == "submit":
            for name in ("prompt_len", "max_new_tokens"):
                if getattr(self, name) < 1:
                    raise InvalidField(
                        name, f"of a submit must be at least 1, not {getattr(self, name)}"
                    )
        if self.kind in REQUEST_KINDS and self.request_id is None:
            raise InvalidField("request_id", f"is required by {article(self.kind)}")

    def describe(self) -> str:
        if self.kind == "submit":
            args = (
                f"adapter={self.lora_task_id}, weights={self.lora_weights}, "
                f"prompt_len={self.prompt_len}, max_new_tokens={self.max_new_tokens}"
            )
            if self.lora_path:
                args += ", lora_path=True"
        elif self.kind in REQUEST_KINDS:
            args = f"request_id={self.request_id}"
        elif self.kind in ("step", "hold_batch"):
            args = ""
        else:
            args = f"pool={self.pool}"
        return f"{self.kind}({args})"

    def to_json(self) -> dict[str, object]:
        defaults = {f.name: f.default for f in attrs.fields(Action)}
        return {k: v for k, v in attrs.asdict(self).items() if k == "kind" or v != defaults[k]}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Action:
        return cls(**data)  # type: ignore[arg-type]


def apply(engine: Engine, action: Action) -> Snapshot | None:
    """Apply one action; a ``step`` returns the snapshot after the iteration.

    A submit returns None; its request id is ``engine``'s next in order.
    """
    if action.kind == "submit":
        engine.submit(
            prompt_len=action.prompt_len,
            max_new_tokens=action.max_new_tokens,
            lora_task_id=action.lora_task_id,
            lora_weights=action.lora_weights,
            lora_path=action.lora_path,
        )
    elif action.kind == "step":
        return engine.step()
    elif action.kind == "cancel":
        assert action.request_id is not None
        engine.cancel(action.request_id)
    elif action.kind == "eos":
        assert action.request_id is not None
        engine.end_of_sequence(action.request_id)
    elif action.kind == "hold_batch":
        engine.hold_batch()
    else:
        pool = (
            engine.draft_kv_cache_manager
            if action.pool == "draft" and engine.draft_kv_cache_manager is not None
            else engine.kv_cache_manager
        )
        if action.kind == "refuse_resume":
            pool.refuse_next_resumes()
        else:
            pool.fail_next_grows()
    return None


def replay(
    config: EngineConfig, actions: Iterable[Action], factory: SchedulerFactory
) -> tuple[Engine, list[Snapshot]]:
    """Run ``actions`` on a fresh engine; return it with the snapshot of every step.

    >>> from peftlife.sut.reference import ReferenceScheduler
    >>> _, snaps = replay(EngineConfig(), [Action("submit", prompt_len=4, max_new_tokens=1),
    ...                                     Action("step")], ReferenceScheduler)
    >>> snaps[0].ended
    ((1, 'finished'),)
    """
    engine = Engine(config, factory)
    snapshots = [s for s in (apply(engine, a) for a in actions) if s is not None]
    return engine, snapshots


@attrs.frozen
class Entry:
    """One iteration of a replay: the action that ran it (None in the drain)."""

    action_index: int | None
    snapshot: Snapshot


@attrs.frozen
class Outcome:
    """A replay checked as the machine checks a run."""

    entries: tuple[Entry, ...]
    violations: tuple[Violation, ...]
    during: str | None  # "step", "drain" or None when every check held

    @property
    def held(self) -> bool:
        return not self.violations

    @property
    def snapshots(self) -> tuple[Snapshot, ...]:
        return tuple(e.snapshot for e in self.entries)

    @property
    def hung(self) -> bool:
        """Whether the scheduler's code missed its deadline somewhere in the replay."""
        return any(
            err.kind == "scheduler_hung"
            for e in self.entries
            for err in (e.snapshot.step.errors if e.snapshot.step else ())
        )


def checked_replay(
    config: EngineConfig,
    actions: Iterable[Action],
    factory: SchedulerFactory,
    *,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
    journal: Callable[[Entry], None] | None = None,
) -> Outcome:
    """Replay as the machine runs an example: every iteration checked, then the drain.

    Stops at the first iteration with a violation. ``journal`` is told each
    entry as it completes (``peftlife.search.outside`` keeps them, in case the
    scheduler takes the process down at the next).
    """
    engine = Engine(config, factory, schedule_deadline=schedule_deadline)
    check = checker(config)
    entries: list[Entry] = []
    for index, action in enumerate(actions):
        snapshot = apply(engine, action)
        if snapshot is None:
            continue
        entries.append(Entry(index, snapshot))
        if journal is not None:
            journal(entries[-1])
        violations = check(snapshot)
        if violations:
            return Outcome(tuple(entries), tuple(violations), "step")
    if journal is None:
        result = drain(engine)
    else:
        told = journal

        def checked(snapshot: Snapshot) -> list[Violation]:
            told(Entry(None, snapshot))
            return check(snapshot)

        result = drain(engine, checker=checked)
    entries.extend(Entry(None, s) for s in result.snapshots)
    return Outcome(tuple(entries), result.violations, "drain" if result.violations else None)
