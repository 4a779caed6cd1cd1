"""Wrong schedulers the checker must flag by search, each a small edit of the reference.

Loaded by SUT string (``tests.wrong_schedulers:NAME``) in ``test_wrong_schedulers``.
Each defect is one a scheduler written against the real managers could plausibly have.
"""

from __future__ import annotations

import contextlib
import sys
from typing import ClassVar

import attrs

from peftlife.sut.reference import ReferenceScheduler, _Pass
from peftlife.world.peft import PeftTaskNotCachedException
from peftlife.world.protocol import Environment, SchedulerOutput
from peftlife.world.request import Request


class RegistersBeforeAdmission(ReferenceScheduler):
    """Registers a first-chunk request before trying to admit it (the executor's job)."""

    def _admit_context(self, p: _Pass, j: int, req: Request, chunk: int) -> bool:
        if req.is_first_context_chunk and self.peft is not None and req.lora_task_id is not None:
            self.peft.add_request_peft(req)
        return super()._admit_context(p, j, req, chunk)


class _WithConfig(ReferenceScheduler):
    """The reference reading its configuration another way."""

    changes: ClassVar[dict[str, object]] = {}

    def __init__(self, env: Environment) -> None:
        super().__init__(attrs.evolve(env, config=attrs.evolve(env.config, **self.changes)))


class IgnoresBatchSize(_WithConfig):
    """Schedules as if the batch had no size limit."""

    changes: ClassVar[dict[str, object]] = {"max_batch_size": 1 << 20}


class ChunksWithChunkingOff(_WithConfig):
    """Splits prompts into chunks even when chunked context is off."""

    changes: ClassVar[dict[str, object]] = {"enable_chunked_context": True, "chunk_unit_size": 1}


class RecomputePausesUnstarted(ReferenceScheduler):
    """Takes any request as a recompute victim, not only started ones."""

    @staticmethod
    def _is_recompute_candidate(req: Request) -> bool:
        return True


class ExitsInsidePass(ReferenceScheduler):
    """Calls ``sys.exit()`` once it has three requests to think about."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        if len(active_requests) > 2:
            sys.exit(0)
        return super().schedule_request(active_requests, inflight_request_ids)


class WarmsUncachedAdapters(ReferenceScheduler):
    """Registers waiting requests that carry no weights for an adapter missing from the
    host cache, to warm it: ``add_request_peft`` raises, and nothing catches it."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        peft = self.peft
        for req in active_requests:
            task = req.lora_task_id
            uncached = task is not None and not req.lora_weights
            if peft is not None and uncached and task not in peft.host_cache:
                peft.add_request_peft(req)
        return super().schedule_request(active_requests, inflight_request_ids)


class SwallowsNotCached(ReferenceScheduler):
    """Suspends without the pause flag, and hides the resume that then cannot register."""

    def release_on_suspend(self, req: Request) -> None:
        self._mark_done(req, pause=False)

    def after_resume(self, req: Request) -> None:
        with contextlib.suppress(PeftTaskNotCachedException):
            super().after_resume(req)


def _spin() -> None:
    while True:
        pass


class HangsCatchingException(ReferenceScheduler):
    """Spins forever once it has three requests, swallowing every ``Exception``."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        while len(active_requests) > 2:
            try:
                _spin()
            except Exception:  # the defect under test
                continue
        return super().schedule_request(active_requests, inflight_request_ids)
