"""A SUT resolved once per command: its string and its factory, handed down.

A front door resolves the SUT string it is given once (``resolve``: loaded,
and its wiring checked) and hands the value to the search, the shrinker, the
replays and the reports, which build schedulers with its factory instead of
loading the string again. So a ``trtllm:`` SUT executes upstream's sources
once per command, a module SUT's import-time code runs once, and every
supervised child, forked from the door's process, inherits the loaded
factory. Where a ``Resolved`` is taken a string still does (a library
caller's): ``loaded`` loads it there, as before.
"""

from __future__ import annotations

import attrs

from peftlife.sut.loader import load
from peftlife.sut.wiring import wired
from peftlife.world.protocol import SchedulerFactory


# Compared by identity: two resolutions of one string are two loads (bisect writes each
# commit's files to a folder of its own, and a cache keyed on them must keep them apart).
@attrs.frozen(eq=False)
class Resolved:
    """A SUT string and the factory it resolved to."""

    spec: str
    factory: SchedulerFactory

    def __str__(self) -> str:
        return self.spec


def resolve(sut: Resolved | str, *, deadline: float | None = None) -> Resolved:
    """Load a SUT string and check its wiring (``wired``), once; front doors call
    this. A SUT resolved already is returned as it is.

    >>> resolve("reference").factory.__name__
    'ReferenceScheduler'
    """
    if isinstance(sut, Resolved):
        return sut
    return Resolved(sut, wired(sut, deadline=deadline))


def loaded(sut: Resolved | str) -> Resolved:
    """``sut`` as it was resolved, or a string loaded now (without the wiring check).

    >>> loaded("mutant:draft_not_suspended").factory.__name__
    'DraftNotSuspended'
    """
    return sut if isinstance(sut, Resolved) else Resolved(sut, load(sut))
