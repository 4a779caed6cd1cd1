"""Running the machine: ``search`` one scenario, ``hunt`` across several.

A search runs the machine (``peftlife.search.machine``) under Hypothesis
without its shrink phase, keeps the first finding, then shrinks it with
peftlife's own shrinker. ``lifecycle_machine(sut, scenario)`` is the machine
a project's tests collect: its ``TestCase`` searches as ``peftlife check`` does.

    TestMine = lifecycle_machine("mypkg.sched:factory").TestCase
"""

from __future__ import annotations

import itertools
import secrets
import time
import unittest
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from fractions import Fraction
from functools import cache
from typing import Any, ClassVar, TypeVar

import attrs
import hypothesis
from hypothesis import Phase
from hypothesis.stateful import run_state_machine_as_test

from peftlife import sut
from peftlife.search import compat, defect, observe, outside, profiles, scenarios, session, shrink
from peftlife.search.failure import Finding, LifecycleFailure, minimized
from peftlife.search.machine import (
    COVERAGE_LABELS,
    LifecycleMachine,
    SearchContext,
    for_search,
    machine_class,
    unreached,
)
from peftlife.world.engine import DEFAULT_SCHEDULE_DEADLINE
from peftlife.world.words import count

# Scenarios as a door read them, or as a library caller names them.
Given = TypeVar("Given", scenarios.Scenario, str)


@cache
def lifecycle_machine(
    sut_spec: str = "reference", scenario: scenarios.Scenario | str = "default"
) -> type[Any]:
    """The machine for one SUT and one scenario, with a ``TestCase`` that searches it.

    >>> lifecycle_machine("mutant:draft_not_suspended", "draft-pool").__name__
    'Lifecycle[mutant:draft_not_suspended @ draft-pool]'
    """
    machine = machine_class(sut_spec, scenario)
    return type(machine.__name__, (machine,), {"TestCase": _SearchedTestCase()})


class _SearchedTestCase:
    """A machine's ``TestCase``: the case ``_test_case`` makes, one per machine class.

    It stands in for Hypothesis's own ``TestCase`` attribute, which runs the
    machine with Hypothesis's shrinker and none of peftlife's.
    """

    def __get__(
        self, obj: LifecycleMachine | None, owner: type[LifecycleMachine]
    ) -> type[unittest.TestCase]:
        return _test_case(owner if obj is None else type(obj))


@attrs.frozen
class SearchResult:
    """How one search of one SUT in one scenario ended."""

    sut: str
    # The scenario's name (that of the one that found it, or every one's joined by commas).
    scenario: str
    # What ended the search: a broken invariant, or what a mixed-in machine
    # raises instead (``peftlife.search.diff``'s divergence); None if it held.
    found: Finding | None
    # Examples run in all, and how many it took to meet the first finding.
    examples: int
    examples_to_find: int
    seconds: float
    coverage: Counter[str]
    # Executor iterations run in all, drains included.
    iterations: int = 0
    # Searched with ``known`` defects: the signature of ``found`` (None: not read, or
    # the scheduler took the search's process down first), and the findings of known
    # defects searched past, by signature.
    signature: defect.Signature | None = None
    hits: Counter[defect.Signature] = attrs.field(factory=Counter)
    # The scenarios searched, as read: what the outputs ask of them (``unchecked``).
    searched: tuple[scenarios.Scenario, ...] = ()

    @property
    def held(self) -> bool:
        return self.found is None

    @property
    def failure(self) -> LifecycleFailure | None:
        """The broken invariant that ended the search, if that is what ended it."""
        return self.found if isinstance(self.found, LifecycleFailure) else None

    @property
    def unreached(self) -> tuple[str, ...]:
        """The witnesses (``COVERAGE_LABELS``) this search never reached.

        A run that held without reaching them proved little about those paths.
        """
        return unreached(self.coverage)


