"""Counts and names put into words, the same way by every layer that tells."""

from __future__ import annotations


def count(n: int, noun: str) -> str:
    """``n`` and the noun, plural unless there is one.

    >>> count(1, "action"), count(3, "action")
    ('1 action', '3 actions')
    """
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def article(name: str) -> str:
    """The name with its indefinite article.

    >>> article("int"), article("list")
    ('an int', 'a list')
    """
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"
