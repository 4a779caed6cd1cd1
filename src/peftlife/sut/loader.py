"""How a SUT is named and loaded.

A SUT is named by a string, the same at every front door:

* ``reference``: peftlife's own correct scheduler;
* ``mutant:NAME``: the reference with one known defect (see ``peftlife.sut.mutants``);
* ``trtllm:PATH`` or ``trtllm:PATH:ClassName``: TensorRT-LLM's scheduler from a
  checkout at ``PATH`` (see ``peftlife.sut.adapters.tensorrt_llm``);
* ``package.module:attr``: any importable factory ``Environment -> Scheduler``.
"""

from __future__ import annotations

import importlib

from peftlife.sut import mutants
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.protocol import SchedulerFactory


class SUTError(ValueError):
    """A SUT string that does not name a scheduler; the message says how to fix it."""


FORMS = "'reference', 'mutant:NAME', 'trtllm:PATH[:ClassName]' or 'package.module:attr'"


def load(spec: str) -> SchedulerFactory:
    """Resolve a SUT string to a scheduler factory.

    >>> load("reference").__name__
    'ReferenceScheduler'
    >>> load("mutant:draft_not_suspended").__name__
    'DraftNotSuspended'
    """
    if spec == "reference":
        return ReferenceScheduler
    if spec.startswith("mutant:"):
        name = spec.removeprefix("mutant:")
        mutant = mutants.BY_NAME.get(name)
        if mutant is None:
            raise SUTError(f"unknown mutant {name!r}; known mutants: {', '.join(mutants.BY_NAME)}")
        return mutant.scheduler
    if spec.startswith("trtllm:"):
        return _load_trtllm(spec.removeprefix("trtllm:"))
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SUTError(f"unknown SUT {spec!r}: use {FORMS}; mutants: {', '.join(mutants.BY_NAME)}")
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


def _load_trtllm(path: str) -> SchedulerFactory:
    # Imported here: the adapter is only needed by the runs that name it.
    from peftlife.sut.adapters import tensorrt_llm

    try:
        return tensorrt_llm.load(path)
    except tensorrt_llm.CheckoutError as err:
        raise SUTError(f"trtllm:{path}: {err}") from err
