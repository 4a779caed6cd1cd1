"""How long a deep copy of a mid-run engine takes: the explorer makes one for every
state it visits and the drain another (``peftlife.search.breadth``).

    python -m bench.copying [--copies 1000] [--profile]

The engine is kv-pressure's smallest world with two adapters, after ten actions
of the reference (three submits, two iterations, a fourth submit, a failed
grow, three iterations), under the simple loop and under the overlap loop. It
prints the best of five rounds of ``--copies`` copies of each, in wall-clock
milliseconds (a copy is too short for CPU time to tell apart), and with
``--profile`` the functions a profile of one round spends most in. It uses only
what every version of peftlife has, so it measures any of them.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats
import time

import attrs

from peftlife.search import scenarios
from peftlife.search.trace import Action, replay
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.config import Executor
from peftlife.world.engine import Engine


def mid_run(executor: Executor) -> Engine:
    world = scenarios.smallest_world(scenarios.load("kv-pressure"))
    world = attrs.evolve(world, adapter_pages=((1, 1), (2, 1)), executor=executor)

    def submit(task: int, prompt_len: int, max_new_tokens: int) -> Action:
        return Action("submit", None, task, True, prompt_len, max_new_tokens)

    step = Action("step")
    actions = [submit(1, 4, 2), submit(2, 6, 3), submit(1, 5, 1), step, step]
    actions += [submit(2, 4, 2), Action("fail_grow"), step, step, step]
    return replay(world, actions, ReferenceScheduler)[0]


def best_round(engine: Engine, copies: int, rounds: int = 5) -> float:
    """Seconds of the fastest of ``rounds`` rounds of ``copies`` copies."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(copies):
            copy.deepcopy(engine)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=1000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    executors: tuple[Executor, ...] = ("simple", "overlap")
    for executor in executors:
        engine = mid_run(executor)
        seconds = best_round(engine, args.copies)
        print(
            f"{executor:8} {len(engine.live_requests)} live requests: "
            f"{args.copies} copies in {seconds * 1000:.1f} ms (best of 5)"
        )
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(best_round, engine, args.copies, 1)
            pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
