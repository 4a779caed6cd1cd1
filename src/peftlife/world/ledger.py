"""The call ledger: every manager call of a run, with who made it and when.

The KV pools and the PEFT manager append to one shared ledger; the engine
moves its ``iteration`` and ``caller`` on as the executor loop goes from the
scheduler to ``prepare_resources`` to freeing finished requests. The call
rules of the checker (duplicate registration, phantom release) read it, so
each entry also carries the facts *at call time* that those rules need,
which a later snapshot can no longer see.
"""

from __future__ import annotations

from typing import Literal

import attrs

Caller = Literal["scheduler", "prepare_resources", "free_resources", "harness"]
Component = Literal["target", "draft", "peft"]


@attrs.frozen
class Call:
    """One manager call.

    ``detail`` holds ``(key, value)`` facts seen at call time, for example
    ``(("already_active", True),)`` on an ``add_request_peft``.
    """

    iteration: int
    caller: Caller
    component: Component
    method: str
    request_id: int | None
    args: tuple[tuple[str, object], ...] = ()
    result: object = None
    detail: tuple[tuple[str, object], ...] = ()

    @property
    def frees_started_request(self) -> bool:
        """The scheduler freed a started request's target cache: a recompute pause
        or a preemption (an unstarted first chunk being rewound is not one)."""
        return (
            self.caller == "scheduler"
            and self.component == "target"
            and self.method in ("free_resources", "preempt_request")
            and bool(self.get("started"))
            and bool(self.get("had_cache"))
        )

    def get(self, key: str, default: object = None) -> object:
        """Look a key up in ``args`` then ``detail``."""
        for k, v in (*self.args, *self.detail):
            if k == key:
                return v
        return default


@attrs.define
class CallLedger:
    """Append-only list of calls; ``since(i)`` gives one iteration's calls.

    >>> ledger = CallLedger()
    >>> ledger.record("peft", "mark_request_done", 3, args=(("pause", True),))
    >>> ledger.calls[0].method
    'mark_request_done'
    """

    iteration: int = 0
    caller: Caller = "harness"
    calls: list[Call] = attrs.field(factory=list)

    def record(
        self,
        component: Component,
        method: str,
        request_id: int | None,
        *,
        args: tuple[tuple[str, object], ...] = (),
        result: object = None,
        detail: tuple[tuple[str, object], ...] = (),
    ) -> None:
        self.calls.append(
            Call(
                iteration=self.iteration,
                caller=self.caller,
                component=component,
                method=method,
                request_id=request_id,
                args=args,
                result=result,
                detail=detail,
            )
        )

    def mark(self) -> int:
        """A position to pass to ``since`` later."""
        return len(self.calls)

    def since(self, position: int) -> tuple[Call, ...]:
        return tuple(self.calls[position:])
