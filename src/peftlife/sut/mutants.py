"""The mutant catalogue: the reference scheduler with one known defect each.

Each mutant overrides one hook of ``ReferenceScheduler``, so its defect reads
in a few lines. The harness must catch every one by search alone; the
catalogue says which invariant should fire first, and which others are an
acceptable first catch (one defect often breaks several rules at once).
"""

from __future__ import annotations

import attrs

from peftlife.sut.reference import ReferenceScheduler, _Budget
from peftlife.world.protocol import SchedulerOutput
from peftlife.world.request import Request


class NoReleaseOnSuspend(ReferenceScheduler):
    def release_on_suspend(self, req: Request) -> None:
        pass  # the pre-fix upstream code: a suspended request keeps X active forever


class NoReregisterOnResume(ReferenceScheduler):
    def after_resume(self, req: Request) -> None:
        pass  # runs on device while absent from active[X]


class RecomputePauseKeepsOwnership(ReferenceScheduler):
    def release_on_recompute_pause(self, req: Request) -> None:
        pass  # KV freed, adapter still active


class RecomputePauseTerminates(ReferenceScheduler):
    def release_on_recompute_pause(self, req: Request) -> None:
        self._mark_done(req, pause=False)  # host copy unpinned while the request waits


class PhantomPauseUnstarted(ReferenceScheduler):
    def owns_adapter(self, req: Request, was_active: bool) -> bool:
        return was_active  # missing the "started" check: a first chunk releases with pause


class RegisterBeforeAllocation(ReferenceScheduler):
    def before_generation_allocation(self, req: Request, resuming: bool) -> None:
        if resuming:
            super().after_resume(req)  # registers even if the allocation then fails

    def after_resume(self, req: Request) -> None:
        pass


class PauseFlagDropped(ReferenceScheduler):
    def release_on_suspend(self, req: Request) -> None:
        self._mark_done(req, pause=False)


class DraftNotSuspended(ReferenceScheduler):
    def _suspend_kv(self, req: Request) -> None:
        self.kv.suspend_request(req)  # the draft pool is left ACTIVE


class BudgetIgnoresUnscheduledOwners(ReferenceScheduler):
    def owner_pins(self, req: Request) -> bool:
        return False  # an owner skipped this pass still pins its adapter on device


class RecomputePauseReregisters(ReferenceScheduler):
    def release_on_recompute_pause(self, req: Request) -> None:
        super().release_on_recompute_pause(req)
        self.after_resume(req)  # registers again itself: active[X] names a request with no KV


class TokenBudgetIgnored(ReferenceScheduler):
    def new_budget(self) -> _Budget:
        budget = super().new_budget()
        budget.tokens_left = 1 << 20  # max_num_tokens never limits the batch
        return budget


class FinishesByWritingTokens(ReferenceScheduler):
    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        out = super().schedule_request(active_requests, inflight_request_ids)
        for req in out.generation_requests:
            req.num_generated = req.max_new_tokens - 1  # the request's own field, not its
        return out


class ForgetsRunningBatch(ReferenceScheduler):
    def still_running(self, requests: list[Request], told: set[int]) -> set[int]:
        # Trusts the executor's in-flight ids, which upstream's loop at pipeline-parallel
        # size 1 never fills: batch N's members are victims and candidates like any other.
        return set()


# Upstream's scheduler keeps no memory of the batch on the device: at pipeline-parallel
# size 1 it is told nothing in flight, so its defects around retiring requests show
# there. These mutants forget as it does (the reference's memory would mask them).
class BudgetIgnoresRetiring(ForgetsRunningBatch):
    def retiring_pins(self, req: Request) -> bool:
        return False  # a retiring request's adapter is still in use on the device


class BudgetIgnoresInflight(ReferenceScheduler):
    def in_flight_pins(self, req: Request) -> bool:
        return False  # skipped because it is on the device, it still pins its adapter there


class EvictsRetiring(ForgetsRunningBatch):
    def is_evictable(self, req: Request) -> bool:
        # Upstream's "started" includes GENERATION_TO_COMPLETE: a retiring request may be a victim.
        return (
            req.is_started or req.is_generation_to_complete_state
        ) and self.kv.is_request_active(req.request_id)


