"""Invariant 12, the drain: stop arrivals, clear faults, and step until the world is empty.

Unlike the other invariants it needs an engine to step, and a premise: only a
world that can drain (``can_drain``) is held to the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import attrs

from peftlife.checker.invariants import Violation, check, kept
from peftlife.world.engine import Engine, EngineConfig
from peftlife.world.snapshot import Snapshot


@attrs.frozen
class DrainResult:
    iterations: int
    bound: int
    violations: tuple[Violation, ...]
    snapshots: tuple[Snapshot, ...]


def drain_bound(engine: Engine) -> int:
    """50 iterations plus 4 per remaining prompt or output token of the live requests."""
    remaining = sum(
        r.context_remaining_length + (r.max_new_tokens - r.num_generated)
        for r in engine.live_requests
    )
    return 50 + 4 * remaining


def can_drain(config: EngineConfig, requests: list[tuple[int | None, int, int]]) -> bool:
    """Whether a world can always drain: the premise under which invariant 12 binds.

    ``requests`` lists ``(adapter, prompt_len, max_new_tokens)``.
    """
    adapter_pages = dict(config.adapter_pages)
    pools = [(config.device_pages, config.host_pages)]
    if config.draft_device_pages is not None:
        pools.append((config.draft_device_pages, config.draft_host_pages))
    if adapter_pages and max(adapter_pages.values()) > config.lora_device_pages:
        return False
    need = [-(-(prompt + outputs) // config.tokens_per_block) for _, prompt, outputs in requests]
    for (_, prompt, outputs), pages in zip(requests, need, strict=True):
        if any(pages > dev for dev, _ in pools):
            return False
        if not config.enable_chunked_context and prompt + outputs - 1 > config.max_num_tokens:
            return False
    # Without recompute pause only suspension frees device pages, and a suspension
    # that finds the lower tier full frees nothing: the tier must hold every cache at once.
    return config.enable_recompute_pause or all(host >= sum(need) for _, host in pools)


def drain(engine: Engine, checker: Callable[[Snapshot], list[Violation]] = check) -> DrainResult:
    """Stop arrivals, clear faults and step until every request has ended.

    Checks every invariant after each step, then that nothing is held. A world
    that repeats exactly ends the drain early as a livelock, but only for a
    scheduler that declares ``keeps_no_state_between_passes``.
    """
    engine.clear_faults()
    bound = drain_bound(engine)
    binds = can_drain(
        engine.config,
        [(r.lora_task_id, r.prompt_len, r.max_new_tokens) for r in engine.live_requests],
    )
    stateless = bool(getattr(engine.scheduler, "keeps_no_state_between_passes", False))
    seen: set[Snapshot] = set()
    snapshots: list[Snapshot] = []
    violations: list[Violation] = []
    steps = 0
    while engine.live_requests and steps < bound:
        snap = engine.step()
        steps += 1
        snapshots.append(snap)
        violations = checker(snap)
        if violations:
            break
        if stateless and binds:
            world = snap.world()
            if world in seen:
                why = f"livelock: the world repeated exactly after {steps} drain iterations"
                violations = [_undrained(engine, why)]
                break
            seen.add(world)
    if not violations and engine.live_requests and binds:
        violations = [
            _undrained(engine, f"still live after the drain's bound of {bound} iterations")
        ]
    if not violations:
        violations = list(_drained_empty(engine.snapshot()))
    return DrainResult(steps, bound, tuple(kept(violations)), tuple(snapshots))


def _undrained(engine: Engine, why: str) -> Violation:
    live = sorted(r.request_id for r in engine.live_requests)
    return Violation(
        "drain_completes",
        f"requests {live}",
        "every request finished or failed",
        why,
        engine.iteration,
    )


def _drained_empty(s: Snapshot) -> Iterator[Violation]:
    """After a complete drain: no owner, no page held, every LoRA cache entry done."""
    if s.requests:
        return
    for a in s.adapters:
        if a.active or a.paused:
            yield Violation(
                "drain_completes",
                f"adapter {a.task_id}",
                "no owner once every request has ended",
                f"active {sorted(a.active)}, paused {sorted(a.paused)}",
                s.iteration,
            )
        for where, entry in (("device", a.device), ("host", a.host)):
            if entry is not None and entry.in_use:
                yield Violation(
                    "drain_completes",
                    f"adapter {a.task_id}",
                    f"{where} entry done once every request has ended",
                    "still in use",
                    s.iteration,
                )
    for pool in s.pools:
        if pool.holders or pool.device_free != pool.device_capacity:
            yield Violation(
                "drain_completes",
                f"{pool.name} pool",
                "no page held once every request has ended",
                f"{pool.device_capacity - pool.device_free} device pages held",
                s.iteration,
            )
