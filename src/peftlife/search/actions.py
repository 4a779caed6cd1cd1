"""The actions a search may take, declared once: the alphabet and the opening.

Each kind of action is a ``Letter``: its name (the machine's rule and the
action's kind), the arguments the machine draws for it (their names and
strategies, taken from the scenario), when a scenario has it (the faults it
arms, ``cancel``, the overlap executor, a reason to hold batches), and its two
readings: ``drawn`` turns one rule's draws into actions in the example's
state, ``choices`` lists what the explorer may choose in a state. ``ALPHABET``
lists the letters and ``OPENING`` the burst every example opens with; the
machine's rules (``peftlife.search.machine``), the explorer's enumeration
(``peftlife.search.explore``) and the benchmark's bare mirror
(``bench/search.py``) are all made from these two, and nothing else lists the
actions.

    >>> from peftlife.search import scenarios
    >>> [letter.name for letter in enabled(scenarios.load("kv-pressure"))]
    ['step', 'submit', 'cancel', 'refuse_resume', 'fail_grow']
    >>> sorted(ranges(scenarios.load("kv-pressure")))
    ['max_new_tokens', 'prompt_len']
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

import attrs
from hypothesis import strategies as st

from peftlife.checker import drain
from peftlife.search.scenarios import Range, Scenario
from peftlife.search.trace import Action, ActionKind
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine

# ---- the opening: its parameters, in one place ----


@attrs.frozen
class Opening:
    """How every example opens: a burst of submits that fills the device, then a few
    moves (an executor iteration or a fault the scenario arms) before the rules take
    turns.

    Drawn one rule at a time, most examples spread their requests out and let
    cancels relieve the pressure first: the suspensions, recompute pauses and
    evictions where lifecycle defects live came in a few examples in a hundred
    (bench/detection.py measures it).
    """

    # The fewest requests of the burst (three contend for a device that holds about
    # one; a scenario that caps requests lower gets its cap); the most is the cap.
    requests: int = 3
    # How many moves follow the burst.
    min_moves: int = 2
    max_moves: int = 8
    # What a move may be: an iteration, then each of these faults the scenario arms.
    faults: tuple[ActionKind, ...] = ("fail_grow", "refuse_resume")

    def move(self, s: Scenario) -> st.SearchStrategy[Action]:
        """One move: an iteration, or a fault the scenario arms, aimed at any pool it
        has (a fault in the draft alone is what splits the two pools)."""
        return st.one_of(
            st.just(STEP_ACTION),
            *(
                st.builds(Action, st.just(kind), pool=s.fault_pools())
                for kind in self.faults
                if getattr(s, kind)
            ),
        )

    def arguments(self, s: Scenario) -> dict[str, st.SearchStrategy[Any]]:
        """The opening rule's arguments: the world, the burst of submits (each the
        submit rule's arguments, in order), and the moves."""
        return {
            "config": s.worlds(),
            "burst": st.lists(
                st.tuples(*SUBMIT.strategies(s).values()),
                min_size=min(self.requests, s.max_requests),
                max_size=s.max_requests,
            ),
            "moves": st.lists(self.move(s), min_size=self.min_moves, max_size=self.max_moves),
        }


OPENING = Opening()
# The name of the machine's opening rule (Hypothesis's ``initialize``).
OPENING_RULE = "build_world"

# The most requests one example cancels. A cancel relieves the pressure defects need:
# with the rule drawn as often as the others, most examples cancelled every request
# they had before a pool was ever full (bench/detection.py measured a fifth of the
# catches there).
MAX_CANCELS = 2


# ---- the letters ----

# One executor iteration. An action is a frozen value, so one serves every step (a
# new one each time is validated again, a few percent of a rule step).
STEP_ACTION = Action("step")


class Finite(Protocol):
    """What the explorer's alphabet holds beyond the letters: its finite submits."""

    @property
    def submits(self) -> tuple[Action, ...]: ...

    @property
    def max_requests(self) -> int: ...


# A letter's machine reading: (scenario, engine, actions so far, drawn arguments) ->
# the actions it applies, generated one at a time as each is applied.
Drawn = Callable[..., Iterator[Action]]
# Its explorer reading: (engine, trace, alphabet) -> every action it may choose.
Choices = Callable[[Engine, tuple[Action, ...], Finite], Iterable[Action]]


