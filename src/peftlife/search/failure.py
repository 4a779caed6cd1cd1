"""A finding: what a search met, the run that led to it, and its shrink.

``Finding`` is what a machine raises and a search returns. Its one kind here,
``LifecycleFailure``, is a broken invariant; ``minimized`` replaces one with the
smallest world and trace the shrinker (``peftlife.search.shrink``) finds that
still fails on the same invariant. ``peftlife diff``'s divergence of two
schedulers is the other kind (``peftlife.search.diff.Diverged``). Ctrl-C during
the shrink raises ``ShrinkInterrupted`` with the smallest case so far, so a front
door still writes what was found before it exits.

A finding's shrunk case, and so the trace a ``--baseline`` matches on, does not
depend on the machine's load: the bounds that decide it are counts (the
shrinker's rounds, steps and replays, and the states of each search below, at
most ``*_STATES``), and each replay is deterministic. The one clock is the
user's time cap (``--shrink-timeout``), which a shrink meets only when the counts
have not ended it first, and which the finding then names (its ``shrink.note``:
"the shrink stopped at its 300 s time cap after N replays: a smaller case may
exist"); ``minimized`` has no cap unless it is given one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from peftlife import sut
from peftlife.checker.invariants import Violation
from peftlife.search import breadth, scenarios, shrink
from peftlife.search.trace import Action, checked_replay
from peftlife.world import supervisor
from peftlife.world.config import EngineConfig
from peftlife.world.engine import DEFAULT_SCHEDULE_DEADLINE
from peftlife.world.protocol import SchedulerFactory

# States each of the shrink's searches of a stuck case's world may visit: among the
# scenario's actions, every case two actions long in a small world and most three
# long (about a second); among the case's own, most cases of six or seven, deep
# enough for the long cases the passes leave (10 actions to 8, 13 to 6); among its
# very requests, deeper still (14 to 9, every case of 9 covered in 7,310 states);
# among the requests of one of its adapters at a time, a case of one adapter that
# the search among both misses (6 to 5: 7,889 states, where both together take
# 43,580). Seconds in all, which only a case the searches cannot prove shortest
# sooner pays in full. These counts, not a clock, end each search (``until``, the
# user's time cap, is met only when no count has ended it).
AROUND_STATES = 1000
OWN_STATES = 10_000
EXACT_STATES = 10_000
OWNER_STATES = 10_000


@attrs.frozen
class Run:
    """What one example did: the SUT, the scenario, the world and the actions.

    The scenario is the value its search drew from, so that the shrink keeps to it
    (a name or a path given here is read now: a library caller's).
    """

    sut: str
    scenario: scenarios.Scenario = attrs.field(converter=scenarios.resolve)
    config: EngineConfig
    actions: tuple[Action, ...]


def _violations(found: Iterable[Violation]) -> tuple[Violation, ...]:
    return tuple(found)


@attrs.frozen
class Finding(AssertionError):
    """What ends an example: the run that led to it, and what the search learned of it.

    A value, built complete: what is learnt of it later (its shrink, the seed of
    the search that found it) makes a new one with ``attrs.evolve``. Each kind
    declares its ``run`` and what it found; these are given by name.
    """

    # Whether the trace shrinker has made this finding as small as it can, with
    # what the shrink cost and whether it stopped at a bound.
    shrunk: bool = attrs.field(default=False, kw_only=True)
    shrink: shrink.Shrunk | None = attrs.field(default=None, kw_only=True)
    # Whether the scheduler missed its deadline: its replays then each wait it out.
    hung: bool = attrs.field(default=False, kw_only=True)
    # The seed of the search that found it (None: derandomized, or not told).
    seed: int | None = attrs.field(default=None, kw_only=True)
    # Met replaying the example database, not generated from ``seed``: the seed
    # alone does not find it again (the saved report, or the same database, does).
    replayed: bool = attrs.field(default=False, kw_only=True)
    # Whether the scheduler took its process down (``peftlife.search.outside``):
    # such a finding is not shrunk, since every candidate would do it again.
    died: bool = attrs.field(default=False, kw_only=True)

    @property
    def run(self) -> Run:
        raise NotImplementedError

    @property
    def verdict(self) -> str:
        """The example's verdict in a word or two, for the observability records."""
        raise NotImplementedError

    def __reduce__(self) -> tuple[object, ...]:
        # A supervised child sends its finding to the parent pickled: rebuilt from
        # its fields by name (each kind adds its own).
        fields = {f.name: getattr(self, f.name) for f in attrs.fields(type(self))}
        return _restored, (type(self), fields)


@attrs.frozen
class LifecycleFailure(Finding):
    """A broken invariant: the violations seen, and the run that led to them."""

    violations: tuple[Violation, ...] = attrs.field(converter=_violations)
    run: Run

    def __str__(self) -> str:
        first = self.violations[0]
        more = f" (+{len(self.violations) - 1} more)" if len(self.violations) > 1 else ""
        return f"[{first.invariant}] {first}{more}"

    @property
    def invariant(self) -> str:
        return self.violations[0].invariant

    @property
    def verdict(self) -> str:
        return self.invariant


class ShrinkInterrupted(KeyboardInterrupt):
    """Ctrl-C during a shrink: ``failure`` is the smallest case found so far (the
    finding as the search met it, when the shrink had nothing to send back)."""

    def __init__(self, failure: LifecycleFailure) -> None:
        super().__init__()
        self.failure = failure


def _restored(cls: type[Finding], fields: dict[str, object]) -> Finding:
    return cls(**fields)  # type: ignore[arg-type]


def minimized(
    failure: LifecycleFailure,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
    *,
    timeout: float | None = None,
    progress: Callable[[shrink.ShrinkProgress], None] | None = None,
    subject: sut.Resolved | None = None,
) -> LifecycleFailure:
    """The same finding on the smallest world and action list the shrinker finds.

    ``timeout`` is the user's cap on the shrink in seconds (None or 0, the default:
    none, counts alone end it); ``progress`` is told as it goes.
    Ctrl-C raises ``ShrinkInterrupted`` with the smallest case so far. ``subject``
    is the finding's SUT as the front door resolved it (else its string is loaded).
    """
    if failure.shrunk or failure.died:
        return failure
    # Supervised (``peftlife.world.supervisor``): a candidate may hang in native code,
    # end the process or eat its memory. Progress crosses as (replays, best actions).
    told = None if progress is None else _told(progress)
    try:
        smaller = supervisor.supervised(
            lambda tell: _minimized(failure, schedule_deadline, timeout, tell, subject),
            told,
            interruptible=True,
        )
    except supervisor.SchedulerDied:
        return failure  # as the search met it: no smaller case could be run to the end
    except supervisor.Interrupted as stop:
        kept = stop.result if isinstance(stop.result, LifecycleFailure) else failure
        raise ShrinkInterrupted(kept) from None
    except KeyboardInterrupt:  # no child to ask (no fork): the finding as it was met
        raise ShrinkInterrupted(failure) from None
    if smaller.shrink is not None and smaller.shrink.stopped == "interrupted":
        raise ShrinkInterrupted(smaller)  # run here, without a child
    return smaller


def _told(progress: Callable[[shrink.ShrinkProgress], None]) -> Callable[[int, int], None]:
    return lambda replays, best: progress(shrink.ShrinkProgress(replays, best))


def _minimized(
    failure: LifecycleFailure,
    schedule_deadline: float | None,
    timeout: float | None,
    tell: Callable[[int, int], None] | None,
    subject: sut.Resolved | None,
) -> LifecycleFailure:
    progress = None if tell is None else (lambda p: tell(p.replays, p.best_actions))
    run = failure.run
    factory = sut.loaded(subject or run.sut).factory
    shrunk = shrink.minimize(
        shrink.Trace(run.config, run.actions),
        shrink.same_finding(factory, failure.invariant, schedule_deadline, hung=failure.hung),
        admits=run.scenario.admits_case,
        # A hung scheduler would wait out its deadline in state after state.
        shorter=None if failure.hung else _searcher(run.scenario, failure, factory),
        timeout=timeout,
        progress=progress,
    )
    smaller = Run(run.sut, run.scenario, shrunk.config, shrunk.actions)

    def as_shrunk(violations: Iterable[Violation]) -> LifecycleFailure:
        # The search's seed and where it met the finding stay; hung and died do not.
        return LifecycleFailure(
            violations,
            smaller,
            shrunk=True,
            shrink=shrunk,
            seed=failure.seed,
            replayed=failure.replayed,
        )

    if shrunk.stopped == "interrupted":
        # No replay now (it may wait out a hang): whoever reports it replays it.
        return as_shrunk(failure.violations)
    outcome = checked_replay(
        shrunk.config, shrunk.actions, factory, schedule_deadline=schedule_deadline
    )
    if not outcome.violations:  # cannot happen for a deterministic SUT; keep the original
        return failure
    return as_shrunk(outcome.violations)


def _searcher(
    scenario: scenarios.Scenario, failure: LifecycleFailure, factory: SchedulerFactory
) -> shrink.Shorter:
    """The shrink's search of a stuck case's world, breadth first, for a shorter case on
    the finding's invariant (the explorer's search, ``peftlife.search.breadth``): first
    among the scenario's actions with the case's own sizes and each range's ends
    (``Alphabet.around``: other requests and faults, a few actions deep); if that
    finds none, among those of them the case itself takes (``Alphabet.own``: its kinds
    of action, its adapters, no more requests; deeper), then among its very requests
    (``Alphabet.exact``; deeper still, and cheap when it finds nothing), then among
    those of one of its adapters at a time (``Alphabet.by_owner``): the first search
    that finds a shorter case ends the move. Each alphabet is cut from the one before."""
    s = scenarios.for_sut(scenario, failure.run.sut)

    def shorter(case: shrink.Trace, until: float | None) -> shrink.Trace | None:
        around = breadth.Alphabet.around(s, case.config, case.actions)
        own = around.own(case.actions)
        for letters, max_states in (
            (around, AROUND_STATES),
            (own, OWN_STATES),
            (own.exact(case.actions), EXACT_STATES),
            *((one, OWNER_STATES) for one in own.by_owner()),
        ):
            found = breadth.search(
                factory,
                case.config,
                letters,
                len(case.actions) - 1,
                max_states=max_states,
                invariant=failure.invariant,
                until=until,
            ).failure
            if found is not None:
                return shrink.Trace(case.config, found)
        return None

    return shorter
