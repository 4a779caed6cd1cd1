"""The invariants as records: each with its number, its check, where it applies, its meaning,
its priority and its source.

A record carries its own applicability, so no check asks which executor runs:
``check`` runs, in priority order, the checks of the records a world's
configuration holds the scheduler to, and ``not_checked`` names those a world
leaves unjudged although it could break them (a run's "not checked here"
verdict). ``peftlife invariants`` and the table of docs/invariants.md are made
from these records, and the summaries' notes from ``not_checked``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from operator import attrgetter
from typing import Literal

import attrs

from peftlife.checker import invariants as inv
from peftlife.checker.invariants import Check, Violation, kept
from peftlife.world.config import EngineConfig
from peftlife.world.snapshot import Snapshot

Where = Callable[[EngineConfig], bool]


def _every_world(_: EngineConfig) -> bool:
    return True


@attrs.frozen
class Scope:
    """Where an invariant applies, and where peftlife holds the scheduler to it.

    ``applies``: the world has something the rule judges (only the overlap executor
    has retiring requests or a batch on the device). ``checked``: within that, the
    worlds where it is checked; elsewhere the verdict is "not checked here", for the
    reason ``unchecked`` gives.
    """

    text: str
    applies: Where
    checked: Where
    unchecked: str = ""


EVERY_WORLD = Scope("every world", _every_world, _every_world)
OVERLAP = Scope("the overlap executor", attrgetter("overlap"), attrgetter("overlap"))
IN_FLIGHT = Scope(
    'the overlap executor, where the scheduler is told batch N (`inflight_ids = "batch"`) '
    'or the world opts in (`in_flight_pin = "always"`)',
    attrgetter("overlap"),
    attrgetter("in_flight_checked"),
    unchecked='the scheduler is told nothing in flight there (inflight_ids = "empty"), so '
    "moving a request that is on the device is the executor's fault, not the scheduler's",
)

SourceKind = Literal["upstream code", "upstream test", "peftlife"]


@attrs.frozen
class Source:
    """Where a rule comes from: upstream's code (file and function) or test, or peftlife's
    own stricter rule; ``says`` is what that source has to do with it."""

    kind: SourceKind
    ref: str = ""
    says: str = ""

    def __str__(self) -> str:
        if self.kind == "peftlife":
            return f"peftlife's rule: {self.says}"
        named = self.ref if self.kind == "upstream code" else f"upstream's test {self.ref}"
        return f"{named} ({self.says})" if self.says else named


def _code(ref: str, says: str = "") -> Source:
    return Source("upstream code", ref, says)


def _ours(says: str) -> Source:
    return Source("peftlife", says=says)


# A check's place in the order: the step's own faults first (when the engine met one,
# the broken state the other checks then see follows from it, and the first violation
# names the cause), then a malformed answer (the executor refuses to run a batch it
# cannot read, and what that refusal leaves undone, a device pin say, is flagged too
# but follows from it), then every other rule in the order of its number.
FAULT, ENGINE_FAULT, MALFORMED, RULE = 0, 1, 2, 3


# What a run in one world learns of an invariant, beside held or broken.
Status = Literal["checked", "not checked here", "does not apply"]


@attrs.frozen
class Invariant:
    """One invariant: its name (reports, CI filters and the mutant catalogue use it), its
    number in docs/invariants.md, its check of a snapshot (None for the drain, which
    steps an engine: ``checker.drain``), where it applies, what it means, its place in
    the order, and its sources."""

    name: str
    number: str
    check: Check | None
    scope: Scope
    meaning: str
    sources: tuple[Source, ...]
    priority: int = RULE
    # What the rule says beyond its one line, where it says more.
    detail: str = ""

    @property
    def label(self) -> str:
        """Its name and number, as a report names it: ``in_flight_pin (14)``."""
        return f"{self.name} ({self.number})" if self.number else self.name

    @property
    def words(self) -> str:
        """The whole rule in words: its meaning, then its detail."""
        return f"{self.meaning} {self.detail}" if self.detail else self.meaning

    def status(self, config: EngineConfig) -> Status:
        """What a run in this world learns of it (``"not checked here"``, Jepsen's unknown)."""
        if not self.scope.applies(config):
            return "does not apply"
        return "checked" if self.scope.checked(config) else "not checked here"


REGISTRY: tuple[Invariant, ...] = (
    Invariant(
        "ownership_follows_residency",
        "1",
        inv.ownership_follows_residency,
        EVERY_WORLD,
        "Started and ACTIVE owns actively (a context request not run in this iteration "
        "may still be paused: the executor registers it when it runs); started and "
        "SUSPENDED is paused; unstarted and never registered owns nothing; "
        "recompute-pending is not active (paused, where the executor leaves the teardown "
        "to the scheduler: opt-in).",
        (
            _code("the C++ `PeftCacheManager::updateTaskState`", "the sets, and pause"),
            _code(
                "`scheduler_v2.py` `_suspend_request`",
                "post-fix: a suspension releases with pause, a resume registers",
            ),
            _code(
                "`py_executor.py` `_terminate_recompute_paused_requests`",
                "the recompute-pending clause",
            ),
            _code(
                "`resource_manager.py` `PeftCacheManager.prepare_resources`",
                "a context request not run yet may still be paused",
            ),
            _ours(
                "recompute-pending is paused where the executor leaves the teardown to the "
                'scheduler (opt-in: `recompute_teardown = "scheduler_only"`)'
            ),
        ),
    ),
    Invariant(
        "exclusive_ownership",
        "2",
        inv.exclusive_ownership,
        EVERY_WORLD,
        "No request is both active and paused on one adapter.",
        (_code("the C++ `PeftCacheManager`"),),
    ),
    Invariant(
        "no_phantom_owner",
        "3",
        inv.no_phantom_owner,
        EVERY_WORLD,
        "Every owner is a live request that registered at some point; no release with "
        "pause names a request that owned nothing.",
        (
            _code(
                "the C++ `PeftCacheManager`",
                "a release with pause inserts even a request that was never active: the phantom",
            ),
        ),
    ),
    Invariant(
        "no_duplicate_registration",
        "4",
        inv.no_duplicate_registration,
        EVERY_WORLD,
        "Registration is the executor's, except on resume: the scheduler registers only a "
        "started request it resumed in this pass, after its allocation succeeded, once; "
        "never a first chunk, a recompute-pending request, or one already active.",
        (
            _code(
                "`scheduler_v2.py`",
                "post-fix: registers on resume only, after the allocation",
            ),
            _ours(
                "the scheduler never registers a first chunk or a recompute-pending "
                "request, since `prepare_resources` registers them"
            ),
        ),
    ),
    Invariant(
        "device_pin_follows_ownership",
        "5",
        inv.device_pin_follows_ownership,
        EVERY_WORLD,
        "An adapter has active owners if and only if it is in use on the device.",
        (_code("the C++ `PeftCacheManager`"),),
    ),
    Invariant(
        "host_pin_follows_ownership",
        "6",
        inv.host_pin_follows_ownership,
        EVERY_WORLD,
        "An adapter with any owner, active or paused, is in use on the host.",
        (_code("the C++ `PeftCacheManager`"),),
    ),
    Invariant(
        "scheduled_owned_and_resident",
        "7",
        inv.scheduled_owned_and_resident,
        EVERY_WORLD,
        "Right after prepare_resources every scheduled request owns its adapter actively "
        "and has KV ACTIVE, with room for this iteration's tokens, in every pool.",
        (
            _code("`resource_manager.py` `PeftCacheManager.prepare_resources`"),
            _code("`resource_manager.py` `PeftCacheManager.ensure_batch`"),
        ),
    ),
    Invariant(
        "output_lists_well_formed",
        "8",
        inv.output_lists_well_formed,
        EVERY_WORLD,
        "The four lists are disjoint, hold live schedulable requests in the right state; "
        "paused ones are started and not ACTIVE; recompute-paused ones hold no KV.",
        (_code("`scheduler.py` `SchedulerOutput`"), _code("`scheduler_v2.py`", "its budgets")),
        priority=MALFORMED,
    ),
    Invariant(
        "scheduler_writes_only_its_own",
        "8b",
        inv.scheduler_writes_only_its_own,
        EVERY_WORLD,
        "Of a request's fields the scheduler writes only its own (context_chunk_size and "
        "upstream's scratch fields); the engine records and undoes any other write.",
        (_ours("a scheduler writes only its own fields"),),
    ),
    Invariant(
        "draft_mirrors_target",
        "9",
        inv.draft_mirrors_target,
        EVERY_WORLD,
        "A request's draft residency equals its target residency.",
        (_code("`scheduler_v2.py`", "its joint draft pairing"),),
    ),
    Invariant(
        "pages_conserved",
        "10",
        inv.pages_conserved,
        EVERY_WORLD,
        "On every tier free plus held equals capacity; only live requests hold pages.",
        (_ours("a check of the world itself"),),
    ),
    Invariant(
        "no_scheduler_caused_fault",
        "11",
        inv.no_scheduler_caused_fault,
        EVERY_WORLD,
        "ensure_batch never raises for a scheduled batch, and a request registered before "
        "is never refused as not cached, whoever called and whoever caught it (the ledger, "
        "not what reached the engine).",
        (
            _code(
                "`py_executor.py`",
                "nothing catches an exception from `prepare_resources`, so the loop dies",
            ),
            _code(
                "`resource_manager.py` `add_request_peft`",
                'reload from `py_lora_path`, else "not cached"',
            ),
        ),
        priority=ENGINE_FAULT,
    ),
    Invariant(
        "drain_completes",
        "12",
        None,
        EVERY_WORLD,
        "With arrivals stopped and faults cleared every request ends, and then no adapter "
        "is owned or pinned and no page is held.",
        (
            _code(
                "`scheduler_v2.py` `_detect_deadlock`",
                "upstream stops after 1000 stalled passes",
            ),
            _ours("the bound"),
        ),
    ),
    Invariant(
        "retiring_keeps_its_place",
        "13",
        inv.retiring_keeps_its_place,
        OVERLAP,
        "A retiring request (GENERATION_TO_COMPLETE) keeps KV ACTIVE in every pool and its "
        "adapter owned actively until the executor frees it after its last read-back.",
        (
            _code(
                "`py_executor.py` `_update_generation_requests_that_will_complete_next_iteration`"
            ),
            _code(
                "`scheduler_v2.py` `_is_recompute_pause_candidate`",
                "excludes `GENERATION_TO_COMPLETE`",
            ),
        ),
    ),
    Invariant(
        "in_flight_pin",
        "14",
        inv.in_flight_pin,
        IN_FLIGHT,
        "Between batch N's launch and its read-back, every member keeps its KV in every "
        "pool and every adapter it uses stays in use on the device.",
        (
            _code(
                "`scheduler_v2.py`",
                "the phase-1 filter, `_is_evictable` and `_is_recompute_pause_candidate` "
                "skip `inflight_request_ids`",
            ),
            _ours(
                'checked when the scheduler is told nothing (`in_flight_pin = "always"`, opt-in)'
            ),
        ),
        detail='Told nothing (inflight_ids = "empty") it is opt-in (in_flight_pin = '
        '"always"): KV or an adapter released while the batch that uses it may still run, '
        "a real fault only when device work not ordered after that batch's forward reuses "
        "what was released.",
    ),
    Invariant(
        "nothing_after_teardown",
        "15",
        inv.nothing_after_teardown,
        EVERY_WORLD,
        "Once the executor tore a request down in an iteration (its recompute teardown, or "
        "its final free), only idempotent frees reach it: no allocation, no registration, "
        "no release with pause.",
        (
            _code("`py_executor.py` `free_resources`", "every one of the teardown is idempotent"),
            _code(
                "`py_executor.py` `_pause_recompute_paused_requests`",
                "skips a finished request",
            ),
            Source("upstream test", "`test_recompute_pause_skips_request_finished_during_overlap`"),
        ),
        detail="A second free is no violation: py_executor.py frees a recompute-paused "
        "request that then finishes twice, and every free_resources there is idempotent; the "
        "reset for recompute skips a finished request.",
    ),
    Invariant(
        "dead_stay_dead",
        "16",
        inv.dead_stay_dead,
        OVERLAP,
        "A request the executor freed is in no ownership set and in no later output list.",
        (
            _code(
                "`py_executor.py` `_handle_responses`",
                "a finished request leaves `active_requests`",
            ),
        ),
    ),
    Invariant(
        "scheduler_protocol",
        "",
        inv.scheduler_protocol,
        EVERY_WORLD,
        "The scheduler returned a readable output in time and did not raise.",
        (_code("`scheduler.py` `SchedulerOutput`"),),
        priority=FAULT,
    ),
)

BY_NAME: dict[str, Invariant] = {invariant.name: invariant for invariant in REGISTRY}


@functools.lru_cache(maxsize=64)
def checks(config: EngineConfig) -> tuple[Invariant, ...]:
    """The snapshot checks a world holds the scheduler to, in the order they run."""
    held = (i for i in REGISTRY if i.check is not None and i.status(config) == "checked")
    return tuple(sorted(held, key=attrgetter("priority")))


def check(snapshot: Snapshot, config: EngineConfig) -> list[Violation]:
    """Every invariant of a snapshot of a world: faults and a malformed answer first, then
    the order of the rules' numbers.

    >>> from peftlife.sut.reference import ReferenceScheduler
    >>> from peftlife.world.engine import Engine
    >>> engine = Engine(EngineConfig(), ReferenceScheduler)
    >>> check(engine.step(), engine.config)
    []
    """
    return _held_to(snapshot, _check_functions(config))


def checker(config: EngineConfig) -> Callable[[Snapshot], list[Violation]]:
    """``check`` for the snapshots of one world, its checks looked up once: a world is
    checked after every iteration, and finding its checks hashes the whole configuration."""
    return functools.partial(_held_to, functions=_check_functions(config))


@functools.lru_cache(maxsize=64)
def _check_functions(config: EngineConfig) -> tuple[Check, ...]:
    return tuple(i.check for i in checks(config) if i.check is not None)


def _held_to(snapshot: Snapshot, functions: tuple[Check, ...]) -> list[Violation]:
    found = [v for check in functions for v in check(snapshot)]
    # Most snapshots hold: no violation to weigh against the exclusions in force.
    return kept(found) if found else found


def not_checked(config: EngineConfig) -> tuple[Invariant, ...]:
    """The invariants a world could break but does not check (its "not checked here").

    >>> [i.label for i in not_checked(EngineConfig(executor="overlap", inflight_ids="empty"))]
    ['in_flight_pin (14)']
    >>> not_checked(EngineConfig())
    ()
    """
    return tuple(i for i in REGISTRY if i.status(config) == "not checked here")


def names() -> tuple[str, ...]:
    """Every invariant name a finding can carry, in the order of their numbers."""
    return tuple(BY_NAME)
