"""Invariant 12, the drain: stop arrivals, clear faults, and step until the world is empty.

Unlike the other invariants it needs an engine to step, and a premise: only a
world that can drain (``can_drain``) is held to the bound. A drain that cannot
finish says whether upstream's executor would stop on it with its deadlock
error or spin silently (``checker.stall``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import attrs

from peftlife.checker import registry
from peftlife.checker.invariants import Subject, Violation, kept
from peftlife.checker.stall import DEADLOCK_STALL_ITERS, executor_stops, stalled, upstream_raised
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
from peftlife.world.protocol import STATELESS_DECLARATION
from peftlife.world.snapshot import Snapshot, StepError
from peftlife.world.words import count


@attrs.frozen
class DrainResult:
    iterations: int
    bound: int
    violations: tuple[Violation, ...]
    snapshots: tuple[Snapshot, ...]


def drain_bound(engine: Engine) -> int:
    """50 iterations plus 4 per remaining prompt or output token of the live requests.

    Shorter than upstream's ``DEADLOCK_STALL_ITERS`` in any world the scenarios
    draw: a drain that ends at it while every pass stalls goes on, passes at most
    ``DEADLOCK_STALL_ITERS`` more, to tell upstream's deadlock error from a spin.
    """
    remaining = sum(
        r.context_remaining_length + (r.max_new_tokens - r.num_generated)
        for r in engine.live_requests
    )
    return 50 + 4 * remaining


def drain_premise_broken(
    config: EngineConfig, requests: list[tuple[int | None, int, int]]
) -> str | None:
    """The premise of ``can_drain`` a world breaks, with how to fix it; None if it can drain.

    ``requests`` lists ``(adapter, prompt_len, max_new_tokens)``.

    >>> world = EngineConfig(enable_chunked_context=True, chunk_unit_size=8, max_num_tokens=4)
    >>> drain_premise_broken(world, [])[:48]
    'with chunking on, chunk_unit_size (8) exceeds ma'
    """
    adapter_pages = dict(config.adapter_pages)
    if adapter_pages and max(adapter_pages.values()) > config.lora_device_pages:
        task, pages = max(adapter_pages.items(), key=lambda item: item[1])
        return (
            f"adapter {task} needs {count(pages, 'page')} but the device LoRA cache holds "
            f"{config.lora_device_pages} (lora_device_pages): raise it to at least {pages}"
        )
    if config.enable_chunked_context and config.chunk_unit_size > config.max_num_tokens:
        return (
            f"with chunking on, chunk_unit_size ({config.chunk_unit_size}) exceeds "
            f"max_num_tokens ({config.max_num_tokens}), so no chunk ever fits the token "
            "budget: lower chunk_unit_size or raise max_num_tokens"
        )
    pools = [("device_pages", config.device_pages, "host_pages", config.host_pages)]
    if config.draft_device_pages is not None:
        pools.append(
            (
                "draft_device_pages",
                config.draft_device_pages,
                "draft_host_pages",
                config.draft_host_pages,
            )
        )
    need = [-(-(prompt + outputs) // config.tokens_per_block) for _, prompt, outputs in requests]
    for (_, prompt, outputs), pages in zip(requests, need, strict=True):
        for device_name, device, _, _ in pools:
            if pages > device:
                return (
                    f"a request of {prompt} + {outputs} tokens needs {count(pages, 'page')}, "
                    f"more than {device_name} ({device}): raise {device_name} "
                    "or shorten the request"
                )
        if not config.enable_chunked_context and prompt + outputs - 1 > config.max_num_tokens:
            return (
                f"with chunking off, a request's longest context ({prompt + outputs - 1} "
                f"tokens) exceeds max_num_tokens ({config.max_num_tokens}): raise "
                "max_num_tokens, turn chunking on, or shorten the request"
            )
    if not config.enable_recompute_pause:
        for _, _, host_name, host in pools:
            if host < sum(need):
                return (
                    "with recompute pause off, only suspension frees device pages, so the "
                    "lower tier must hold every request's cache at once "
                    f"({count(sum(need), 'page')}) "
                    f"but {host_name} is {host}: raise {host_name} or turn recompute pause on"
                )
    return None


def can_drain(config: EngineConfig, requests: list[tuple[int | None, int, int]]) -> bool:
    """Whether a world can always drain: the premise under which invariant 12 binds.

    >>> can_drain(EngineConfig(), [(None, 4, 2)])
    True
    """
    return drain_premise_broken(config, requests) is None


def drain(
    engine: Engine, checker: Callable[[Snapshot], list[Violation]] | None = None
) -> DrainResult:
    """Stop arrivals, clear faults and step until every request has ended.

    Checks every invariant the world holds (``registry.check``, unless ``checker``
    says otherwise) after each step, then that nothing is held. A world
    that repeats exactly ends the drain early as a livelock, but only for a
    scheduler that declares ``keeps_no_state_between_passes = True``
    (``Engine.state_declaration``). The declaration is read when there is
    something to drain; one that raised or hung when read is a
    ``scheduler_protocol`` finding at the first drain iteration, as a raise in
    a pass is.

    A drain that cannot finish says what upstream's executor does on it
    (``checker.stall``): every pass of the repeated world stalled, or the drain
    still stalling at its bound went on to ``DEADLOCK_STALL_ITERS`` stalled
    passes, or the scheduler raised upstream's deadlock error itself: "the
    executor stops: V2 scheduler deadlock after 1000 stalled passes". Otherwise
    the finding is a silent livelock, or still live at the bound. ``iterations``
    counts the passes within the bound; of those past it the trace keeps the last.
    """
    checker = checker or registry.checker(engine.config)
    engine.clear_faults()
    bound = drain_bound(engine)
    binds = can_drain(
        engine.config,
        [(r.lora_task_id, r.prompt_len, r.max_new_tokens) for r in engine.live_requests],
    )
    stateless, unreadable = False, None
    if engine.live_requests:
        declaration = engine.state_declaration()
        stateless, unreadable = declaration.stateless, declaration.error
    # Each world seen, with the drain iteration it was seen at; and the passes in a row
    # that upstream's detector counts as stalled.
    seen: dict[Snapshot, int] = {}
    snapshots: list[Snapshot] = []
    violations: list[Violation] = []
    steps = stall = 0
    while engine.live_requests and steps < bound:
        snap, stall, violations = _pass(engine, checker, stall, binds)
        steps += 1
        snapshots.append(snap)
        if unreadable is not None:
            violations = kept([_unreadable(unreadable, snap.iteration), *violations])
            unreadable = None
        if violations:
            break
        if stateless and binds:
            world = snap.world()
            first = seen.get(world)
            if first is not None:
                violations = [_undrained(engine, _repeated(steps, steps - first, stall))]
                break
            seen[world] = steps
    if not violations and engine.live_requests and binds:
        violations = _past_the_bound(engine, checker, bound, stall, snapshots)
    if not violations:
        violations = list(_drained_empty(engine.snapshot()))
    return DrainResult(steps, bound, tuple(kept(violations)), tuple(snapshots))


def _repeated(steps: int, cycle: int, stall: int) -> str:
    """What a world that repeated after ``steps`` drain iterations, every ``cycle``, means
    upstream: with every pass of the cycle stalled the count only grows, so upstream's
    executor stops; otherwise upstream counts the cycle as progress and spins."""
    repeated = f"the world repeated exactly after {steps} drain iterations"
    if stall >= cycle:
        return f"{executor_stops()} ({repeated}, every pass stalled)"
    return (
        f"livelock: {repeated}; upstream counts its passes as progress, so its deadlock "
        "detector never fires and the executor spins silently"
    )


def _past_the_bound(
    engine: Engine,
    checker: Callable[[Snapshot], list[Violation]],
    bound: int,
    stall: int,
    snapshots: list[Snapshot],
) -> list[Violation]:
    """The finding of a drain still live at its bound.

    While every pass stalls the drain goes on until upstream's count is reached
    (``DEADLOCK_STALL_ITERS`` stalled passes in a row, so at most that many more
    passes), and the trace keeps the last of them: a scheduler that raises
    upstream's deadlock error on the way is reported with it.
    """
    extra = 0
    snap = None
    violations: list[Violation] = []
    while 0 < stall < DEADLOCK_STALL_ITERS and engine.live_requests:
        snap, stall, violations = _pass(engine, checker, stall, binds=True)
        extra += 1
        if violations:
            break
    if snap is not None:
        snapshots.append(snap)
    if violations:
        return violations
    if not engine.live_requests:
        return []
    passes = count(bound + extra, "iteration")
    if stall >= DEADLOCK_STALL_ITERS:
        return [_undrained(engine, f"{executor_stops()} (still live after {passes})")]
    why = f"still live after the drain's bound of {count(bound, 'iteration')}"
    if extra:
        why += (
            f"; {extra} passes past it one made progress in upstream's count, so its "
            "deadlock detector does not fire"
        )
    return [_undrained(engine, why)]


def _pass(
    engine: Engine, checker: Callable[[Snapshot], list[Violation]], stall: int, binds: bool
) -> tuple[Snapshot, int, list[Violation]]:
    """One drain pass: its snapshot, the stalled passes in a row after it, its violations.

    Where the drain binds, a pass whose scheduler raised upstream's deadlock error
    is that error's finding (the executor stops, as upstream's), in place of the
    ``scheduler_protocol`` finding the raise would otherwise be.
    """
    snap = engine.step()
    stall = stall + 1 if stalled(snap) else 0
    violations = checker(snap)
    error = upstream_raised(snap) if binds else None
    if error is not None:
        others = [v for v in violations if v.invariant != "scheduler_protocol"]
        stops = _undrained(engine, f"{executor_stops()} ({error.message})")
        violations = kept([stops, *others])
    return snap, stall, violations


def _unreadable(error: StepError, iteration: int) -> Violation:
    """The scheduler's code raised or hung while its declaration was read."""
    return Violation(
        "scheduler_protocol",
        Subject(lead="the scheduler"),
        f"{STATELESS_DECLARATION} read in time without raising",
        error.message,
        iteration,
    )


def _undrained(engine: Engine, why: str) -> Violation:
    live = sorted(r.request_id for r in engine.live_requests)
    return Violation(
        "drain_completes",
        Subject(tuple(live), as_list=True),
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
                Subject(adapters=(a.task_id,)),
                "no owner once every request has ended",
                f"active {sorted(a.active)}, paused {sorted(a.paused)}",
                s.iteration,
            )
        for where, entry in (("device", a.device), ("host", a.host)):
            if entry is not None and entry.in_use:
                yield Violation(
                    "drain_completes",
                    Subject(adapters=(a.task_id,)),
                    f"{where} entry done once every request has ended",
                    "still in use",
                    s.iteration,
                )
    for pool in s.pools:
        if pool.holders or pool.device_free != pool.device_capacity:
            yield Violation(
                "drain_completes",
                Subject(lead=f"{pool.name} pool"),
                "no page held once every request has ended",
                f"{pool.device_capacity - pool.device_free} device pages held",
                s.iteration,
            )
