"""Schedulers that break the protocol, loaded by SUT string in the machine tests."""

from __future__ import annotations

import os
import threading
import time

from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.protocol import Environment, SchedulerOutput
from peftlife.world.request import Request


class Raising(ReferenceScheduler):
    """Raises once it has two requests to think about."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        if len(active_requests) > 1:
            raise RuntimeError("scheduler bug")
        return super().schedule_request(active_requests, inflight_request_ids)


class Twice(ReferenceScheduler):
    """Lists a scheduled generation request a second time."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        out = super().schedule_request(active_requests, inflight_request_ids)
        out.generation_requests.extend(out.generation_requests)
        return out


class UnknownId(ReferenceScheduler):
    """Returns a request the engine never submitted."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        out = super().schedule_request(active_requests, inflight_request_ids)
        out.paused_requests.append(Request(10_000, None, False, prompt_len=1, max_new_tokens=1))
        return out


def not_a_scheduler(env: Environment) -> object:
    """A factory whose product has no schedule_request at all."""
    return object()


class NeverSchedules:
    """Lists nothing, ever: every request waits until the drain gives up."""

    def __init__(self, env: Environment) -> None:
        pass

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        return SchedulerOutput()


class StatelessNeverSchedules(NeverSchedules):
    """Never schedules, and says so: the drain stops at the first repeated world."""

    keeps_no_state_between_passes = True


class EndsItsProcess(ReferenceScheduler):
    """Ends the whole process once it sees two requests, as a scheduler that aborts would."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        if len(active_requests) > 1:
            os._exit(3)
        return super().schedule_request(active_requests, inflight_request_ids)


class StatefulNoReleaseOnSuspend(ReferenceScheduler):
    """The no_release_on_suspend mutant, not declaring that it keeps no state."""

    keeps_no_state_between_passes = False

    def release_on_suspend(self, req: Request) -> None:
        pass


class SaysYes(ReferenceScheduler):
    """The reference, declaring "yes": only the bool True declares no state."""

    keeps_no_state_between_passes = "yes"


class KeepsState(ReferenceScheduler):
    """The reference, declaring that it keeps state between passes."""

    keeps_no_state_between_passes = False


class DeclarationRaises(ReferenceScheduler):
    """The reference, whose declaration is a property that raises when read."""

    @property
    def keeps_no_state_between_passes(self) -> bool:
        raise RuntimeError("cannot say")


class OutputRaises(ReferenceScheduler):
    """The reference, returning an output whose last list is a property that raises."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> object:
        return _ListsThatRaise(super().schedule_request(active_requests, inflight_request_ids))


class _ListsThatRaise:
    def __init__(self, out: SchedulerOutput) -> None:
        self.context_requests = out.context_requests
        self.generation_requests = out.generation_requests
        self.paused_requests = out.paused_requests

    @property
    def recompute_paused_requests(self) -> list[Request]:
        raise RuntimeError("cannot list")


class HoldsALock(ReferenceScheduler):
    """The reference, holding a lock: it cannot be copied."""

    def __init__(self, env: Environment) -> None:
        super().__init__(env)
        self.lock = threading.Lock()


class LockedNoReleaseOnSuspend(HoldsALock):
    """The no_release_on_suspend mutant, holding a lock: it cannot be copied."""

    def release_on_suspend(self, req: Request) -> None:
        pass


# ---- every way of breaking the harness's hold, one class each (the robustness table) ----


class ReturnsGarbage(ReferenceScheduler):
    """Returns a number instead of a SchedulerOutput once it has two requests."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> object:
        if len(active_requests) > 1:
            return 42
        return super().schedule_request(active_requests, inflight_request_ids)


class HangsInPython(ReferenceScheduler):
    """Loops in Python once it has two requests: the in-process alarm interrupts it."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        while len(active_requests) > 1:
            pass
        return super().schedule_request(active_requests, inflight_request_ids)


class HangsInNativeCode(ReferenceScheduler):
    """Loops inside C holding the GIL once it has two requests: no signal handler runs."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        if len(active_requests) > 1:
            sum(range(10**13))
        return super().schedule_request(active_requests, inflight_request_ids)


class Segfaults(ReferenceScheduler):
    """Reads address 0 from C once it has two requests, as a broken binding would."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        if len(active_requests) > 1:
            import ctypes

            ctypes.string_at(0)
        return super().schedule_request(active_requests, inflight_request_ids)


class AllocatesWithoutBound(ReferenceScheduler):
    """Allocates 64 MiB after 64 MiB once it has two requests, never letting go."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        hoard = []
        while len(active_requests) > 1:
            hoard.append(bytearray(1 << 26))
        return super().schedule_request(active_requests, inflight_request_ids)


class SlowNoReleaseOnSuspend(ReferenceScheduler):
    """The no_release_on_suspend mutant, taking 20 ms a pass: its shrink takes long
    enough to be stopped halfway (the Ctrl-C tests)."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        time.sleep(0.02)
        return super().schedule_request(active_requests, inflight_request_ids)

    def release_on_suspend(self, req: Request) -> None:
        pass