class EvictsInflight(ReferenceScheduler):
    spares_in_flight_victims = False  # suspension victims taken from the batch on the device


class DoubleTeardown(ReferenceScheduler):
    # A member of the batch on the device may be recompute-paused: its KV is freed
    # under the running batch, and if that batch's read-back ends it by
    # end-of-sequence, the executor frees it a second time.
    spares_in_flight_candidates = False


class SchedulesRetiring(ReferenceScheduler):
    def runs_as_generation(self, req: Request) -> bool:
        # The state range reaches GENERATION_TO_COMPLETE.
        return req.is_generation_in_progress_state or req.is_generation_to_complete_state


@attrs.frozen
class Mutant:
    name: str
    scheduler: type[ReferenceScheduler]
    description: str
    # The invariant expected to fire first, then others acceptable as the first catch.
    expected: str
    also_acceptable: tuple[str, ...] = ()
    # Whether its trigger needs the overlap executor (a batch on the device): under
    # the simple loop it schedules as the reference does, so the gate hunts it
    # through the overlap scenarios only.
    overlap: bool = False
    # Whether it is a defect only where the executor leaves a recompute-paused
    # request's teardown to the scheduler (peftlife's opt-in rule): upstream's
    # executor terminates the ownership itself, so the gate hunts it through the
    # opt-in scenarios that say so.
    scheduler_teardown: bool = False
    # Scenarios the gate does not hunt it in: there a defect it shares with another
    # mutant, not its own, is what an invariant flags first.
    not_hunted_in: tuple[str, ...] = ()

    @property
    def acceptable(self) -> tuple[str, ...]:
        return (self.expected, *self.also_acceptable)

    @property
    def world(self) -> tuple[tuple[str, str], ...]:
        """The world settings its defect lives in (``EngineConfig`` names and values):
        every search of it runs under them, whatever its scenario says."""
        return (("recompute_teardown", "scheduler_only"),) if self.scheduler_teardown else ()

    @property
    def needs(self) -> tuple[tuple[str, str], ...]:
        """The world settings without which it schedules as the reference does: a
        search anywhere else cannot catch it."""
        return (("executor", "overlap"),) if self.overlap else ()

    @property
    def lives(self) -> str:
        """Where its defect lives, in words, for the line a door says."""
        if self.scheduler_teardown:
            return "a defect where the scheduler owns the recompute teardown"
        if self.overlap:
            return (
                "a defect of the overlap executor (it needs a batch on the device; under "
                "the simple loop it schedules as the reference does)"
            )
        return ""