def search(
    sut_spec: str | sut.Resolved,
    scenario: scenarios.Scenario | str,
    settings: hypothesis.settings,
    *,
    shrink: bool = True,
    seed: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
    shrink_timeout: float | None = None,
    shrink_progress: Callable[[shrink.ShrinkProgress], None] | None = None,
    mixin: type | None = None,
    known: defect.Known | None = None,
) -> SearchResult:
    """Run the machine for one SUT and scenario; a finding is returned, not raised.

    Hypothesis searches in slices of ``SLICE`` examples, each with its own seed
    derived from ``seed``, as the turns of a hunt of this one scenario: past its
    tenth example, Hypothesis follows each new one with up to five copies of
    parts of it, which mostly tell the same lifecycle again (the chance that an
    example finds a catalogue defect fell several-fold there; bench/detection.py).
    It searches without its own shrink phase; with ``shrink`` the first failing
    example is then minimized over its trace (``peftlife.search.shrink``), which
    takes well under a second where Hypothesis's shrink re-runs whole examples
    for a minute. ``seed`` replaces the profile's randomness with a fixed seed;
    ``schedule_deadline`` is how long one call of the scheduler may take;
    ``shrink_timeout`` (the user's cap; None: counts alone end the shrink) and
    ``shrink_progress`` go to ``minimized``. ``mixin``, a
    class put before the machine in its bases, changes what an example does with
    its actions (``peftlife.search.diff`` runs them on two schedulers).
    ``known`` (``peftlife.search.defect``): each finding's signature is read, and
    one of a known defect, no shorter than its case so far, is counted in ``hits``
    while the search goes on; the first other one ends it, its signature said.
    Anything but a ``Finding`` is a bug of the harness and propagates.
    The SUT and the scenario are resolved here, once, unless they were already
    (``sut.Resolved``, ``scenarios.Scenario``).
    """
    subject = sut.resolve(sut_spec)
    searched = [scenarios.resolve(scenario)]

    def work(told: Callable[[int, int], None] | None) -> SearchResult:
        result = _hunt(subject, settings, searched, seed, told, mixin, schedule_deadline, known)
        if result.found is not None:
            result = attrs.evolve(result, found=attrs.evolve(result.found, seed=seed))
        return result

    result = outside.supervised_search(work, progress, died_result(subject.spec), searched)
    # Shrunk here, in a supervised child of its own, so that Ctrl-C during the shrink
    # keeps its smallest case so far (``ShrinkInterrupted``).
    if shrink and result.failure is not None:
        smaller = minimized(
            result.failure,
            schedule_deadline,
            timeout=shrink_timeout,
            progress=shrink_progress,
            subject=subject,
        )
        result = attrs.evolve(result, found=smaller)
    return result


def died_result(sut_spec: str) -> Callable[[LifecycleFailure, int, float], SearchResult]:
    """The result of a search whose scheduler took its process down (``outside``)."""

    def result(failure: LifecycleFailure, examples: int, seconds: float) -> SearchResult:
        scenario = failure.run.scenario
        return SearchResult(
            sut_spec,
            scenario.name,
            failure,
            examples,
            examples,
            seconds,
            Counter(),
            searched=(scenario,),
        )

    return result


def _one_run(
    subject: sut.Resolved,
    scenario: scenarios.Scenario,
    settings: hypothesis.settings,
    seed: int | None,
    progress: Callable[[int, int], None] | None,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
    mixin: type | None = None,
) -> SearchResult:
    """One run of Hypothesis over the machine, in the phases ``settings`` name."""
    base = machine_class(subject, scenario, getattr(mixin, "beside", ()))
    # One context per search: its own tally; and a class per search, for its own seed.
    context = SearchContext.of(base, progress=progress, schedule_deadline=schedule_deadline)
    mixed = base if mixin is None else type(base.__name__, (mixin, base), {})
    machine: Any = for_search(mixed, context)
    stats = context.stats
    run_settings = hypothesis.settings(
        settings,
        phases=[p for p in settings.phases if p is not Phase.shrink],
        report_multiple_bugs=False,
        derandomize=settings.derandomize and seed is None,
    )
    if seed is not None:
        machine = hypothesis.seed(seed)(machine)
    failure = None
    start = time.perf_counter()
    try:
        with observe.recording(observe.path_from_env(), subject.spec, scenario.name):
            run_state_machine_as_test(machine, settings=run_settings)
    except Finding as found:
        failure = found
    except unittest.SkipTest:
        # Hypothesis's word for "ran nothing": a replay of saved examples found none.
        if Phase.generate in run_settings.phases:
            raise
    # The first finding wins: Hypothesis may have dropped it (its example was already
    # aborted when the drain found it) or report another after it.
    return SearchResult(
        subject.spec,
        scenario.name,
        stats.first_failure or failure,
        stats.examples,
        stats.examples_to_first_failure,
        time.perf_counter() - start,
        stats.coverage,
        stats.iterations,
        searched=(scenario,),
    )


