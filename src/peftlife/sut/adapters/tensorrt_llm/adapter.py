"""The SUT: upstream's scheduler class from a checkout, speaking peftlife's protocol.

Each pass wraps the world's requests in persistent ``LlmRequest`` façades
(upstream compares requests by identity), calls the checkout's
``schedule_request`` with the checkout's modules installed, and maps the
upstream ``SchedulerOutput`` back to the world's four lists.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

from peftlife.sut.adapters.tensorrt_llm.checkout import Checkout, installed_package
from peftlife.sut.adapters.tensorrt_llm.facades import (
    KVCacheManagerV2,
    LlmRequestFacade,
    PeftCacheManagerFacade,
)
from peftlife.sut.adapters.tensorrt_llm.standins import (
    CapacitySchedulerPolicy,
    ContextChunkingPolicy,
)
from peftlife.world.protocol import Environment, SchedulerOutput
from peftlife.world.request import Request

# Lists of upstream's output that the world does not model: they must stay empty.
_UNMODELLED = ("encoder_requests", "fitting_disagg_gen_init_requests")


def constructor_arguments(env: Environment) -> dict[str, Any]:
    """Upstream's ``KVCacheV2Scheduler`` arguments for the world of ``env``.

    A draft pool pairs jointly with the target (upstream's joint pairing);
    prefix-aware scheduling is off because prefix reuse is not modelled.
    """
    cfg = env.config
    draft = env.draft_kv_cache_manager
    peft = env.peft_cache_manager
    return {
        "max_batch_size": cfg.max_batch_size,
        "max_num_tokens": cfg.max_num_tokens,
        "kv_cache_manager": KVCacheManagerV2(env.kv_cache_manager, joint=draft is not None),
        "scheduler_policy": CapacitySchedulerPolicy.MAX_UTILIZATION,
        "ctx_chunk_config": (
            (ContextChunkingPolicy[cfg.context_chunking_policy], cfg.chunk_unit_size)
            if cfg.enable_chunked_context
            else None
        ),
        "peft_cache_manager": None if peft is None else PeftCacheManagerFacade(peft),
        "draft_kv_cache_manager": None if draft is None else KVCacheManagerV2(draft, joint=True),
        "enable_prefix_aware_scheduling": False,
        "enable_recompute_pause": cfg.enable_recompute_pause,
    }


class TrtllmScheduler:
    """One upstream scheduler instance over one engine's world."""

    # Upstream keeps state between passes (its deadlock detector's stall count).
    keeps_no_state_between_passes = False

    def __init__(self, env: Environment, checkout: Checkout) -> None:
        self._checkout = checkout
        self._facades: dict[int, LlmRequestFacade] = {}
        arguments = constructor_arguments(env)
        accepted = inspect.signature(checkout.scheduler_class).parameters
        with checkout.installed():
            self.upstream = checkout.scheduler_class(
                **{k: v for k, v in arguments.items() if k in accepted}
            )

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        facades = [self._facade(r) for r in active_requests]
        with self._checkout.installed():
            output = self.upstream.schedule_request(facades, set(inflight_request_ids))
        for name in _UNMODELLED:
            if getattr(output, name, None):
                raise NotImplementedError(
                    f"the scheduler returned {name}, which peftlife does not model"
                )
        return SchedulerOutput(
            context_requests=self._back(output, "context_requests"),
            generation_requests=self._back(output, "generation_requests"),
            paused_requests=self._back(output, "paused_requests"),
            recompute_paused_requests=self._back(output, "recompute_paused_requests", []),
        )

    def _facade(self, req: Request) -> LlmRequestFacade:
        facade = self._facades.get(req.request_id)
        if facade is None or facade._request is not req:
            facade = self._facades[req.request_id] = LlmRequestFacade(req)
        return facade

    @staticmethod
    def _back(output: object, name: str, missing: object = None) -> Any:
        """The world's requests of one output list; anything else is left for the engine
        to report as malformed output."""
        value = getattr(output, name, None)
        if value is None:
            return missing
        if not isinstance(value, list | tuple):
            return value
        return [r._request if isinstance(r, LlmRequestFacade) else r for r in value]


class TrtllmFactory:
    """A scheduler factory for one loaded checkout (``Environment -> TrtllmScheduler``)."""

    def __init__(self, checkout: Checkout) -> None:
        self.checkout = checkout
        self.__name__ = checkout.scheduler_class.__name__

    def __call__(self, env: Environment) -> TrtllmScheduler:
        return TrtllmScheduler(env, self.checkout)


_CLASS = re.compile(r"^(?P<path>.+):(?P<cls>[A-Za-z_][A-Za-z0-9_]*)$")


def load(spec: str) -> TrtllmFactory:
    """A factory for ``PATH`` or ``PATH:ClassName`` (``~`` expands); with no ``PATH``
    (``""`` or ``:ClassName``), the installed ``tensorrt_llm`` package's.

    >>> load("/nowhere")
    Traceback (most recent call last):
    ...
    peftlife.sut.adapters.upstream.loader.CheckoutError: no scheduler_v2.py at ...
    """
    if spec == "" or (spec.startswith(":") and _CLASS.match(f"installed{spec}")):
        return TrtllmFactory(Checkout(installed_package(), spec.removeprefix(":") or None))
    match = _CLASS.match(spec)
    path, class_name = spec, None
    if match and not Path(spec).expanduser().exists():
        path, class_name = match["path"], match["cls"]
    return TrtllmFactory(Checkout(Path(path).expanduser(), class_name))
