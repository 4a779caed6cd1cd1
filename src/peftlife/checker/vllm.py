"""peftlife's invariants translated for vLLM, checked on the spike's steps (docs/engines.md).

A first cut of the vLLM world's checker: pure functions of the steps the
spike's driver read back from vLLM's real scheduler. Each finding is one line
naming the step, the invariant and the request or adapter. The numbers are
those of docs/engines.md: the translated peftlife invariants keep theirs, the
new ones are V1 to V5.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

import attrs


class Step(Protocol):
    """What the checks read of a step: the spike's ``driver.Step`` (a checker imports no SUT)."""

    @property
    def tokens(self) -> Mapping[str, int]: ...
    @property
    def new(self) -> tuple[str, ...]: ...
    @property
    def resumed(self) -> tuple[str, ...]: ...
    @property
    def preempted(self) -> tuple[str, ...]: ...
    @property
    def finished(self) -> tuple[str, ...]: ...
    @property
    def running_adapters(self) -> frozenset[int]: ...
    @property
    def computed(self) -> Mapping[str, int]: ...
    @property
    def held(self) -> Mapping[str, int]: ...
    @property
    def free_blocks(self) -> int: ...
    @property
    def held_after(self) -> int: ...


@attrs.frozen
class Limits:
    """What the world holds the scheduler to: the worker's adapter slots and the block pool."""

    adapter_slots: int
    num_blocks: int
    block_size: int


def _step_findings(i: int, step: Step, limits: Limits) -> Iterator[str]:
    if len(step.running_adapters) > limits.adapter_slots:
        yield (
            f"step {i}: V1 max_loras_cap: adapters {sorted(step.running_adapters)} are running, "
            f"the worker has {limits.adapter_slots} slot(s)"
        )
    if step.preempted and (step.new or step.resumed):
        yield (
            f"step {i}: V5 no_admission_in_a_preempting_step: preempted "
            f"{list(step.preempted)} and admitted {list(step.new + step.resumed)}"
        )
    for rid in step.preempted:
        if step.held.get(rid):
            yield f"step {i}: V4 preempted_means_empty: {rid} holds {step.held[rid]} block(s)"
        if rid in step.tokens:
            yield f"step {i}: V4 preempted_means_empty: {rid} is scheduled in the step"
    for rid, computed in step.computed.items():
        room = step.held.get(rid, 0) * limits.block_size
        if room < computed:
            yield (
                f"step {i}: 7 scheduled_owned_and_resident: {rid} is scheduled up to token "
                f"{computed} with blocks for {room}"
            )
    if step.free_blocks + step.held_after != limits.num_blocks:
        yield (
            f"step {i}: 10 pages_conserved: {step.free_blocks} free + {step.held_after} held "
            f"!= {limits.num_blocks}"
        )


def findings(steps: Sequence[Step], limits: Limits) -> list[str]:
    """Every broken rule of ``steps``, in order; empty when the run held.

    >>> findings([], Limits(adapter_slots=1, num_blocks=4, block_size=4))
    []
    """
    found: list[str] = []
    ended: set[str] = set()
    for i, step in enumerate(steps):
        found.extend(_step_findings(i, step, limits))
        # A step reports the requests the previous step's output ended.
        ended.update(step.finished)
        for rid in sorted(ended & set(step.tokens)):
            found.append(f"step {i}: 16 dead_stay_dead: {rid} ended and is scheduled again")
    return found