# Examples per slice of a search or a hunt. Below ten, Hypothesis skips its opening
# phase of deliberately small examples (a tenth of a run's budget), which never build
# the pressure most defects need, and it never follows an example with copies of parts
# of it (it starts at the tenth): every example of a short slice is a fresh full draw.
SLICE = 9
# The first turn's slices are shorter: a defect that only a few scenarios reach
# meets its scenario after a few examples of each, not after nine.
FIRST_SLICE = 3


def hunt(
    sut_spec: str | sut.Resolved,
    settings: hypothesis.settings,
    *,
    scenario_names: Sequence[scenarios.Scenario | str] | None = None,
    seed: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    mixin: type | None = None,
    known: defect.Known | None = None,
) -> SearchResult:
    """Search several scenarios (every shipped one by default) at once, until one fails.

    The scenarios take turns, most pressure first (``by_pressure``), ``FIRST_SLICE``
    examples each in the first turn (``SLICE`` for a lone scenario) and ``SLICE``
    after, every slice with its own
    seed derived from ``seed`` (0 under a derandomized profile), so a defect only
    one scenario reaches is found after a few rounds instead of after every
    scenario before it in the list has spent its whole budget. Each scenario
    still gets the profile's ``max_examples`` when nothing fails, so a hunt
    covers as much as searching each scenario in turn. Before any slice, every
    scenario replays the failures its example database holds (a campaign's, or an
    earlier run's), so a saved finding is met first wherever its scenario sits in
    the list. The result names the scenario that caught the failure;
    ``examples``, ``examples_to_find`` and ``iterations`` count every scenario's,
    and ``coverage`` adds up every slice's. ``mixin`` and ``known`` are as in ``search``.
    ``scenario_names`` are scenarios as a front door read them, or names and paths to
    read here.

    >>> from peftlife.search import profiles
    >>> hunt("mutant:no_release_on_suspend", profiles.get("ci")).held
    False
    """
    searched = by_pressure(
        [scenarios.resolve(s) for s in scenario_names or scenarios.shipped_names()]
    )
    subject = sut.resolve(sut_spec)  # once, for every scenario's machine
    return outside.supervised_search(
        lambda told: _hunt(
            subject, settings, searched, seed, told, mixin, DEFAULT_SCHEDULE_DEADLINE, known
        ),
        progress,
        died_result(subject.spec),
        searched,
    )


def _hunt(
    subject: sut.Resolved,
    settings: hypothesis.settings,
    searched: list[scenarios.Scenario],
    seed: int | None,
    progress: Callable[[int, int], None] | None,
    mixin: type | None,
    schedule_deadline: float | None = DEFAULT_SCHEDULE_DEADLINE,
    known: defect.Known | None = None,
) -> SearchResult:
    base = seed if seed is not None else (0 if settings.derandomize else secrets.randbits(32))
    spent = dict.fromkeys(searched, 0)
    coverage: Counter[str] = Counter()
    hits: Counter[defect.Signature] = Counter()
    every = tuple(searched)
    joined = ",".join(s.name for s in searched)
    done = SearchResult(subject.spec, joined, None, 0, 0, 0.0, coverage, hits=hits, searched=every)
    start = time.perf_counter()

    def tick(slice_examples: int, slice_iterations: int) -> None:
        if progress is not None:
            progress(done.examples + slice_examples, done.iterations + slice_iterations)

    def run(s: scenarios.Scenario, part: hypothesis.settings, seed_of: int | None) -> SearchResult:
        """One slice, added to what ran before it."""
        nonlocal done
        result = _one_run(subject, s, part, seed_of, tick, schedule_deadline, mixin)
        signature = None
        if known is not None and isinstance(result.found, LifecycleFailure):
            signature = _signature(result.found, subject, schedule_deadline)
            if defect.known(signature, len(result.found.run.actions), known):
                hits[signature] += 1  # counted; the search goes on past it
                result, signature = attrs.evolve(result, found=None), None
        coverage.update(result.coverage)
        spent[s] += result.examples
        done = SearchResult(
            subject.spec,
            s.name if result.found else done.scenario,
            result.found,
            done.examples + result.examples,
            done.examples + (result.examples_to_find if result.found else result.examples),
            time.perf_counter() - start,
            coverage,
            done.iterations + result.iterations,
            signature,
            hits,
            every,
        )
        return result

    with compat.stable_constants(), compat.digests_once():
        if settings.database is not None and Phase.reuse in settings.phases:
            saved_only = hypothesis.settings(settings, phases=[Phase.explicit, Phase.reuse])
            for s in searched:
                if (saved := run(s, saved_only, None).found) is not None:
                    return attrs.evolve(done, found=attrs.evolve(saved, replayed=True))
        # Replayed once above, in runs of their own: what the database holds would
        # otherwise steer what a slice's seed generates, and a finding it gave would
        # pass for the seed's. A slice generates from its own seed alone.
        generating = [p for p in settings.phases if p != Phase.reuse]
        for turn in itertools.count():
            open_ones = [s for s in searched if spent[s] < settings.max_examples]
            if not open_ones:
                break
            # Short first slices are for meeting many scenarios soon; one has nothing to meet.
            first = FIRST_SLICE if len(searched) > 1 else SLICE
            for s in open_ones:
                budget = min(SLICE if turn else first, settings.max_examples - spent[s])
                part = hypothesis.settings(settings, max_examples=budget, phases=generating)
                result = run(s, part, _slice_seed(base, s.name, turn))
                if result.found is not None:
                    return done
                # A slice that ran nothing (every draw rejected) must still end the turns.
                spent[s] += result.examples == 0 and budget
    return attrs.evolve(done, scenario=joined, seconds=time.perf_counter() - start)


