"""Are findings kept? Aborted examples and dropped findings over a grid of hunts.

    python bench/findings.py [--seeds 12] [--seed BASE] [--profile dev]

Each catalogue mutant is hunted once per seed, as ``peftlife check --scenario
all`` hunts it before its shrink, with no example database. The machine is
watched from outside, through its two hooks (``_failure`` and ``teardown``),
so the same script measures any version of peftlife: every example Hypothesis
tears down while aborting it (``StopTest``: out of choices; ``UnsatisfiedAssumption``:
a rejected draw) is counted, and so is every violation the checker raised,
with the example it came in. A hunt *dropped* a finding when its first
violation came in an earlier example than the one it reported, and the table
says how long after the first violation the report came.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hypothesis.errors import StopTest, UnsatisfiedAssumption

from peftlife.search import profiles
from peftlife.search.machine import LifecycleMachine

try:
    from peftlife.search.hunt import hunt
except ImportError:  # a version from before search/machine.py was split
    from peftlife.search.machine import hunt  # type: ignore[attr-defined,no-redef]
from peftlife.sut.mutants import CATALOGUE


@dataclass
class Watch:
    """What one hunt's machines did, as seen from their hooks."""

    examples: int = 0
    aborted: int = 0
    # The first example each trace broke an invariant in, and when.
    violations: dict[tuple[Any, ...], tuple[int, float]] = field(default_factory=dict)
    first: tuple[Any, ...] | None = None


@contextmanager
def watching() -> Iterator[Watch]:
    watch = Watch()
    teardown, failure = LifecycleMachine.teardown, LifecycleMachine._failure

    def watched_teardown(self: Any) -> None:
        watch.examples += 1
        if isinstance(sys.exc_info()[1], StopTest | UnsatisfiedAssumption):
            watch.aborted += 1
        teardown(self)

    def watched_failure(self: Any, violations: Any) -> Any:
        found = failure(self, violations)
        # Hypothesis runs a failing example again before it reports it: the same
        # trace is the same finding.
        trace = found.run.actions
        watch.violations.setdefault(trace, (watch.examples + 1, time.perf_counter()))
        watch.first = watch.first or trace
        return found

    LifecycleMachine.teardown = watched_teardown  # type: ignore[method-assign]
    LifecycleMachine._failure = watched_failure  # type: ignore[method-assign]
    try:
        yield watch
    finally:
        LifecycleMachine.teardown, LifecycleMachine._failure = teardown, failure  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--profile", default="dev")
    args = parser.parse_args(argv)
    settings = profiles.for_search(profiles.get(args.profile))
    settings = type(settings)(settings, database=None)
    seeds = random.Random(args.seed).sample(range(2**32), args.seeds)
    hunts = examples = aborted = found = dropped = 0
    late: list[tuple[float, str, int]] = []
    missed: list[str] = []
    for mutant in CATALOGUE:
        for seed in seeds:
            with watching() as watch:
                result = hunt(f"mutant:{mutant.name}", settings, seed=seed)
                ended = time.perf_counter()
            hunts += 1
            examples += watch.examples
            aborted += watch.aborted
            if result.failure is None:
                missed.append(f"{mutant.name} seed {seed}")
                continue
            found += 1
            if watch.first is not None and watch.first != result.failure.run.actions:
                dropped += 1
                late.append((ended - watch.violations[watch.first][1], mutant.name, seed))
    print(
        f"{hunts} hunts ({len(CATALOGUE)} mutants x {args.seeds} seeds, {args.profile} profile, "
        f"no database): {found} found, {dropped} reported a later finding than their first; "
        f"{aborted} of {examples} examples aborted ({100 * aborted / max(examples, 1):.0f}%)"
    )
    for seconds, name, seed in sorted(late, reverse=True)[:5]:
        print(f"  {name} seed {seed}: reported {seconds:.2f} s after its first violation")
    for hunt_ in missed:
        print(f"  held: {hunt_}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
