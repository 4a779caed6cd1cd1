"""The scheduler's output as the world reads it, and the rules it must keep (docs/invariants.md, 8).

``read_lists`` takes the four lists out of whatever ``schedule_request``
returned, or says why they cannot be read (a ``malformed_output`` finding).
``record_output`` keeps each listed request as it stood then. ``flaws`` names
every rule the record breaks. The engine runs the batch only when no flaw
stops it (``runnable``); invariant 8 reports every flaw. Both read the rules
from here, so what the engine refuses to run and what the checker reports
cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping

import attrs

from peftlife.world import untrusted
from peftlife.world.config import EngineConfig
from peftlife.world.kv import KVCacheManager
from peftlife.world.request import LlmRequestState, Request
from peftlife.world.residency import Residency
from peftlife.world.snapshot import ListedView, OutputList, OutputRecord, StepError

# Each list of a SchedulerOutput: its name in the record, and its attribute.
OUTPUT_LISTS: tuple[tuple[OutputList, str], ...] = (
    ("context", "context_requests"),
    ("generation", "generation_requests"),
    ("paused", "paused_requests"),
    ("recompute_paused", "recompute_paused_requests"),
)

# The state a request must be in to run in each batch list.
LIST_STATE: dict[OutputList, LlmRequestState] = {
    "context": LlmRequestState.CONTEXT_INIT,
    "generation": LlmRequestState.GENERATION_IN_PROGRESS,
}

Lists = dict[OutputList, list[Request]]


def read_lists(
    output: object, live: Mapping[int, Request], next_id: int, *, deadline: float | None
) -> Lists | StepError:
    """The four lists, or a finding if the output cannot be read as a SchedulerOutput.

    ``live`` and ``next_id`` are the engine's: a listed request must be one it submitted.
    The output is the scheduler's object, so reading it runs the scheduler's code
    (a property, a ``__getattr__``, a list's ``__iter__``): it is read as any
    untrusted code is, within ``deadline`` seconds, and a raise or a hang is a finding.
    """
    try:
        return untrusted.call(
            lambda: _read(output, live, next_id),
            "reading schedule_request's output",
            deadline=deadline,
        )
    except untrusted.Failed as failed:
        return failed.error


def _read(output: object, live: Mapping[int, Request], next_id: int) -> Lists | StepError:
    lists: Lists = {}
    for key, attr in OUTPUT_LISTS:
        if not hasattr(output, attr):
            what = "None" if output is None else f"a {type(output).__name__}"
            return StepError(
                "malformed_output",
                f"schedule_request returned {what}, not a SchedulerOutput: it has no "
                f"{attr} attribute (nor the other three lists)",
            )
        value = getattr(output, attr)
        if not isinstance(value, list | tuple):
            return StepError(
                "malformed_output",
                f"schedule_request returned {type(output).__name__} whose {attr} is "
                f"{type(value).__name__}, not a list of requests",
            )
        for item in value:
            known = isinstance(item, Request) and _submitted(item, live, next_id)
            if not known:
                what = (
                    f"request {item.request_id}, which this engine never submitted"
                    if isinstance(item, Request)
                    else f"a {type(item).__name__}"
                )
                return StepError(
                    "malformed_output",
                    f"{attr} holds {what}",
                    request_id=item.request_id if isinstance(item, Request) else None,
                )
        lists[key] = list(value)
    return lists


def _submitted(req: Request, live: Mapping[int, Request], next_id: int) -> bool:
    """The engine's own live request, or one it submitted that has since ended."""
    current = live.get(req.request_id)
    return current is req or (current is None and 0 < req.request_id < next_id)


def record_output(
    lists: Lists,
    started_before: Container[int],
    cached_before: Container[int],
    *,
    live: Container[int],
    target: KVCacheManager,
    draft: KVCacheManager | None,
    config: EngineConfig,
) -> OutputRecord:
    """The lists, each request as it stood when the scheduler returned.

    ``started_before`` and ``cached_before`` hold the ids of the live requests that were
    started, and that held a cache in some pool, before the pass.
    """
    listed = []
    for key, _attr in OUTPUT_LISTS:
        for req in lists[key]:
            is_live = req.request_id in live
            listed.append(
                ListedView(
                    request_id=req.request_id,
                    output_list=key,
                    live=is_live,
                    schedulable=is_live and req.is_schedulable,
                    state=req.state,
                    started=req.is_started,
                    target=target.residency(req.request_id),
                    draft=None if draft is None else draft.residency(req.request_id),
                    chunk_size=req.context_chunk_size if key == "context" else 0,
                    context_remaining=req.context_remaining_length if key == "context" else 0,
                    started_before=req.request_id in started_before,
                    cache_before=req.request_id in cached_before,
                )
            )
    return OutputRecord(
        context=tuple(r.request_id for r in lists["context"]),
        generation=tuple(r.request_id for r in lists["generation"]),
        paused=tuple(r.request_id for r in lists["paused"]),
        recompute_paused=tuple(r.request_id for r in lists["recompute_paused"]),
        listed=tuple(listed),
        max_batch_size=config.max_batch_size,
        max_num_tokens=config.max_num_tokens,
        chunking=config.enable_chunked_context,
    )


@attrs.frozen
class Flaw:
    """A rule the output breaks, about one listed request or (``request_id`` None) the batch."""

    request_id: int | None
    expected: str
    found: str
    # The engine cannot run a batch with this flaw; the others it runs and the checker reports.
    stops_batch: bool = False


def runnable(out: OutputRecord) -> bool:
    """Whether the batch can be run at all; ``flaws`` says what is wrong with it."""
    return not any(f.stops_batch for f in flaws(out))


# The last record judged and its flaws: the engine asks before it runs the batch, the
# checker again for the same record right after the iteration. A record is frozen.
_judged: tuple[OutputRecord | None, tuple[Flaw, ...]] = (None, ())


def flaws(out: OutputRecord) -> tuple[Flaw, ...]:
    """Every rule the output breaks: the four lists are disjoint and hold live,
    schedulable requests in the right state; paused ones are started and not ACTIVE;
    recompute-paused ones hold no KV; the batch keeps its budgets."""
    global _judged
    judged, found = _judged
    if judged is not out:
        found = tuple(_flaws(out))
        _judged = out, found
    return found


def _flaws(out: OutputRecord) -> Iterator[Flaw]:
    seen: dict[int, OutputList] = {}
    for v in out.listed:
        rid, where = v.request_id, v.output_list
        if rid in seen:
            yield Flaw(
                rid,
                "at most one place in the output",
                f"in {seen[rid]} and {where}",
                stops_batch=True,
            )
        seen[rid] = where
        if not (v.live and v.schedulable):
            yield Flaw(
                rid,
                f"only live, schedulable requests in {where}",
                "one that is not",
                stops_batch=True,
            )
            continue
        if where == "context" and not (
            v.state is LIST_STATE["context"] and 0 < v.chunk_size <= v.context_remaining
        ):
            yield Flaw(
                rid,
                f"a context request with 0 < context_chunk_size <= {v.context_remaining}",
                f"state {v.state.name}, chunk {v.chunk_size}",
                stops_batch=True,
            )
        if where == "generation" and v.state is not LIST_STATE["generation"]:
            yield Flaw(
                rid, "generation requests in GENERATION_IN_PROGRESS", v.state.name, stops_batch=True
            )
        yield from _list_flaws(v, out.chunking)
    yield from _budget_flaws(out)


def _list_flaws(v: ListedView, chunking: bool) -> Iterator[Flaw]:
    """What the engine can run but a listed request still breaks."""
    rid, where = v.request_id, v.output_list
    if where == "paused" and (not v.started or v.target is Residency.ACTIVE):
        yield Flaw(
            rid,
            "paused requests started with KV not active",
            f"{'started' if v.started else 'unstarted'}, KV {v.target.value}",
        )
    if where == "context" and not chunking and v.chunk_size != v.context_remaining:
        yield Flaw(
            rid,
            f"with chunking off, the whole remaining context ({v.context_remaining})",
            f"a chunk of {v.chunk_size}",
        )
    if where == "recompute_paused" and (
        v.target is not Residency.NONE or v.draft not in (None, Residency.NONE)
    ):
        yield Flaw(
            rid,
            "recompute-paused requests with no KV in any pool",
            f"target {v.target.value}, draft {v.draft.value if v.draft else '-'}",
        )
    if where == "recompute_paused" and not (v.started_before or v.cache_before):
        yield Flaw(
            rid,
            "recompute-paused requests that were started or held a cache before the pass",
            "one that was neither",
        )


def _budget_flaws(out: OutputRecord) -> Iterator[Flaw]:
    """The batch keeps max_batch_size and max_num_tokens (a context request counts its
    chunk, a generation request one token)."""
    chunks = sum(v.chunk_size for v in out.listed if v.output_list == "context")
    for budget, limit, used, unit in (
        ("max_batch_size", out.max_batch_size, len(out.context) + len(out.generation), "requests"),
        ("max_num_tokens", out.max_num_tokens, len(out.generation) + chunks, "tokens"),
    ):
        if limit is not None and used > limit:
            yield Flaw(None, f"at most {budget} = {limit} {unit}", f"{used} {unit}")
