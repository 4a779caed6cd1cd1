"""What a run did not check: the invariants a world searched leaves unjudged.

The one place the outputs ask which scenarios a run searched left an invariant
unchecked (``not_checked``, from the checker's ``registry.not_checked``): the
terminal's note, the step summary's and summary.json's ``notes`` all read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from peftlife.checker import registry
from peftlife.search import scenarios
from peftlife.search.scenarios import Scenario


def not_checked(searched: Iterable[Scenario]) -> list[str]:
    """Of the scenarios searched, the names of those whose worlds leave an invariant
    they could break not checked (``registry.not_checked``).

    >>> not_checked(map(scenarios.load, ["default", "overlap", "overlap-empty"]))
    ['overlap-empty']
    """
    return list(dict.fromkeys(name for where in _unchecked(searched).values() for name in where))


def _unchecked(searched: Iterable[Scenario]) -> dict[registry.Invariant, list[str]]:
    """Each invariant some scenario searched leaves not checked, with those scenarios."""
    found: dict[registry.Invariant, list[str]] = {}
    for s in searched:
        # Its executor's knobs are the same in every world it draws: one tells.
        for invariant in registry.not_checked(scenarios.smallest_world(s)):
            if s.name not in found.setdefault(invariant, []):
                found[invariant].append(s.name)
    return found


def note(searched: Iterable[Scenario]) -> str | None:
    """The one sentence a command's output and summary carry when it searched a scenario
    that leaves an invariant not checked; None when it searched none.

    >>> note([scenarios.load("default")]) is None
    True
    """
    notes = [not_checked_note(i, where) for i, where in _unchecked(searched).items()]
    return "; ".join(notes) or None


def not_checked_note(invariant: registry.Invariant, where: Sequence[str]) -> str:
    """The sentence itself, for the worlds of ``where`` (scenario names)."""
    return f"{invariant.label} is not checked in {', '.join(where)}: {invariant.scope.unchecked}"