@attrs.frozen
class Argument:
    """One argument of a rule: its name, what the machine draws for it, and the
    finite values the explorer picks from in a world (None: the letter lists its
    choices from the state instead)."""

    name: str
    strategy: Callable[[Scenario], st.SearchStrategy[Any]]
    values: Callable[[Scenario, EngineConfig], tuple[Any, ...]] | None = None
    # The range of an integer argument that is an action's field of the same name.
    range: Callable[[Scenario], Range] | None = None


@attrs.frozen
class Letter:
    """One kind of action: the machine's rule of that name and the explorer's choices."""

    name: ActionKind
    arguments: tuple[Argument, ...]
    enabled: Callable[[Scenario], bool]
    drawn: Drawn
    choices: Choices

    def strategies(self, s: Scenario) -> dict[str, st.SearchStrategy[Any]]:
        """The rule's arguments in ``s``, by name, in declared order."""
        return {a.name: a.strategy(s) for a in self.arguments}


def _ends(r: Range) -> tuple[int, ...]:
    """A range's two ends (lifted to 1), the explorer's choice of sizes."""
    lo, hi = max(r.lo, 1), max(r.hi, 1)
    return (lo,) if lo == hi else (lo, hi)


def _lifted(r: Range) -> Range:
    return Range(max(r.lo, 1), max(r.hi, 1))


# ---- submit ----


def submit_action(
    s: Scenario,
    adapter_ids: Sequence[int],
    adapter: int,
    weights: bool,
    prompt_len: int,
    max_new_tokens: int,
) -> Action:
    """The submit an adapter index and sizes stand for in a world with ``adapter_ids``.

    Adapter indices wrap onto the adapters the world has; 0 is none.
    """
    task = None if adapter == 0 else adapter_ids[(adapter - 1) % len(adapter_ids)]
    path = s.lora_path == "always" and task is not None
    return Action("submit", None, task, weights, prompt_len, max_new_tokens, lora_path=path)


def _submit(
    s: Scenario,
    engine: Engine,
    actions: Sequence[Action],
    adapter: int,
    weights: bool,
    prompt_len: int,
    max_new_tokens: int,
) -> Iterator[Action]:
    if engine.next_request_id > s.max_requests:
        # Past the scenario's cap a submit runs the executor once instead.
        yield STEP_ACTION
        return
    yield submit_action(s, engine.adapter_ids, adapter, weights, prompt_len, max_new_tokens)


def _submits_open(engine: Engine, trace: tuple[Action, ...], alphabet: Finite) -> Iterator[Action]:
    """As in the machine, up to the cap; and a submit must leave a world that can drain."""
    if engine.next_request_id > alphabet.max_requests:
        return
    submitted = [_request(a) for a in trace if a.kind == "submit"]
    for submit in alphabet.submits:
        if drain.can_drain(engine.config, [*submitted, _request(submit)]):
            yield submit


def _request(submit: Action) -> tuple[int | None, int, int]:
    return submit.lora_task_id, submit.prompt_len, submit.max_new_tokens


SUBMIT = Letter(
    "submit",
    (
        Argument(
            "adapter",
            Scenario.adapter_choice,
            lambda s, config: tuple(range(0 if s.no_adapter else 1, len(config.adapter_pages) + 1)),
        ),
        Argument(
            "weights",
            Scenario.carries_weights,
            lambda s, config: (True,) if s.weights == "always" else (False, True),
        ),
        Argument(
            "prompt_len",
            lambda s: s.prompt_len.strategy(at_least=1),
            lambda s, config: _ends(s.prompt_len),
            lambda s: _lifted(s.prompt_len),
        ),
        Argument(
            "max_new_tokens",
            lambda s: s.max_new_tokens.strategy(at_least=1),
            lambda s, config: _ends(s.max_new_tokens),
            lambda s: _lifted(s.max_new_tokens),
        ),
    ),
    lambda s: True,
    _submit,
    _submits_open,
)


def submits(
    s: Scenario, config: EngineConfig, overrides: dict[str, tuple[int, ...]] | None = None
) -> tuple[Action, ...]:
    """Every submit the explorer may choose in ``config``: each argument's values
    (``overrides`` replaces some by name), less weights sent with no adapter."""
    values = [
        (overrides or {}).get(a.name) or (a.values(s, config) if a.values else ())
        for a in SUBMIT.arguments
    ]
    ids = [task for task, _ in config.adapter_pages]
    made = (submit_action(s, ids, *drawn) for drawn in itertools.product(*values))
    return tuple(a for a in made if not (a.lora_task_id is None and a.lora_weights))


