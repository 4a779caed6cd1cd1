"""What the executor loops ask of the world: its services, each by name.

``peftlife.world.loops`` is upstream's ``PyExecutor`` loop, step by step;
``Engine`` holds the world's state. The loops reach that state only through
the services below, so that the loops read as upstream's loop and the engine
can change its bookkeeping without the loops knowing, and so that the loops
need not import the engine that runs them (the engine imports the loops, the
loops import this). Each service names the ``py_executor.py`` function it
stands for; the bookkeeping ones that have none (the call ledger, the step
record) say so.

Limits: a protocol, checked by mypy where ``Engine.step`` hands itself to a
loop; nothing checks it at run time.
"""

from __future__ import annotations

from typing import Protocol

from peftlife.world.config import EngineConfig
from peftlife.world.kv import KVCacheManager
from peftlife.world.ledger import Caller
from peftlife.world.output import Lists
from peftlife.world.request import Request
from peftlife.world.snapshot import (
    Outcome,
    OutputRecord,
    OverlapStep,
    ScheduledView,
    Snapshot,
    StepError,
)


class ExecutorServices(Protocol):
    """The world as the executor loops use it; ``Engine`` is the one implementation.

    >>> from peftlife.sut.reference import ReferenceScheduler
    >>> from peftlife.world.engine import Engine
    >>> from peftlife.world.loops import simple_iteration
    >>> simple_iteration(Engine(EngineConfig(), ReferenceScheduler)).iteration
    1
    """

    @property
    def config(self) -> EngineConfig:
        """The world's configuration: which executor, which teardown, which holds."""
        ...

    @property
    def pools(self) -> tuple[KVCacheManager, ...]:
        """Every KV pool, target first: upstream's KV cache managers."""
        ...

    @property
    def recompute_pending(self) -> frozenset[int]:
        """The started requests whose KV the scheduler freed, until ``prepare_resources``
        registers them again. No upstream counterpart: the step record's, for the checker."""
        ...

    def is_live(self, request_id: int) -> bool:
        """Whether a request is among upstream's ``active_requests``."""
        ...

    def begin_iteration(self) -> None:
        """A new iteration of the loop's body. No upstream counterpart: the call
        ledger and the step record start again."""
        ...

    def take_cancellations(self) -> tuple[Request, ...]:
        """The requests cancelled since the last iteration, in order, and the queue
        emptied: what ``_handle_canceled_requests`` reads."""
        ...

    def act_as(self, caller: Caller) -> Caller:
        """Record the manager calls that follow as ``caller``'s; returns the caller
        before. No upstream counterpart: the call ledger's."""
        ...

    def schedule(
        self, errors: list[StepError], inflight: set[int] | None = None
    ) -> tuple[Lists | None, OutputRecord | None]:
        """``_schedule`` -> ``scheduler.schedule_request``, told ``inflight`` (None:
        nothing): the scheduler's lists and the record of its answer, or None and
        None with what it did wrong in ``errors``."""
        ...

    def free_request_resources(self, req: Request) -> None:
        """``_free_request_resources``: every resource manager's ``free_resources``
        (every KV pool; the PEFT manager's ``mark_request_done`` without pause)."""
        ...

    def prepare_resources(
        self, context: list[Request], generation: list[Request], errors: list[StepError]
    ) -> tuple[list[Request], StepError | None]:
        """``resource_manager.prepare_resources``: register every context request
        (``add_request_peft``; one that cannot is failed, in ``errors``), then
        ``ensure_batch``. Returns the context requests kept, and ``ensure_batch``'s
        failure if it raised."""
        ...

    def scheduled_views(
        self, context: list[Request], generation: list[Request]
    ) -> tuple[ScheduledView, ...]:
        """The batch as ``prepare_resources`` left it. No upstream counterpart: the
        step record's, for the checker."""
        ...

    def terminate_request(self, req: Request, outcome: Outcome) -> None:
        """``_terminate_request``: the request's resources freed (as
        ``free_request_resources``) and the request gone from ``active_requests``,
        ended by ``outcome``."""
        ...

    def end_iteration(
        self,
        record: OutputRecord | None,
        batch_ran: bool,
        after_prepare: tuple[ScheduledView, ...],
        errors: list[StepError],
        pending_before: frozenset[int],
        overlap: OverlapStep | None = None,
    ) -> Snapshot:
        """The iteration closed into its step record, and the snapshot after it. No
        upstream counterpart: the harness's view of the iteration."""
        ...
