"""What a run did not check: the invariants a world searched leaves unjudged.

The one place the outputs ask which scenarios a run searched left an invariant
unchecked (``not_checked``, from the checker's ``registry.not_checked``): the
terminal's note, the step summary's and summary.json's ``notes`` all read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from peftlife.checker import registry
from peftlife.search import scenarios


def not_checked(names: Iterable[str]) -> list[str]:
    """Of the scenarios searched (a hunt's run names them joined by commas), those whose
    worlds leave an invariant they could break not checked (``registry.not_checked``).

    >>> not_checked(["default", "overlap,overlap-empty"])
    ['overlap-empty']
    """
    return list(dict.fromkeys(name for where in _unchecked(names).values() for name in where))


def _unchecked(names: Iterable[str]) -> dict[registry.Invariant, list[str]]:
    """Each invariant some scenario searched leaves not checked, with those scenarios."""
    found: dict[registry.Invariant, list[str]] = {}
    for name in (n for joined in names for n in joined.split(",") if n):
        try:
            world = scenarios.smallest_world(scenarios.load(name))
        except (ValueError, OSError):
            continue  # a scenario that does not read was never searched
        # Its executor's knobs are the same in every world it draws: one tells.
        for invariant in registry.not_checked(world):
            if name not in found.setdefault(invariant, []):
                found[invariant].append(name)
    return found


def note(names: Iterable[str]) -> str | None:
    """The one sentence a command's output and summary carry when it searched a scenario
    that leaves an invariant not checked; None when it searched none.

    >>> note(["default"]) is None
    True
    """
    notes = [not_checked_note(i, where) for i, where in _unchecked(names).items()]
    return "; ".join(notes) or None


def not_checked_note(invariant: registry.Invariant, where: Sequence[str]) -> str:
    """The sentence itself, for the worlds of ``where`` (scenario names)."""
    return f"{invariant.label} is not checked in {', '.join(where)}: {invariant.scope.unchecked}"