# ---- step ----


def _step(s: Scenario, engine: Engine, actions: Sequence[Action], steps: int) -> Iterator[Action]:
    for _ in range(steps):
        yield STEP_ACTION


STEP = Letter(
    "step",
    (Argument("steps", lambda s: s.steps_per_rule.strategy(at_least=1)),),
    lambda s: True,
    _step,
    lambda engine, trace, alphabet: (STEP_ACTION,),
)


# ---- cancel ----


def _cancel(s: Scenario, engine: Engine, actions: Sequence[Action], back: int) -> Iterator[Action]:
    # Counted back from the latest request (ids are 1, 2, ... in order of
    # submission); before any submit there is nothing to cancel.
    submitted = engine.next_request_id - 1
    if sum(a.kind == "cancel" for a in actions) >= MAX_CANCELS:
        # Past the cap a cancel runs the executor once instead.
        yield STEP_ACTION
    elif submitted:
        yield Action("cancel", request_id=submitted - back % submitted)


CANCEL = Letter(
    "cancel",
    (Argument("back", lambda s: st.integers(min_value=0, max_value=7)),),
    lambda s: s.cancel,
    _cancel,
    # The explorer cancels any live request, with no cap: it proves, it does not tune.
    lambda engine, trace, alphabet: (
        Action("cancel", request_id=r.request_id) for r in engine.live_requests
    ),
)


# ---- the faults ----


def _pools(engine: Engine) -> tuple[str, ...]:
    return ("target",) if engine.draft_kv_cache_manager is None else ("target", "draft")


def landing(engine: Engine, pool: str) -> str:
    """The pool a fault aimed at ``pool`` lands in, and is recorded in: the target
    when the world has no draft pool."""
    return pool if engine.draft_kv_cache_manager is not None else "target"


def _fault(kind: ActionKind) -> Letter:
    on = {pool: Action(kind, pool=pool) for pool in ("target", "draft")}

    def drawn(
        s: Scenario, engine: Engine, actions: Sequence[Action], pool: str
    ) -> Iterator[Action]:
        yield on[landing(engine, pool)]

    return Letter(
        kind,
        (Argument("pool", Scenario.fault_pools),),
        lambda s: bool(getattr(s, kind)),
        drawn,
        lambda engine, trace, alphabet: (on[p] for p in _pools(engine)),
    )


REFUSE_RESUME = _fault("refuse_resume")
FAIL_GROW = _fault("fail_grow")


# ---- the overlap executor's ----


def _eos(s: Scenario, engine: Engine, actions: Sequence[Action], member: int) -> Iterator[Action]:
    # One of the members the next read-back gives a token; none, nothing.
    emitting = engine.emitting_ids
    if emitting:
        yield Action("eos", request_id=emitting[member % len(emitting)])


EOS = Letter(
    "eos",
    (Argument("member", lambda s: st.integers(min_value=0, max_value=7)),),
    lambda s: s.overlap,
    _eos,
    lambda engine, trace, alphabet: (Action("eos", request_id=r) for r in engine.emitting_ids),
)

HOLD_BATCH = Letter(
    "hold_batch",
    (),
    # Only a world with a reason to hold (attention DP, batch waiting, the context KV
    # cap) holds: on a single rank upstream always queues.
    lambda s: s.holds_batches,
    lambda s, engine, actions: iter((Action("hold_batch"),)),
    lambda engine, trace, alphabet: (Action("hold_batch"),),
)

# Every letter, in the order the explorer tries them (so its search is deterministic).
ALPHABET: tuple[Letter, ...] = (STEP, SUBMIT, CANCEL, REFUSE_RESUME, FAIL_GROW, EOS, HOLD_BATCH)


def enabled(s: Scenario) -> tuple[Letter, ...]:
    """The letters scenario ``s`` has: the rules of its machine."""
    return tuple(letter for letter in ALPHABET if letter.enabled(s))


def ranges(s: Scenario) -> dict[str, Range]:
    """The range each integer field of an action may take in ``s``, by field name
    (what the machine draws, lifted to 1): for a shrinker that moves within it."""
    return {a.name: a.range(s) for letter in ALPHABET for a in letter.arguments if a.range}
