"""What a deep copy of the world shares with the original instead of copying.

The explorer copies an engine for every state it visits and the drain copies
each again (``peftlife.search.breadth``), and most of what ``copy.deepcopy``
would rebuild can never change: the configuration, the ledger's calls and
their facts, the last step record and the views a snapshot shows.

* ``immutable`` marks a frozen attrs class whose fields are all immutable: a
  copy of one is itself. Only such a class may be marked (a number, a string,
  a bool, None, an enum, a tuple or frozenset of those, or another marked
  class in every field): tests/world/test_copy.py walks the fields of every
  class in ``IMMUTABLE`` and fails on any other.
* ``SharedMemo`` is a cache that an original and its copy can both go on using.

A subclass of a marked class is copied the ordinary way unless it is marked
itself: it may hold what its parent's fields do not (a scheduler's own view
class with a list in it, say).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T", bound=type)
K = TypeVar("K")
V = TypeVar("V")

Copier = Callable[[Any, dict[int, Any]], Any]

# Every class marked immutable, in the order their modules were imported.
IMMUTABLE: list[type] = []


def immutable(cls: T) -> T:
    """Mark a frozen attrs class of immutable fields: a deep copy of one is itself.

    Applied above ``@attrs.frozen``, to the class attrs made.

    >>> import copy
    >>> from peftlife.world.kv import CacheView
    >>> view = CacheView(capacity=4); copy.deepcopy(view) is view
    True
    """
    _mark(cls, _itself)
    IMMUTABLE.append(cls)
    return cls


def _mark(cls: type, copier: Copier) -> None:
    if "__init_subclass__" in vars(cls):
        raise TypeError(f"{cls.__name__} has an __init_subclass__ of its own")
    setattr(cls, "__deepcopy__", copier)  # noqa: B010 (mypy knows no such attribute of a type)

    def unmarked(subclass: type, /, **kwargs: Any) -> None:
        parent: Any = cls
        super(parent, subclass).__init_subclass__(**kwargs)
        # ``copy.deepcopy`` takes a ``__deepcopy__`` of None as none: the ordinary way.
        if "__deepcopy__" not in vars(subclass):
            setattr(subclass, "__deepcopy__", None)  # noqa: B010

    setattr(cls, "__init_subclass__", classmethod(unmarked))  # noqa: B010


def _itself(value: object, memo: dict[int, Any]) -> object:
    return value


class SharedMemo(dict[K, V], Generic[K, V]):
    """A cache whose every entry is immutable and holds for the state it is stored
    under (its key, or the state the entry carries and is checked against before it is
    reused): an entry added by an original or by its copy is right for both, so a deep
    copy of its owner shares it rather than copying it.

    >>> import copy
    >>> memo = SharedMemo({(True, 4): "view"}); copy.deepcopy(memo) is memo
    True
    """

    __slots__ = ()

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedMemo[K, V]:
        return self
