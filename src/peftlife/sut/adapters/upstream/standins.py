"""Stand-in modules that record each name asked of them and lack, and their install.

An upstream engine's files import modules that cannot load on a CPU (torch,
CUDA bindings, a GPU platform) for a few names each. An adapter builds fresh
``StandInModule`` objects holding exactly those names; a name they lack raises
``MissingStandIn`` (an ``AttributeError``, so ``from m import name`` turns it
into an ``ImportError`` as Python does) and is recorded, so the loader can say
which module and name a newer release needs. ``installed()`` puts the modules
in ``sys.modules`` for the duration of a call and takes them out again, so
nothing is left behind and a real installed engine is never shadowed outside
the call.
"""

from __future__ import annotations

import importlib.abc
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any


class MissingStandIn(AttributeError):
    """An upstream module asked a stand-in for a name it does not provide."""

    def __init__(self, module: str, name: str) -> None:
        super().__init__(f"module {module!r} has no attribute {name!r}")
        self.module = module
        self.name = name


class StandInModule(types.ModuleType):
    """A module with a fixed set of names; any other name is a recorded miss.

    >>> misses: list[MissingStandIn] = []
    >>> torch = StandInModule("torch", {"float16": "f16"}, misses)
    >>> torch.float16, hasattr(torch, "cuda"), misses[0].name
    ('f16', False, 'cuda')
    """

    def __init__(self, name: str, names: Mapping[str, object], misses: list[MissingStandIn]):
        super().__init__(name, f"peftlife stand-in for {name}")
        self.__dict__.update(names)
        self.__dict__["_misses"] = misses

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        miss = MissingStandIn(self.__name__, name)
        self.__dict__["_misses"].append(miss)
        raise miss


def as_package(module: types.ModuleType) -> types.ModuleType:
    """``module`` made a package, so that its submodules resolve."""
    module.__path__ = []
    return module


class _BlockOthers(importlib.abc.MetaPathFinder):
    """While stand-ins are installed, no real submodule of ``root`` may load under them."""

    def __init__(self, root: str, known: Sequence[str]) -> None:
        self.root = root
        self.known = frozenset(known)

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        inside = fullname == self.root or fullname.startswith(self.root + ".")
        if inside and fullname not in self.known:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


_ABSENT = object()


@contextmanager
def installed(modules: Mapping[str, types.ModuleType], hide: str | None = None) -> Iterator[None]:
    """Put ``modules`` in ``sys.modules`` for the block, then restore what was there.

    With ``hide`` (a top-level package name), whatever else is already
    imported under it (a real install) is taken out for the block, and no
    other module under it may load.

    >>> with installed({"engine.example": types.ModuleType("engine.example")}):
    ...     "engine.example" in sys.modules
    True
    >>> "engine.example" in sys.modules
    False
    """
    saved = {name: sys.modules.get(name, _ABSENT) for name in modules}
    hidden: dict[str, types.ModuleType] = {}
    blocker = None
    if hide is not None:
        hidden = {
            name: mod
            for name, mod in sys.modules.items()
            if (name == hide or name.startswith(hide + ".")) and name not in modules
        }
        for name in hidden:
            del sys.modules[name]
        blocker = _BlockOthers(hide, list(modules))
        sys.meta_path.insert(0, blocker)
    sys.modules.update(modules)
    try:
        yield
    finally:
        if blocker is not None:
            sys.meta_path.remove(blocker)
        for name, previous in saved.items():
            if previous is _ABSENT:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous  # type: ignore[assignment]
        sys.modules.update(hidden)
