"""How a SUT is named and loaded.

A SUT is named by a string, the same at every front door:

* ``reference``: peftlife's own correct scheduler;
* ``mutant:NAME``: the reference with one known defect (see ``peftlife.sut.mutants``);
* ``trtllm:PATH`` or ``trtllm:PATH:ClassName``: TensorRT-LLM's scheduler from a
  checkout at ``PATH``, or with no ``PATH`` from the installed package (see
  ``peftlife.sut.adapters.tensorrt_llm``);
* ``package.module:attr``: any importable factory ``Environment -> Scheduler``;
  ``package.module:attr@FOLDER`` imports it from ``FOLDER`` (what ``peftlife
  bisect`` names each commit's copy of a scheduler written to the protocol).

``load`` gives the factory, ``world_of`` the world settings a search of the SUT
runs under (a catalogue mutant carries the world its defect lives in).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import attrs

from peftlife.sut import mutants
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world import untrusted
from peftlife.world.protocol import SchedulerFactory


class SUTError(ValueError):
    """A SUT string that does not name a scheduler; the message says how to fix it."""


# Seconds a SUT module may take to import: long enough for a framework it imports
# (torch, TensorRT-LLM), short enough that a module stuck at import is told, not waited on.
IMPORT_DEADLINE = 300.0

FORMS = "'reference', 'mutant:NAME', 'trtllm:PATH[:ClassName]' or 'package.module:attr'"


@attrs.frozen
class SutWorld:
    """The world a SUT is searched in, where it differs from what a scenario says."""

    # World settings (``EngineConfig`` names and values) every search of this SUT runs
    # under, whatever the scenario says: where a catalogue mutant's defect lives.
    world: tuple[tuple[str, str], ...] = ()
    # World settings without which it cannot be caught (it schedules as the reference).
    needs: tuple[tuple[str, str], ...] = ()
    # What the SUT is and where its defect lives, in words, for the line a door says.
    lives: str = ""


def world_of(spec: str) -> SutWorld:
    """The world settings a SUT string is searched under, without loading it.

    Only a catalogue mutant has any: it carries the world its defect lives in.

    >>> world_of("mutant:recompute_pause_terminates").world
    (('recompute_teardown', 'scheduler_only'),)
    >>> world_of("mutant:schedules_retiring").needs
    (('executor', 'overlap'),)
    >>> world_of("reference")
    SutWorld(world=(), needs=(), lives='')
    """
    if not spec.startswith("mutant:"):
        return SutWorld()
    mutant = _mutant(spec.removeprefix("mutant:"))
    lives = f"mutant {mutant.name} is {mutant.lives}" if mutant.lives else ""
    return SutWorld(mutant.world, mutant.needs, lives)


def _mutant(name: str) -> mutants.Mutant:
    mutant = mutants.BY_NAME.get(name)
    if mutant is None:
        raise SUTError(f"unknown mutant {name!r}; known mutants: {', '.join(mutants.BY_NAME)}")
    return mutant


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
        return _mutant(spec.removeprefix("mutant:")).scheduler
    if spec.startswith("trtllm:"):
        return _load_trtllm(spec.removeprefix("trtllm:"))
    named, _, folder = spec.partition("@")
    module_name, sep, attr = named.partition(":")
    if not sep or not module_name or not attr:
        raise SUTError(f"unknown SUT {spec!r}: use {FORMS}; mutants: {', '.join(mutants.BY_NAME)}")
    if folder and not Path(folder).is_dir():
        raise SUTError(f"SUT {spec!r}: {folder!r} is not a folder; name the folder to import from")
    try:
        module = untrusted.call(
            lambda: _import_from(folder, module_name) if folder else _import(module_name),
            f"importing SUT module {module_name!r}",
            deadline=IMPORT_DEADLINE,
            arm=True,
        )
    except untrusted.Failed as failed:
        err = failed.cause
        # A TypeError or ValueError before any of the module's code ran (no frame of
        # its own): a relative or empty name, which import_module refuses.
        if (isinstance(err, TypeError | ValueError) and not failed.error.frames) or (
            isinstance(err, ImportError) and _is_missing(err, module_name)
        ):
            raise SUTError(
                f"cannot import {module_name!r} for SUT {spec!r} ({err}); "
                f"check it is on sys.path, or use {FORMS}"
            ) from err
        raise _import_raised(module_name, failed) from err
    try:
        # A module __getattr__ of its own is the module's code too.
        factory = untrusted.call(
            lambda: getattr(module, attr, None),
            f"SUT module {module_name!r}",
            deadline=IMPORT_DEADLINE,
            arm=True,
        )
    except untrusted.Failed as failed:
        raise _import_raised(module_name, failed) from failed.cause
    if not callable(factory):
        raise SUTError(
            f"{module_name!r} has no callable {attr!r}; a SUT names a factory "
            "Environment -> Scheduler"
        )
    return factory  # type: ignore[no-any-return]


def _import(module_name: str) -> ModuleType:
    return importlib.import_module(module_name)


def _import_from(folder: str, module_name: str) -> ModuleType:
    """Import ``module_name`` afresh from ``folder``, leaving ``sys.modules`` and
    ``sys.path`` as they were: one process loads the same package from the folder of
    each commit bisect probes, and each load must see its own commit's files."""
    top = module_name.partition(".")[0]

    def ours(name: str) -> bool:
        return name == top or name.startswith(f"{top}.")

    saved = {name: module for name, module in sys.modules.items() if ours(name)}
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, folder)
    importlib.invalidate_caches()
    try:
        return importlib.import_module(module_name)
    finally:
        sys.path.remove(folder)
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


def _is_missing(err: ImportError, module_name: str) -> bool:
    """Whether the import failed because the SUT's module (or a parent) is not there,
    rather than because the module itself imports something missing."""
    missing = getattr(err, "name", None)
    return isinstance(err, ModuleNotFoundError) and (
        missing is None or module_name == missing or module_name.startswith(f"{missing}.")
    )


def _import_raised(module_name: str, failed: untrusted.Failed) -> SUTError:
    """The one line for a SUT module whose own code failed while it was imported."""
    if failed.error.kind == "scheduler_hung":
        return SUTError(
            f"importing SUT module {module_name!r} did not end within {IMPORT_DEADLINE:g} s; "
            "fix the module (run with -v for the traceback)"
        )
    return SUTError(
        f"importing SUT module {module_name!r} raised {describe_error(failed.cause)}; "
        "fix the module (run with -v for the traceback)"
    )


def describe_error(err: BaseException) -> str:
    """``Type: message (at file:line)``, the line being the syntax error's or the
    innermost frame's outside the import machinery.

    >>> describe_error(ValueError("boom"))
    'ValueError: boom'
    """
    if isinstance(err, SyntaxError):
        return f"SyntaxError: {err.msg} (at {err.filename}:{err.lineno})"
    place = ""
    tb = err.__traceback__
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith("<frozen"):
            place = f" (at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno})"
        tb = tb.tb_next
    return f"{type(err).__name__}: {err}{place}"


def _load_trtllm(path: str) -> SchedulerFactory:
    # Imported here: the adapter is only needed by the runs that name it.
    from peftlife.sut.adapters import tensorrt_llm

    try:
        return tensorrt_llm.load(path)
    except tensorrt_llm.CheckoutError as err:
        raise SUTError(f"trtllm:{path}: {err}") from err
