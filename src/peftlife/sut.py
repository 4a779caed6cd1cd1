"""The system under test: the scheduler protocol, and how a SUT is named and loaded.

A SUT is named by a string, the same at every front door:

* ``reference``: peftlife's own correct scheduler;
* ``mutant:NAME``: the reference with one known defect (see ``peftlife.mutants``);
* ``package.module:attr``: any importable factory ``Environment -> Scheduler``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import attrs

from peftlife.request import Request

if TYPE_CHECKING:
    from peftlife.engine import Environment


@attrs.define
class SchedulerOutput:
    """What one scheduling pass decides: four pairwise disjoint lists."""

    context_requests: list[Request] = attrs.field(factory=list)
    generation_requests: list[Request] = attrs.field(factory=list)
    paused_requests: list[Request] = attrs.field(factory=list)
    recompute_paused_requests: list[Request] = attrs.field(factory=list)


class Scheduler(Protocol):
    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput: ...


SchedulerFactory = Callable[["Environment"], Scheduler]


class SUTError(ValueError):
    """A SUT string that does not name a scheduler; the message says how to fix it."""


FORMS = "'reference', 'mutant:NAME' or 'package.module:attr'"


def load(spec: str) -> SchedulerFactory:
    """Resolve a SUT string to a scheduler factory.

    >>> load("reference").__name__
    'ReferenceScheduler'
    """
    if spec == "reference":
        from peftlife.scheduler import ReferenceScheduler

        return ReferenceScheduler
    if spec.startswith("mutant:"):
        from peftlife import mutants

        return mutants.factory(spec.removeprefix("mutant:"))
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        from peftlife.mutants import BY_NAME

        raise SUTError(f"unknown SUT {spec!r}: use {FORMS}; mutants: {', '.join(BY_NAME)}")
    try:
        module = importlib.import_module(module_name)
    except (ImportError, TypeError, ValueError) as err:  # TypeError: a relative name
        raise SUTError(
            f"cannot import {module_name!r} for SUT {spec!r} ({err}); "
            f"check it is on sys.path, or use {FORMS}"
        ) from err
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise SUTError(
            f"{module_name!r} has no callable {attr!r}; a SUT names a factory "
            "Environment -> Scheduler"
        )
    return factory  # type: ignore[no-any-return]