CATALOGUE: tuple[Mutant, ...] = (
    Mutant(
        "no_release_on_suspend",
        NoReleaseOnSuspend,
        "suspend never releases the adapter (the upstream pre-fix code)",
        "ownership_follows_residency",
        ("no_scheduler_caused_fault", "device_pin_follows_ownership"),
    ),
    Mutant(
        "no_reregister_on_resume",
        NoReregisterOnResume,
        "a resumed generation request is never registered again",
        "ownership_follows_residency",
        ("scheduled_owned_and_resident", "device_pin_follows_ownership"),
    ),
    Mutant(
        "recompute_pause_keeps_ownership",
        RecomputePauseKeepsOwnership,
        "recompute pause or preemption frees KV but leaves the adapter active "
        "(upstream's scheduler; its executor terminates the ownership after it)",
        "ownership_follows_residency",
        ("device_pin_follows_ownership", "no_scheduler_caused_fault"),
        scheduler_teardown=True,
    ),
    Mutant(
        "recompute_pause_terminates",
        RecomputePauseTerminates,
        "recompute pause releases with pause false, unpinning the host copy "
        "(what upstream's executor does after the pass)",
        "ownership_follows_residency",
        ("no_scheduler_caused_fault",),
        scheduler_teardown=True,
    ),
    Mutant(
        "phantom_pause_unstarted",
        PhantomPauseUnstarted,
        "a first-chunk request that never owned its adapter is released with pause",
        "ownership_follows_residency",
        ("no_phantom_owner", "host_pin_follows_ownership"),
    ),
    Mutant(
        "register_before_allocation",
        RegisterBeforeAllocation,
        "a resume registers before its allocation succeeds",
        "ownership_follows_residency",
        ("no_duplicate_registration", "device_pin_follows_ownership"),
    ),
    Mutant(
        "pause_flag_dropped",
        PauseFlagDropped,
        "suspend releases with pause false",
        "ownership_follows_residency",
        ("no_scheduler_caused_fault",),
    ),
    Mutant(
        "draft_not_suspended",
        DraftNotSuspended,
        "the draft pool is not suspended with the target",
        "draft_mirrors_target",
        ("scheduled_owned_and_resident", "output_lists_well_formed"),
    ),
    Mutant(
        "budget_ignores_unscheduled_owners",
        BudgetIgnoresUnscheduledOwners,
        "the PEFT budget charges only the adapters of scheduled requests",
        "no_scheduler_caused_fault",
        (),
    ),
    Mutant(
        "recompute_pause_reregisters",
        RecomputePauseReregisters,
        "a recompute pause releases with pause, then the scheduler registers the request again",
        # Its registration breaks invariant 4 in the pass; upstream's teardown then
        # terminates the ownership, so 1 sees it only where the scheduler tears down.
        "no_duplicate_registration",
        ("ownership_follows_residency", "device_pin_follows_ownership"),
    ),
    Mutant(
        "token_budget_ignored",
        TokenBudgetIgnored,
        "the pass schedules past max_num_tokens",
        "output_lists_well_formed",
        (),
    ),
    Mutant(
        "finishes_by_writing_tokens",
        FinishesByWritingTokens,
        "the scheduler raises a request's generated-token count so that it finishes early",
        "scheduler_writes_only_its_own",
        (),
    ),
    # The overlap executor's defects: their triggers need a batch on the device.
    Mutant(
        "budget_ignores_retiring",
        BudgetIgnoresRetiring,
        "the PEFT budget leaves out the adapter of a retiring request",
        "no_scheduler_caused_fault",
        (),
        overlap=True,
        # It keeps upstream's forgetfulness of the batch on the device (so the
        # reference's memory of it does not hide this defect), which upstream-defaults
        # flags on 14 first: that is forgets_running_batch's defect, not this one.
        not_hunted_in=("upstream-defaults",),
    ),
    Mutant(
        "budget_ignores_inflight",
        BudgetIgnoresInflight,
        "the PEFT budget leaves out the adapters of the batch on the device",
        "no_scheduler_caused_fault",
        (),
        overlap=True,
    ),
    Mutant(
        "evicts_retiring",
        EvictsRetiring,
        "a retiring request may be a suspension victim during its last step",
        "retiring_keeps_its_place",
        ("ownership_follows_residency",),
        overlap=True,
        not_hunted_in=("upstream-defaults",),  # as budget_ignores_retiring
    ),
    Mutant(
        "evicts_inflight",
        EvictsInflight,
        "suspension victims are taken from the batch on the device",
        "in_flight_pin",
        ("ownership_follows_residency",),
        overlap=True,
    ),
    Mutant(
        "double_teardown",
        DoubleTeardown,
        "recompute-pause candidates are taken from the batch on the device, "
        "so one that ends by end-of-sequence is freed twice",
        # The pass frees an in-flight member: 14. Its second free at the read-back
        # is upstream's own and idempotent (invariant 15 holds). Told nothing, the
        # reference spares batch N by memory, so "empty" worlds cannot tell them apart.
        "in_flight_pin",
        (),
        overlap=True,
    ),
    Mutant(
        "forgets_running_batch",
        ForgetsRunningBatch,
        "told nothing in flight, the pass takes victims and recompute-pause candidates "
        "from the batch still on the device",
        # Only a world that checks 14 though the scheduler is told nothing
        # (in_flight_pin = "always": upstream-defaults) sees it.
        "in_flight_pin",
        ("ownership_follows_residency",),
        overlap=True,
    ),
    Mutant(
        "schedules_retiring",
        SchedulesRetiring,
        "a retiring request is scheduled again",
        "output_lists_well_formed",
        ("retiring_keeps_its_place",),
        overlap=True,
    ),
)

BY_NAME = {m.name: m for m in CATALOGUE}