def _signature(
    failure: LifecycleFailure, subject: sut.Resolved, schedule_deadline: float | None
) -> defect.Signature:
    """A finding's signature, from a replay in this (the search's) process; a hang's from
    its invariant alone, whose replay would wait out the scheduler's deadline again."""
    if failure.hung:
        return defect.Signature(failure.invariant)
    return defect.replayed_signature(failure, subject.factory, schedule_deadline)


def by_pressure(given: Sequence[Given]) -> list[Given]:
    """Scenarios (values, or names) in the order a hunt gives them turns: the rarest
    pressure first.

    Each kind of pressure (``pressures``: what every world of a scenario is under)
    weighs one over the number of scenarios under it: a kind few scenarios have is
    what a defect only they show needs. Each next scenario is the one whose kinds
    not yet covered by the scenarios before it weigh most, then the one whose kinds
    weigh most in all. So the first turn's first slices meet every kind (a fault in
    the draft pool alone, batch N that a scheduler told nothing must remember, ...)
    and a defect most scenarios reach is found in any of them. Ties keep the order
    given.

    >>> by_pressure(["default", "kv-pressure", "chunked-prefill"])
    ['kv-pressure', 'default', 'chunked-prefill']
    """
    left = {s: pressures(scenarios.resolve(s)) for s in given}
    under = Counter(kind for kinds in left.values() for kind in kinds)

    def weight(kinds: set[str]) -> Fraction:
        # Exact: a float sum would depend on the (hash-randomized) order of the set.
        return sum((Fraction(1, under[kind]) for kind in kinds), Fraction(0))

    order: list[Given] = []
    covered: set[str] = set()
    while left:
        # max() keeps the first of equals: the order given.
        name = max(left, key=lambda n: (weight(left[n] - covered), weight(left[n])))
        covered |= left.pop(name)
        order.append(name)
    return order


