"""Upstream's deadlock detector, read from the world: the passes it counts as stalled.

TensorRT-LLM's V2 scheduler (``scheduler_v2.py`` at 00746ef9) counts the
consecutive passes that schedule, suspend and preempt nothing while a request
waits (``KVCacheV2Scheduler._detect_deadlock``), and at the
``_DEADLOCK_STALL_ITERS``-th raises ``RuntimeError("V2 scheduler deadlock:
...")``. ``PyExecutor._event_loop_wrapper`` (``py_executor.py`` at 0004396)
logs "Error in event loop" and re-raises: the executor stops. A drain that
cannot finish is therefore one of two findings: a stall, where upstream's
executor stops with that error, or a livelock whose passes upstream counts as
progress (a suspension each pass), where it spins without a word.

The count is the world's reading of upstream's rule, so it judges every
scheduler's trace: for ``trtllm:`` the checkout's own detector raises on the
same pass (the drain reports that raise), and for any other scheduler the
finding says what upstream's executor does on the trace it produced.
"""

from __future__ import annotations

from peftlife.world.request import LlmRequestState
from peftlife.world.snapshot import Snapshot, StepError

# scheduler_v2.py, KVCacheV2Scheduler._DEADLOCK_STALL_ITERS (00746ef9): the stalled
# passes after which upstream's scheduler raises.
DEADLOCK_STALL_ITERS = 1000
# The first words of the RuntimeError _detect_deadlock raises (scheduler_v2.py, 00746ef9).
UPSTREAM_DEADLOCK = "V2 scheduler deadlock"
# The states upstream's detector counts as waiting: a generation request in progress
# (not retiring) and a context request deferred to phase 2 (``pending_ctx``).
_WAITING = (LlmRequestState.CONTEXT_INIT, LlmRequestState.GENERATION_IN_PROGRESS)


def stalled(s: Snapshot) -> bool:
    """Whether upstream's detector counts this pass as stalled.

    A pass stalls when its output lists nobody (``made_progress`` false in
    ``_schedule_loop``: nothing scheduled, paused or recompute-paused) while a
    request waits that is not in the batch the scheduler was told is in flight
    (``num_gen_candidates`` or ``num_ctx_candidates`` above zero). A pass whose
    scheduler raised or returned no output is not a pass the detector saw.

    >>> from peftlife.world.engine import Engine
    >>> from peftlife.world.config import EngineConfig
    >>> from peftlife.sut.reference import ReferenceScheduler
    >>> engine = Engine(EngineConfig(), ReferenceScheduler)
    >>> _ = engine.submit(prompt_len=4, max_new_tokens=2)
    >>> stalled(engine.step())
    False
    """
    step = s.step
    if step is None or step.output is None:
        return False
    if any(ids for _, ids in step.output.lists()):
        return False
    told = step.overlap.in_flight if step.overlap and step.overlap.in_flight_told else ()
    return any(r.state in _WAITING and r.request_id not in told for r in s.requests)


def upstream_raised(s: Snapshot) -> StepError | None:
    """The scheduler's own deadlock error in this pass, in upstream's words; None if none.

    >>> from peftlife.world.snapshot import StepRecord
    >>> said = "schedule_request raised RuntimeError: V2 scheduler deadlock: 1 ..."
    >>> error = StepError("scheduler_raised", said, exception="RuntimeError")
    >>> step = StepRecord(1, None, False, (), (), (error,))
    >>> upstream_raised(Snapshot(1, (), (), (), (), (), step)) is error
    True
    """
    for err in s.step.errors if s.step else ():
        if err.exception == "RuntimeError" and f": {UPSTREAM_DEADLOCK}" in err.message:
            return err
    return None


def executor_stops(passes: int = DEADLOCK_STALL_ITERS) -> str:
    """What upstream's executor does after ``passes`` stalled passes, in upstream's words.

    >>> executor_stops()
    'the executor stops: V2 scheduler deadlock after 1000 stalled passes'
    """
    return f"the executor stops: {UPSTREAM_DEADLOCK} after {passes} stalled passes"
