"""A defect's signature: the invariant a finding broke and the scheduler's calls where it broke.

Many findings show one defect: met by several workers, in several scenarios,
by examples of every length. A campaign (``peftlife fuzz``) and a check that
keeps going (``--max-failures``) shrink and report each defect once, so they
tell findings apart by ``Signature``: the invariant first broken, and the names
of the manager methods the scheduler called in the iteration that broke it,
each once, in name order. Left out is what the generated world decides rather
than the defect: which requests and adapters (their ids), how many (so how
often each method was called, and in what order), in which pool (a draft pool
repeats the target's calls), and the executor's calls in that iteration
(registering first chunks, freeing finished requests), which follow from
whatever else the world held. So one defect met in several scenarios is one
signature, while two defects that break one invariant by different moves are two.

A long example's iteration holds calls for other requests too, which its shrunk
case drops: a defect's signature is its shrunk case's, and the signature a hit
was met with (as the search found it) names the defect once that hit is shrunk.

``Known`` is what a search already holds of each defect: the length of its
shortest case so far. A finding of a known defect that is no shorter is a hit
to count, not a finding to shrink again (``known``).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from peftlife.search.failure import LifecycleFailure
from peftlife.search.trace import Outcome, checked_replay
from peftlife.world.engine import DEFAULT_SCHEDULE_DEADLINE
from peftlife.world.protocol import SchedulerFactory

# A replay that held: a nondeterministic scheduler, whose finding names no iteration.
HELD_ON_REPLAY = "held on replay"


@attrs.frozen(order=True)
class Signature:
    """One defect, as its findings show it.

    >>> str(Signature("ownership_follows_residency", ("suspend_request",)))
    'ownership_follows_residency (suspend_request)'
    """

    invariant: str
    # The scheduler's calls in the iteration that broke the invariant, each once, sorted.
    calls: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.invariant} ({', '.join(self.calls) or 'none'})"


def signature(outcome: Outcome) -> Signature:
    """The signature of a finding, read from its replay (``checked_replay``).

    >>> signature(Outcome((), (), None))
    Signature(invariant='held on replay', calls=())
    """
    if not outcome.violations:
        return Signature(HELD_ON_REPLAY)
    violation = outcome.violations[0]
    step = next(
        (
            e.snapshot.step
            for e in reversed(outcome.entries)
            if e.snapshot.iteration == violation.iteration
        ),
        None,
    )
    calls = step.calls if step is not None else ()
    return Signature(
        violation.invariant, tuple(sorted({c.method for c in calls if c.caller == "scheduler"}))
    )


def replayed_signature(
    failure: LifecycleFailure,
    factory: SchedulerFactory,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
) -> Signature:
    """The signature of a finding, from a replay of its run (in this process)."""
    run = failure.run
    outcome = checked_replay(run.config, run.actions, factory, schedule_deadline=schedule_deadline)
    return signature(outcome)


# Of each defect a search holds, the length (actions) of its shortest case so far.
Known = Mapping[Signature, int]


def known(found: Signature, actions: int, held: Known) -> bool:
    """Whether a finding adds nothing to what a search holds: its defect is held, with a
    case no longer than this one. A check that keeps going holds each defect at 0.

    >>> s = Signature("drain_completes")
    >>> known(s, 5, {s: 4}), known(s, 3, {s: 4}), known(Signature("x"), 9, {s: 4})
    (True, False, False)
    """
    return found in held and actions >= held[found]
