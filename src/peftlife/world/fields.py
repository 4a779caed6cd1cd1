"""Validators for the world's value classes: exact types and ranges, errors that name the field.

A configuration or an action may come from a file someone edited, so a
string ``"no"`` is not a boolean and ``True`` is not a count. ``InvalidField``
carries the field's name, so a reader of a file can point at the bad entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


class InvalidField(ValueError):
    """A field whose value is of the wrong type or out of range.

    >>> str(InvalidField("device_pages", "must be a whole number of at least 1, not -3"))
    'device_pages must be a whole number of at least 1, not -3'
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


def is_whole(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def whole(minimum: int, *, optional: bool = False) -> Validator:
    """A validator: an int (not a bool) of at least ``minimum``; None too if ``optional``."""

    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if optional and value is None:
            return
        if not (is_whole(value) and value >= minimum):  # type: ignore[operator]
            none = " or null" if optional else ""
            raise InvalidField(
                attribute.name, f"must be a whole number of at least {minimum}{none}, not {value!r}"
            )

    return check


def boolean(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A validator: exactly True or False."""
    if not isinstance(value, bool):
        raise InvalidField(attribute.name, f"must be true or false, not {value!r}")


def one_of(*choices: str) -> Validator:
    """A validator: one of the given strings."""

    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in choices:
            raise InvalidField(
                attribute.name, f"must be one of {', '.join(choices)}, not {value!r}"
            )

    return check


# Metadata of a field that a written report leaves out while it holds its default:
# a field added for the overlap executor must not change what a simple-loop report,
# and the hash that names it, have always been.
QUIET_AT_DEFAULT = "peftlife_quiet_at_default"


def is_quiet(attribute: attrs.Attribute[Any], value: object) -> bool:
    """Whether a report leaves this field out: it is quiet at its default and holds it."""
    return bool(attribute.metadata.get(QUIET_AT_DEFAULT)) and value == attribute.default