def pressures(s: scenarios.Scenario) -> set[str]:
    """The kinds of pressure every world of a scenario is under.

    >>> sorted(pressures(scenarios.load("kv-pressure")))
    ['no lower tier', 'one LoRA slot for two', 'one request fills the device', 'recompute pause']
    """
    pages = -(-s.longest_request // max(1, s.tokens_per_block.lo))
    adapter = max(1, s.adapter_pages.hi)
    lora_room = max(s.lora_device_pages.hi, adapter) // adapter
    kinds = {
        "recompute pause": s.recompute_pause == "on",
        "no lower tier": s.lower_tier == "off",
        # Its batch on the device is pinned: told of it, or remembered by the scheduler.
        "batch N told": s.in_flight_told,
        "batch N untold": s.overlap and not s.in_flight_told,
        "one request fills the device": max(s.device_pages.hi, pages) <= pages,
        "one LoRA slot for two": 2 * lora_room <= max(1, s.adapters.hi),
        # A fault in one pool alone splits the two.
        "a draft pool": s.draft_pool == "on",
    }
    return {kind for kind, present in kinds.items() if present}


def _slice_seed(base: int, scenario: str, turn: int) -> int:
    """A seed per slice, the same on every platform and in every process."""
    return zlib.crc32(f"{base}/{scenario}/{turn}".encode())


@cache
def _test_case(machine: type[LifecycleMachine]) -> type[unittest.TestCase]:
    """A unittest case that searches ``machine`` as the command line does.

    No Hypothesis shrink phase, peftlife's own shrinker, one failure (the first
    invariant): ``search`` does all three. The session's options (the pytest
    plugin's ``--peftlife-*``) retarget the SUT, the scenario and the profile;
    a ``settings`` set on the case by hand is used instead of the profile.
    """

    class LifecycleTestCase(unittest.TestCase):
        settings: ClassVar[hypothesis.settings | None] = None

        def runTest(self) -> None:
            options = session.current()
            # The machine's SUT as its class resolved it, unless the session retargets it.
            subject = options.sut or sut.Resolved(machine.sut_spec, machine.factory)
            scenario = options.scenario or machine.given
            if not scenarios.catchable(str(subject), [scenario]):
                # A known defect this world cannot show: say why instead of passing.
                self.skipTest(scenarios.sut_note(str(subject), [scenario]) or "")
            result = session_search(subject, scenario, self.settings)
            if result.failure is not None:
                raise result.failure

    # How the pytest plugin tells this case from other tests.
    LifecycleTestCase.lifecycle_machine = machine  # type: ignore[attr-defined]
    LifecycleTestCase.__name__ = f"{machine.__name__}.TestCase"
    LifecycleTestCase.__qualname__ = LifecycleTestCase.__name__
    return LifecycleTestCase


def session_search(
    sut_spec: str | sut.Resolved,
    scenario: scenarios.Scenario | str,
    settings: hypothesis.settings | None = None,
    *,
    seed: int | None = None,
) -> SearchResult:
    """Search under the session's options (``peftlife.search.session``), shrink included.

    Their profile (``profiles.chosen``: theirs, else the one loaded into Hypothesis,
    else the default) applies unless ``settings`` are given; their example database,
    shrink cap and shrink progress always do. The seed is ``seed``, else
    Hypothesis's ``--hypothesis-seed``, else a fresh one unless the profile is
    derandomized; a finding carries it. Every pytest door (a machine's
    ``TestCase``, the ``peftlife_search`` fixture) searches through here, so they
    share findings.
    """
    options = session.current()
    profile = settings or profiles.chosen(options.profile)[1]
    searching = profiles.for_search(profile, database=options.database)
    # Hypothesis's --hypothesis-seed, else one of the run's own when it is random,
    # so that a finding says how to run it again.
    forced = compat.forced_seed()
    result = search(
        sut_spec,
        scenario,
        searching,
        seed=profiles.run_seed(searching, seed if seed is not None else forced),
        shrink_timeout=options.shrink_timeout,
        shrink_progress=options.shrink_progress,
    )
    if options.on_search is not None:
        options.on_search(result)
    return result


def describe(result: SearchResult) -> str:
    """peftlife's own statistics of one search, as lines under Hypothesis's.

    >>> print(describe(SearchResult("reference", "default", None, 3, 3, 0.5, Counter(), 9)))
      - peftlife: 3 examples, 9 executor iterations, held
        - witnesses reached: 0 of 12 (never: victim eviction, ...)
    """
    found = "held"
    if result.found is not None:
        where = ", replaying the example database" if result.found.replayed else ""
        found = f"first failure after {count(result.examples_to_find, 'example')}{where}"
        found += f" ({result.found.verdict})"
    reached = sum(1 for label in COVERAGE_LABELS if result.coverage.get(label))
    missed = f" (never: {', '.join(result.unreached)})" if result.unreached else ""
    lines = [
        f"  - peftlife: {count(result.examples, 'example')}, "
        f"{count(result.iterations, 'executor iteration')}, " + found,
        f"    - witnesses reached: {reached} of {len(COVERAGE_LABELS)}{missed}",
    ]
    shrunk = result.found.shrink if result.found is not None else None
    if shrunk is not None:
        lines.append(
            f"    - shrink: {count(shrunk.replays, 'replay')}, {count(shrunk.steps, 'step')}, "
            f"{shrunk.seconds:.2f} s, to {count(len(shrunk.actions), 'action')}"
        )
    return "\n".join(lines)
