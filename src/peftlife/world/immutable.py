"""What a deep copy of the world shares with the original instead of copying.

The explorer copies an engine for the states it extends and for the drains
it runs (``peftlife.search.breadth``), and most of what ``copy.deepcopy``
would rebuild can never change: the configuration, the ledger's calls and
their facts, the last step record, the views a snapshot shows, and every
number, name and flag that a mutable object of the world holds.

* ``immutable`` marks a frozen attrs class whose fields are all immutable: a
  copy of one is itself. Only such a class may be marked (a number, a string,
  a bool, None, an enum, a tuple or frozenset of those, or another marked
  class in every field): tests/world/test_copy.py walks the fields of every
  class in ``IMMUTABLE`` and fails on any other.
* ``copied_by_field`` marks a mutable class of the world: a copy of one is a
  new object whose fields take each immutable value as it is and deep-copy the
  rest, as ``copy.deepcopy`` does, without its round of calls for every value.
* ``SharedMemo`` is a cache that an original and its copy can both go on using.

A subclass of a marked class is copied the ordinary way unless it is marked
itself: it may hold what its parent's copy knows nothing of (a scheduler's own
view class with a list in it, say).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs

T = TypeVar("T", bound=type)
K = TypeVar("K")
V = TypeVar("V")

Copier = Callable[[Any, dict[int, Any]], Any]

# Every class marked immutable, in the order their modules were imported.
IMMUTABLE: list[type] = []
# The types whose values a copy takes as they are, without asking ``copy.deepcopy``:
# its own atoms, the classes marked immutable and ``SharedMemo``. Exact types, as
# ``type()`` tells them: a value cannot pass for one by its ``__class__``.
_AS_IS: set[type] = {type(None), bool, int, float, complex, str, bytes}


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
    _AS_IS.add(cls)
    return cls


def copied_by_field(cls: T) -> T:
    """Mark a mutable class of the world: its deep copy takes every immutable field
    value as it is and deep-copies the others, sharing the memo (so an object two
    fields hold stays one object in the copy). The result is what ``copy.deepcopy``
    makes of it: a new object, with every field equal.

    Applied to a plain class (its fields in ``__dict__``) or above ``@attrs.define``
    with slots (its fields attrs').

    >>> import copy
    >>> from peftlife.world.request import Request
    >>> r = Request(1, None, False, prompt_len=4, max_new_tokens=1, py_batch_idx=[0])
    >>> c = copy.deepcopy(r); c is r, c.prompt_len, c.py_batch_idx is r.py_batch_idx
    (False, 4, False)
    """
    if "__slots__" in vars(cls):
        names = tuple(a.name for a in attrs.fields(cls))
        _mark(cls, _slots_copier(names))
    else:
        _mark(cls, _copy_dict)
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


def _copy_dict(value: object, memo: dict[int, Any]) -> object:
    cls = type(value)
    new = cls.__new__(cls)
    # Before the fields, as ``copy.deepcopy`` does: a field that leads back here
    # (a scheduler holding the pools that hold the ledger) finds the copy.
    memo[id(value)] = new
    deepcopy, kind, as_is = copy.deepcopy, type, _AS_IS
    new.__dict__.update(
        {k: v if kind(v) in as_is else deepcopy(v, memo) for k, v in value.__dict__.items()}
    )
    return new


def _slots_copier(names: tuple[str, ...]) -> Copier:
    set_field = object.__setattr__  # as attrs' own ``__setstate__`` does

    def copy_slots(value: object, memo: dict[int, Any]) -> object:
        cls = type(value)
        new = cls.__new__(cls)
        memo[id(value)] = new
        deepcopy, kind, as_is = copy.deepcopy, type, _AS_IS
        for name in names:
            v = getattr(value, name)
            set_field(new, name, v if kind(v) in as_is else deepcopy(v, memo))
        return new

    return copy_slots


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


_AS_IS.add(SharedMemo)
