"""What a run did not check: invariant 14 where the scheduler is told nothing in flight.

The one place the outputs ask which scenarios a run searched left an invariant
unchecked (``not_checked``): the terminal's note, the step summary's and
summary.json's ``notes`` all read it. It reads each scenario's rules itself
for now; when the checker can say which invariants a world checks, this
function asks it instead, and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from peftlife.reports.story import UNCHECKED_WHEN_EMPTY
from peftlife.search import scenarios


def not_checked(names: Iterable[str]) -> list[str]:
    """Of the scenarios searched (a hunt's run names them joined by commas), those whose
    scheduler is told nothing in flight: there invariant 14 is not checked.

    >>> not_checked(["default", "overlap,overlap-empty"])
    ['overlap-empty']
    """
    found: list[str] = []
    for name in (n for joined in names for n in joined.split(",") if n):
        try:
            s = scenarios.load(name)
        except (scenarios.ScenarioError, OSError):
            continue  # a scenario that does not read was never searched
        unchecked = s.inflight_ids == "empty" and s.in_flight_pin != "always"
        if s.executor == "overlap" and unchecked and name not in found:
            found.append(name)
    return found


def note(names: Iterable[str]) -> str | None:
    """The one sentence a command's output and summary carry when it searched a scenario
    whose scheduler is told nothing in flight; None when it searched none.

    >>> note(["default"]) is None
    True
    """
    unchecked = not_checked(names)
    return in_flight_note(unchecked) if unchecked else None


def in_flight_note(where: Sequence[str]) -> str:
    """The sentence itself, for the worlds of ``where`` (scenario names)."""
    return (
        f"{UNCHECKED_WHEN_EMPTY} is not checked in {', '.join(where)}: the scheduler is told "
        'nothing in flight there (inflight_ids = "empty"), so moving a request that is on the '
        "device is the executor's fault, not the scheduler's"
    )
