"""Scenario profiles: WHERE the state machine searches.

A scenario is a TOML file (shipped ones live in ``peftlife/search/strategies/``, which
the repository also shows as ``strategies/``) naming ranges for the world and
the workload. This module reads one and turns it into Hypothesis strategies.
Every knob acts only through a strategy, never inside a rule's body, so a
printed reproduction is exactly what ran.

Worlds are generated so that they can always drain (docs/invariants.md, invariant 12,
``checker.drain.drain_premise_broken``): every request fits the device alone,
the device LoRA cache holds the largest adapter, without recompute pause the
lower tier holds every cache at once, without chunking the token budget covers
the longest context, and with chunking the chunk unit fits the token budget.
Ranges are clamped to meet that (upward, and the chunk unit down to the token
budget); the clamps are the only place a scenario's numbers are overridden.
So no scenario, shipped or a user's, can generate a world that cannot drain.
An upper limit on every number (``LIMITS``) is checked when the file is read,
so that no file can make a run hang or eat memory.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import attrs
from hypothesis import strategies as st

from peftlife import sut
from peftlife.search.trace import Action
from peftlife.world.config import (
    LEGACY_TEARDOWN,
    EngineConfig,
    Executor,
    ExecutorKnobs,
    HoldReason,
    InflightIds,
    InFlightPin,
    RecomputeTeardown,
    values,
)
from peftlife.world.protocol import CHUNKING_POLICIES, ContextChunkingPolicy

Switch = Literal["on", "off", "either"]
SWITCHES = ("on", "off", "either")


class ScenarioError(ValueError):
    """A scenario that cannot be found or read; the message says how to fix it."""


@attrs.frozen
class Range:
    lo: int
    hi: int

    def strategy(self, at_least: int = 0) -> st.SearchStrategy[int]:
        """Integers in the range, the whole range lifted so it starts at ``at_least``."""
        return st.integers(max(self.lo, at_least), max(self.hi, at_least))


@attrs.frozen
class Scenario(ExecutorKnobs):
    """One named region of the search space; its executor's knobs are fixed, the same in
    every world it draws, and mean what they mean there (``overlap`` and the rest)."""

    name: str
    description: str
    # world
    device_pages: Range
    lower_tier: Switch
    host_pages: Range
    draft_pool: Switch
    draft_device_pages: Range
    tokens_per_block: Range
    chunking: Switch
    chunk_unit_size: Range
    max_num_tokens: Range
    max_batch_size: Range
    recompute_pause: Switch
    lora_device_pages: Range
    lora_host_pages: Range
    adapters: Range
    adapter_pages: Range
    # workload
    prompt_len: Range
    max_new_tokens: Range
    max_requests: int
    no_adapter: bool
    weights: Literal["always", "either"]
    # nemesis and rules
    refuse_resume: bool
    fail_grow: bool
    cancel: bool
    steps_per_rule: Range
    # The file a user's profile was read from, absolute, so that a case found in it
    # loads it again from any folder; None for a shipped one, which its name loads.
    path: str | None = None
    # Optional [world] keys: how chunked contexts share the token budget, and how
    # the executor tears down a recompute-paused request ("upstream": TensorRT-LLM's).
    chunking_policy: ContextChunkingPolicy | Literal["either"] = "FIRST_COME_FIRST_SERVED"
    recompute_teardown: RecomputeTeardown = "executor_frees"
    # Optional [world] keys of the overlap executor; under it the machine also
    # ends in-flight requests by end-of-sequence, and holds batches where the
    # world has a reason to (``hold_reason``).
    executor: Executor = "simple"
    inflight_ids: InflightIds = "batch"
    hold_reason: HoldReason = "none"
    in_flight_pin: InFlightPin = "when_told"
    # Optional [workload] key: whether every LoRA request carries a LoRA path to load
    # its adapter from again ("always", the default: the LLM API's PyTorch backend sets
    # py_lora_path on every LoRA request; "never": requests sent with weights only, as
    # the executor API allows, which upstream's recompute teardown can strand).
    lora_path: Literal["always", "never"] = "always"

    @property
    def spec(self) -> str:
        """What loads this scenario again (``load``): a shipped one's name, a file's path.

        >>> load("kv-pressure").spec
        'kv-pressure'
        """
        return self.path or self.name

    @property
    def longest_request(self) -> int:
        """Tokens of the largest request the workload can submit (context plus outputs)."""
        return self.prompt_len.hi + self.max_new_tokens.hi

    # ---- strategies ----

    def worlds(self) -> st.SearchStrategy[EngineConfig]:
        """Engine configurations in this region that can always drain."""
        return _worlds(self)

    def adapter_choice(self) -> st.SearchStrategy[int]:
        """An adapter index: 0 for none, else 1..adapters.hi (wrapped to the world's count)."""
        return st.integers(0 if self.no_adapter else 1, max(1, self.adapters.hi))

    def carries_weights(self) -> st.SearchStrategy[bool]:
        return st.just(True) if self.weights == "always" else st.booleans()

    def fault_pools(self) -> st.SearchStrategy[str]:
        pools = ["target"] if self.draft_pool == "off" else ["target", "draft"]
        return st.sampled_from(pools)

    def admits(self, action: Action) -> bool:
        """Whether the machine's rules could draw ``action`` in this scenario.

        The shrinker keeps a case to such actions: a submit without the weights a
        scenario always sends, say, tells a story its search never could. Lengths
        are left free: a shorter prompt than the range's low end is the same kind
        of request, and making it short is the shrinker's work.

        >>> s = load("kv-pressure")
        >>> s.admits(Action("submit", None, 1, True, 4, 1, lora_path=True))
        True
        >>> s.admits(Action("submit", None, 1, False, 4, 1, lora_path=True))
        False
        """
        if action.kind == "submit":
            task = action.lora_task_id
            return (
                (task is not None or self.no_adapter)
                and (action.lora_weights or task is None or self.weights == "either")
                and action.lora_path == (self.lora_path == "always" and task is not None)
            )
        if action.kind in ("refuse_resume", "fail_grow"):
            return getattr(self, action.kind) and (
                action.pool == "target" or self.draft_pool != "off"
            )
        if action.kind == "cancel":
            return self.cancel
        if action.kind == "eos":
            return self.overlap
        if action.kind == "hold_batch":
            return self.holds_batches
        return True

    def admits_world(self, config: EngineConfig) -> bool:
        """Whether the scenario's switches allow ``config``'s: chunking, recompute pause
        and a draft pool. Its numbers are left free, as the shrinker's to make small."""

        def allows(switch: Switch, on: bool) -> bool:
            return switch == "either" or (switch == "on") == on

        return (
            allows(self.chunking, config.enable_chunked_context)
            and allows(self.recompute_pause, config.enable_recompute_pause)
            and allows(self.draft_pool, config.draft_device_pages is not None)
        )

    def admits_case(self, config: EngineConfig, actions: Sequence[Action]) -> bool:
        """Whether a case (a world and its actions) is one the scenario could generate
        (``admits_world`` and ``admits``): the shrinker keeps to such cases."""
        return self.admits_world(config) and all(map(self.admits, actions))


def _switch(value: Switch) -> st.SearchStrategy[bool]:
    return {"on": st.just(True), "off": st.just(False), "either": st.booleans()}[value]


@st.composite
def _worlds(draw: st.DrawFn, s: Scenario) -> EngineConfig:
    return _world(
        s,
        lambda r, at_least: draw(r.strategy(at_least)),
        lambda w: draw(_switch(w)),
        lambda options: draw(st.sampled_from(options)),
    )


def smallest_world(s: Scenario) -> EngineConfig:
    """The scenario's smallest world: every range at its (lifted) low end, switches off
    where they may be, and no draft pool unless the scenario insists.

    It is the world ``peftlife explore`` searches exhaustively by default.

    >>> smallest_world(load("kv-pressure")).host_pages
    0
    """
    return _world(
        s, lambda r, at_least: max(r.lo, at_least), lambda w: w == "on", lambda options: options[0]
    )


def _world(
    s: Scenario,
    pick: Callable[[Range, int], int],
    switch: Callable[[Switch], bool],
    choose: Callable[[tuple[ContextChunkingPolicy, ...]], ContextChunkingPolicy],
) -> EngineConfig:
    """One world of the scenario: each number chosen by ``pick``, each switch by
    ``switch``, and the chunking policy, where the scenario leaves it open, by ``choose``."""
    tokens_per_block = pick(s.tokens_per_block, 1)
    # Every request must fit the device alone, in each pool.
    pages_per_request = -(-s.longest_request // tokens_per_block)
    device_pages = pick(s.device_pages, pages_per_request)
    recompute = switch(s.recompute_pause)
    lower_tier = switch(s.lower_tier) or not recompute
    # Without recompute pause only suspension frees pages: the tier must hold every cache.
    host_floor = 1 if recompute else s.max_requests * pages_per_request
    host_pages = pick(s.host_pages, host_floor) if lower_tier else 0
    draft = switch(s.draft_pool)
    draft_device_pages = pick(s.draft_device_pages, pages_per_request) if draft else None
    chunking = switch(s.chunking)
    # Without chunking a context runs whole: the longest one must fit the token budget.
    token_floor = 1 if chunking else s.longest_request - 1
    adapters = pick(s.adapters, 1)
    sizes = [pick(s.adapter_pages, 1) for _ in range(adapters)]
    max_num_tokens = pick(s.max_num_tokens, token_floor)
    # A chunk unit above the token budget would never fit it: a long prompt never starts.
    chunk_unit_size = min(pick(s.chunk_unit_size, 1), max_num_tokens)
    return EngineConfig(
        device_pages=device_pages,
        host_pages=host_pages,
        draft_device_pages=draft_device_pages,
        draft_host_pages=host_pages if draft else 0,
        tokens_per_block=tokens_per_block,
        lora_device_pages=pick(s.lora_device_pages, max(sizes)),
        lora_host_pages=pick(s.lora_host_pages, max(sizes)),
        adapter_pages=tuple((task, pages) for task, pages in enumerate(sizes, start=1)),
        max_num_tokens=max_num_tokens,
        max_batch_size=pick(s.max_batch_size, 1),
        enable_chunked_context=chunking,
        chunk_unit_size=chunk_unit_size,
        enable_recompute_pause=recompute,
        # Drawn only when the profile asks for either, so other profiles' examples stay put.
        context_chunking_policy=(
            choose(CHUNKING_POLICIES) if s.chunking_policy == "either" else s.chunking_policy
        ),
        recompute_teardown=s.recompute_teardown,
        executor=s.executor,
        inflight_ids=s.inflight_ids,
        hold_reason=s.hold_reason,
        in_flight_pin=s.in_flight_pin,
    )


# ---- reading profiles ----

MAX_FILE_BYTES = 1024 * 1024

# The largest high end each number may have. The workload's sizes bound the work of
# one example (the drain may step 50 + 4 per token of every live request); the
# world's are generous, since pages are counters, but finite.
LIMITS: dict[str, int] = {
    "device_pages": 100_000,
    "host_pages": 100_000,
    "draft_device_pages": 100_000,
    "tokens_per_block": 1024,
    "chunk_unit_size": 4096,
    "max_num_tokens": 65_536,
    "max_batch_size": 1024,
    "lora_device_pages": 100_000,
    "lora_host_pages": 100_000,
    "adapters": 64,
    "adapter_pages": 1024,
    "prompt_len": 256,
    "max_new_tokens": 128,
    "max_requests": 32,
    "steps_per_rule": 32,
}

_SECTIONS: dict[str, dict[str, str]] = {
    "world": {
        "device_pages": "range",
        "lower_tier": "switch",
        "host_pages": "range",
        "draft_pool": "switch",
        "draft_device_pages": "range",
        "tokens_per_block": "range",
        "chunking": "switch",
        "chunk_unit_size": "range",
        "max_num_tokens": "range",
        "max_batch_size": "range",
        "recompute_pause": "switch",
        "lora_device_pages": "range",
        "lora_host_pages": "range",
        "adapters": "range",
        "adapter_pages": "range",
    },
    "workload": {
        "prompt_len": "range",
        "max_new_tokens": "range",
        "max_requests": "int",
        "no_adapter": "bool",
        "weights": "weights",
    },
    "nemesis": {"refuse_resume": "bool", "fail_grow": "bool"},
    "rules": {"cancel": "bool", "steps_per_rule": "range"},
}
# Keys a profile may leave out, with the value each then takes.
_OPTIONAL: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "world": {
        "chunking_policy": ((*CHUNKING_POLICIES, "either"), "FIRST_COME_FIRST_SERVED"),
        "recompute_teardown": (values(RecomputeTeardown), "executor_frees"),
        "executor": (values(Executor), "simple"),
        "inflight_ids": (values(InflightIds), "batch"),
        "hold_reason": (values(HoldReason), "none"),
        "in_flight_pin": (values(InFlightPin), "when_told"),
    },
    "workload": {"lora_path": (("always", "never"), "always")},
}


def _field(where: str, kind: str, value: Any, limit: int | None = None) -> Any:
    if kind == "range":
        ok = (
            isinstance(value, list)
            and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            and 0 <= value[0] <= value[1]
        )
        if not ok:
            raise ScenarioError(f"{where} must be [low, high] with 0 <= low <= high, not {value!r}")
        _within(where, value[1], limit)
        return Range(value[0], value[1])
    if kind == "switch":
        if value not in SWITCHES:
            raise ScenarioError(f"{where} must be one of {', '.join(SWITCHES)}, not {value!r}")
        return value
    if kind == "weights":
        if value not in ("always", "either"):
            raise ScenarioError(f"{where} must be 'always' or 'either', not {value!r}")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise ScenarioError(f"{where} must be true or false, not {value!r}")
        return value
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ScenarioError(f"{where} must be a whole number of at least 1, not {value!r}")
    _within(where, value, limit)
    return value


def _within(where: str, value: int, limit: int | None) -> None:
    if limit is not None and value > limit:
        raise ScenarioError(
            f"{where} reaches {value}, above peftlife's limit of {limit} "
            f"(larger makes one example run for minutes or exhaust memory): lower it to {limit}"
        )


def parse(text: str, name: str, path: str | None = None) -> Scenario:
    """Read a profile's TOML text; every key is required, none unknown. ``path``: the
    file it was read from, when that is not a shipped one."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError(f"scenario {name!r} is not valid TOML: {err}") from err
    fields: dict[str, Any] = {"name": name, "path": path}
    description = data.pop("description", None)
    if not isinstance(description, str):
        raise ScenarioError(f'scenario {name!r} needs a top-level description = "..."')
    fields["description"] = description
    for section, keys in _SECTIONS.items():
        table = data.pop(section, None)
        if not isinstance(table, dict):
            raise ScenarioError(f"scenario {name!r} needs a [{section}] table")
        optional = _OPTIONAL.get(section, {})
        for key, (choices, default) in optional.items():
            value = table.pop(key, default)
            if key == "recompute_teardown":
                # Old names, read with the meaning they had (world/config.py).
                value = LEGACY_TEARDOWN.get(value, value)
            if value not in choices:
                raise ScenarioError(
                    f"{name}: [{section}] {key} must be one of {', '.join(choices)}, not {value!r}"
                )
            fields[key] = value
        unknown = sorted(set(table) - set(keys))
        missing = sorted(set(keys) - set(table))
        if unknown or missing:
            raise ScenarioError(
                f"scenario {name!r} [{section}]: "
                + "; ".join(
                    part
                    for part in (
                        f"unknown keys {unknown}" if unknown else "",
                        f"missing keys {missing}" if missing else "",
                    )
                    if part
                )
                + f"; valid keys are {sorted(keys)}"
                + (f" (optional: {sorted(optional)})" if optional else "")
            )
        for key, kind in keys.items():
            fields[key] = _field(f"{name}: [{section}] {key}", kind, table[key], LIMITS.get(key))
    if data:
        raise ScenarioError(
            f"scenario {name!r}: unknown top-level keys {sorted(data)}; "
            f"valid are description and [{'], ['.join(_SECTIONS)}]"
        )
    return Scenario(**fields)


def _shipped_dir() -> Any:
    return resources.files("peftlife.search") / "strategies"


# The scenario name that stands for every shipped scenario, taking turns.
ALL = "all"


def shipped_names() -> list[str]:
    """The names of the scenario profiles that ship with peftlife, sorted."""
    return sorted(
        entry.name.removesuffix(".toml")
        for entry in _shipped_dir().iterdir()
        if entry.name.endswith(".toml")
    )


# Named groups of shipped scenarios, each a word ``--scenario`` takes, with what it
# holds. Opt-in scenarios are in none: each is asked for by its own name. Every
# executor a scenario can name is one of TensorRT-LLM's PyExecutor loops, so its
# engine's group holds them all until a second world (docs/engines.md) ships.
GROUPS: dict[str, tuple[str, Callable[[Scenario], bool]]] = {
    ALL: ("every shipped scenario", lambda s: True),
    "simple-loop": (
        "every scenario of the simple executor loop (no overlap)",
        lambda s: s.executor == "simple",
    ),
    "overlap-loop": (
        "every scenario of the overlap executor loop",
        lambda s: s.executor == "overlap",
    ),
    "trtllm": (
        "every scenario of TensorRT-LLM's world",
        lambda s: s.executor in values(Executor),
    ),
}


def group(name: str) -> list[str]:
    """The shipped scenarios of a named group, sorted.

    >>> group("overlap-loop")
    ['overlap', 'overlap-empty', 'overlap-kv-pressure', 'upstream-defaults']
    """
    _, holds = GROUPS[name]
    return [n for n in shipped_names() if holds(load(n))]


def expand(words: Sequence[str]) -> list[str]:
    """The scenarios ``--scenario`` words name, groups spelt out, each once, in order.

    >>> expand(["kv-pressure", "simple-loop"])[:3]
    ['kv-pressure', 'chunked-prefill', 'default']
    """
    names = (n for word in words for n in (group(word) if word in GROUPS else [word]))
    return list(dict.fromkeys(names))


# Shipped scenarios whose world holds a stricter rule than upstream's contract. They
# are named ``opt-in/NAME``, are left out of ``all``, and say so in their description.
OPT_IN = "opt-in"


def opt_in_names() -> list[str]:
    """The opt-in scenarios that ship with peftlife (``opt-in/NAME``), sorted.

    >>> opt_in_names()
    ['opt-in/scheduler-teardown']
    """
    folder = _shipped_dir() / OPT_IN
    return sorted(
        f"{OPT_IN}/{entry.name.removesuffix('.toml')}"
        for entry in folder.iterdir()
        if entry.name.endswith(".toml")
    )


@functools.cache
def _shipped(name: str) -> Scenario:
    """A shipped scenario, parsed once a process: its file is the package's and does not
    change, and the gate and ``--scenario all`` ask for each many times (88 parses for
    the gate's nine runs before)."""
    entry = _shipped_dir().joinpath(*f"{name}.toml".split("/"))
    return parse(entry.read_text(encoding="utf-8"), name)


def load(name_or_path: str) -> Scenario:
    """A shipped scenario by name (an opt-in one as ``opt-in/NAME``), or a profile file
    by path.

    >>> load("default").name
    'default'
    """
    if name_or_path in shipped_names() or name_or_path in opt_in_names():
        return _shipped(name_or_path)
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if path.is_dir():
            raise ScenarioError(
                f"scenario {name_or_path!r} is a directory; give a path to a .toml profile "
                f"or one of: {', '.join(shipped_names())}"
            )
        if not path.is_file():
            raise ScenarioError(
                f"scenario file {name_or_path!r} does not exist; give a path to a .toml "
                f"profile or one of: {', '.join(shipped_names())}"
            )
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise ScenarioError(
                    f"scenario file {name_or_path!r} is larger than {MAX_FILE_BYTES // 1024} KiB; "
                    "a profile is a page of TOML"
                )
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ScenarioError(
                f"cannot read scenario file {name_or_path!r} ({err}); give a UTF-8 .toml profile"
            ) from err
        return parse(text, path.stem, str(path.resolve()))
    raise ScenarioError(
        f"unknown scenario {name_or_path!r}; use one of {', '.join(shipped_names())}, "
        f"a group ({', '.join(GROUPS)}) or a path to a .toml profile"
    )


def resolve(scenario: Scenario | str) -> Scenario:
    """``scenario`` as a front door read it, or a name or path read now (``load``): a
    library caller's string. Doors read each scenario once and hand the value down.

    >>> resolve(load("overlap")) is resolve("overlap")
    True
    """
    return scenario if isinstance(scenario, Scenario) else load(scenario)


# ---- the world a SUT is searched in ----


def for_sut(s: Scenario, sut_spec: str, *others: str) -> Scenario:
    """The scenario as ``sut_spec`` is searched in it: under the world settings the SUT
    carries (``peftlife.sut.world_of``: where a catalogue mutant's defect lives), and
    those of ``others`` run beside it (``peftlife diff``'s B): one world for them all.

    >>> for_sut(load("kv-pressure"), "mutant:recompute_pause_terminates").recompute_teardown
    'scheduler_only'
    >>> for_sut(load("kv-pressure"), "reference", "mutant:recompute_pause_terminates").name
    'kv-pressure'
    """
    world = shared_world([sut_spec, *others])
    # The SUT's settings are the scenario's own knobs, by name, as its TOML gives them.
    return attrs.evolve(s, **dict(world)) if world else s  # type: ignore[arg-type]


def shared_world(sut_specs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The world settings every SUT of ``sut_specs`` carries, merged; a ``ScenarioError``
    when two carry different values of one setting (no world has both defects).

    >>> shared_world(["reference", "mutant:recompute_pause_keeps_ownership"])
    (('recompute_teardown', 'scheduler_only'),)
    """
    merged: dict[str, tuple[str, str]] = {}
    for spec in sut_specs:
        for key, value in sut.world_of(spec).world:
            if key in merged and merged[key][0] != value:
                first, by = merged[key]
                raise ScenarioError(
                    f"{by} and {spec} need different worlds ({key} = {first} and {value}); "
                    "compare each with the reference instead"
                )
            merged.setdefault(key, (value, spec))
    return tuple((key, value) for key, (value, _) in merged.items())


def sut_note(sut_spec: str, searched: Sequence[Scenario | str]) -> str | None:
    """The line a door says when searching ``sut_spec`` in the scenarios ``searched`` is
    not what those scenarios say: the world settings its defect lives in replace
    theirs, or none of them can catch it. None when there is nothing to say.

    >>> print(sut_note("mutant:recompute_pause_terminates", ["kv-pressure"]))
    mutant recompute_pause_terminates is a defect where the scheduler owns the recompute \
teardown: running kv-pressure with recompute_teardown = scheduler_only
    >>> sut_note("mutant:schedules_retiring", ["kv-pressure", "overlap"]) is None
    True
    """
    world = sut.world_of(sut_spec)
    if not world.world and not world.needs:
        return None
    loaded = [resolve(s) for s in searched]
    changed = [s.name for s in loaded if not _has(s, world.world)]
    if changed:
        every = len(changed) == len(loaded) > 1
        where = "every scenario" if every else ", ".join(changed)
        return f"{world.lives}: running {where} with {_settings(world.world)}"
    if not catchable(sut_spec, loaded):
        where = ", ".join(s.name for s in loaded)
        has = _settings(tuple((key, getattr(loaded[0], key)) for key, _ in world.needs))
        others = ", ".join(n for n in shipped_names() if _has(load(n), world.needs))
        return (
            f"{world.lives}: it cannot be caught in {where} ({has}); search it where "
            f"{_settings(world.needs)}: {others}"
        )
    return None


def catchable(sut_spec: str, searched: Sequence[Scenario | str]) -> bool:
    """Whether some scenario of ``searched`` has the world settings the SUT needs to be
    caught.

    >>> catchable("mutant:evicts_inflight", ["default"]), catchable("reference", ["default"])
    (False, True)
    """
    needs = sut.world_of(sut_spec).needs
    return not needs or any(_has(resolve(s), needs) for s in searched)


def _has(s: Scenario, settings: tuple[tuple[str, str], ...]) -> bool:
    return all(getattr(s, key) == value for key, value in settings)


def _settings(settings: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{key} = {value}" for key, value in settings)
