"""Hypothesis internals peftlife leans on, in one place, each with a way back.

Two patches make a search cheaper and repeatable: ``stable_constants`` pins
the pool of constants Hypothesis mines from loaded modules, and
``digests_once`` computes a machine's source digest once per search; one
makes a search find more: ``every_rule_enabled`` turns off Hypothesis's
per-example choice of which rules a machine may draw. Two
reads follow Hypothesis where it has no public word: ``forced_seed`` (its
``--hypothesis-seed``) and ``observing`` (its observability callbacks). The
pytest plugin reads Hypothesis's statistics collector (``statistics``). All
touch private names; ``missing()`` lists the ones this Hypothesis lacks, and
the suite fails naming the version when one moves, while a user's run
degrades to doing without it. No other module touches a private name of
Hypothesis (the suite checks it); a machine's ``TestCase`` is replaced through
the public attribute (``peftlife.search.hunt``), not Hypothesis's private hook.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# The private names each reader below needs, by module.
_CONSTANTS = ("_local_constants", "_sys_modules_len", "_seen_modules", "CONSTANTS_CACHE")
_PRIVATE: dict[str, tuple[str, ...]] = {
    "hypothesis.internal.conjecture.providers": _CONSTANTS,
    "hypothesis.core": ("function_digest", "global_force_seed"),
    "hypothesis.internal.reflection": ("function_digest",),
    "hypothesis.internal.observability": ("with_observability_callback",),
    # A machine's rule strategy and the swarm draw it makes (``every_rule_enabled``).
    "hypothesis.stateful": ("function_digest", "RuleStrategy"),
    # The pytest plugin's (``peftlife.doors.plugin``): statistics of a machine's case.
    "hypothesis.statistics": ("collector", "describe_statistics"),
}


def missing() -> list[str]:
    """The private names peftlife reads or patches that this Hypothesis does not have."""
    gone = []
    for module_name, names in _PRIVATE.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            gone.append(module_name)
            continue
        gone += [f"{module_name}.{name}" for name in names if not hasattr(module, name)]
    return gone


def forced_seed() -> int | None:
    """The seed Hypothesis was told to use (pytest's ``--hypothesis-seed``), if any."""
    from hypothesis import core

    forced = getattr(core, "global_force_seed", None)
    return forced if isinstance(forced, int) else None


def statistics() -> tuple[Any, Callable[[Any], str]]:
    """Hypothesis's statistics collector (a context variable told each test's
    statistics) and its describer, which a unittest case does not get by itself."""
    from hypothesis.statistics import collector, describe_statistics

    return collector, describe_statistics


@contextmanager
def observing(callback: Callable[[Any], None]) -> Iterator[None]:
    """Hypothesis's observability records of the tests run inside go to ``callback``
    (nothing, if this Hypothesis moved its hook)."""
    try:
        from hypothesis.internal.observability import with_observability_callback
    except ImportError:
        yield
        return
    with with_observability_callback(callback):
        yield


class _EveryRule:
    """Hypothesis's feature flags as a machine's rule strategy reads them: all on."""

    def is_enabled(self, name: Any) -> bool:
        return True


def every_rule_enabled(machine: Any) -> None:
    """Let every example of ``machine`` draw any of its rules.

    Hypothesis's swarm testing drops a random subset of a machine's rules from
    each example. A lifecycle defect needs several letters in one example (the
    executor's iterations, a fault, submits beyond what the device holds), and
    with four to six rules only about a fifth of the examples kept them all:
    the others found the catalogue's defects at a half to a tenth of the rate
    (bench/detection.py). The scenario says which letters a search has. Reads
    the machine's private rule strategy, so if Hypothesis moves it this does
    nothing and the search keeps Hypothesis's swarm.
    """
    strategy = getattr(machine, "_rules_strategy", None)
    if strategy is not None and hasattr(strategy, "enabled_rules_strategy"):
        from hypothesis import strategies as st

        strategy.enabled_rules_strategy = st.just(_EveryRule())


@contextmanager
def stable_constants() -> Iterator[None]:
    """Search as if no local module had been imported.

    Hypothesis mixes constants mined from every loaded local module into its
    draws, so the same seed would search differently depending on what the
    front door happened to import (the command line loads other modules than
    pytest does). Pinning that pool to empty for the search keeps one seed, one
    scenario and one SUT to one trace. It touches Hypothesis internals, so if
    they move this degrades to doing nothing rather than failing.
    """
    try:
        from hypothesis.internal.conjecture import providers as p

        saved = (p._local_constants, p._sys_modules_len, set(p._seen_modules))
        empty = type(p._local_constants)()
        cache = p.CONSTANTS_CACHE.cache
    except (ImportError, AttributeError):
        yield
        return
    p._local_constants = empty
    p._seen_modules.update(id(m) for m in list(sys.modules.values()))
    p._sys_modules_len = len(sys.modules)
    cache.clear()
    try:
        yield
    finally:
        p._local_constants, p._sys_modules_len = saved[0], saved[1]
        p._seen_modules.clear()
        p._seen_modules.update(saved[2])
        cache.clear()


@contextmanager
def digests_once() -> Iterator[None]:
    """Compute Hypothesis's source digest of a machine once, not on every run.

    Each run of a state machine hashes the source of the machine class and of
    its own runner, parsing whole modules, which costs more than a short slice
    of examples. Within a search the digest of the same code never changes, so
    it is cached for the duration. Like ``stable_constants`` this touches
    Hypothesis internals and degrades to doing nothing if they move.
    """
    try:
        from hypothesis import core, stateful
        from hypothesis.internal.reflection import function_digest
    except ImportError:
        yield
        return
    if not (hasattr(core, "function_digest") and hasattr(stateful, "function_digest")):
        yield
        return
    saved = (core.function_digest, stateful.function_digest)
    memo: dict[tuple[object, ...], bytes] = {}

    def digest(fn: Any) -> bytes:
        key = (
            getattr(fn, "__module__", None),
            getattr(fn, "__qualname__", None),
            getattr(fn, "__code__", None),
            getattr(fn, "_hypothesis_internal_add_digest", None),
        )
        if key not in memo:
            memo[key] = function_digest(fn)
        return memo[key]

    core.function_digest = stateful.function_digest = digest
    try:
        yield
    finally:
        core.function_digest, stateful.function_digest = saved
