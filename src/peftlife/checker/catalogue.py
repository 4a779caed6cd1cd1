"""The invariants by name, each with its meaning in one line (``peftlife invariants``)."""

from __future__ import annotations

import re

from peftlife.checker.invariants import INVARIANTS

# The drain is checked by the engine-stepping drain, not by a snapshot check.
_DRAIN = (
    "drain_completes",
    "12. With arrivals stopped and faults cleared every request ends, and then no adapter "
    "is owned or pinned and no page is held.",
)


def meanings() -> dict[str, str]:
    """Each invariant's name and the first sentence of its rule, in check order.

    >>> meanings()["exclusive_ownership"]
    '2. No request is both active and paused on one adapter.'
    """
    table = {name: _first_sentence(fn.__doc__ or "") for name, fn in INVARIANTS.items()}
    table[_DRAIN[0]] = _DRAIN[1]
    return table


def names() -> tuple[str, ...]:
    """Every invariant name a finding can carry."""
    return tuple(meanings())


def _first_sentence(doc: str) -> str:
    text = " ".join(doc.split("\n\n")[0].split())
    # The rule's number ("1.", "8b."), then the sentence up to its first full stop.
    found = re.match(r"(\d+[a-z]?\.\s+.+?[a-z)]\.)(\s|$)", text)
    return found[1] if found else text
