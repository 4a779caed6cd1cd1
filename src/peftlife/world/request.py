"""The request: the one object every actor of the world reads.

It mirrors the fields of upstream's ``LlmRequest`` that scheduling and adapter
ownership depend on. The engine owns each request and is the only actor that
advances it (positions, tokens, state); a scheduler only sets
``context_chunk_size`` on the context requests it schedules (and upstream's
scratch fields), and the PEFT manager only drops ``lora_weights`` once it has
loaded them.
"""

from __future__ import annotations

import enum

import attrs

from peftlife.world.immutable import copied_by_field


class LlmRequestState(enum.IntEnum):
    """Upstream's request states, with upstream's values (the model uses four)."""

    CONTEXT_INIT = 10
    GENERATION_IN_PROGRESS = 13
    # Retiring: under the overlap executor, a request whose last token is in flight.
    GENERATION_TO_COMPLETE = 14
    GENERATION_COMPLETE = 20


# What a scheduler may write on a request (docs/invariants.md, 8b); any other field is the world's.
SCHEDULER_WRITABLE_FIELDS = frozenset(
    {"context_chunk_size", "py_batch_idx", "estimated_reusable_tokens", "py_ctx_pre_resize_cap"}
)


@copied_by_field
@attrs.define(slots=True, eq=False)
class Request:
    """A request as the scheduler sees it.

    The context to prefill is ``prompt_len`` plus the tokens a recompute pause
    folded back into it (``num_folded``): that sum, ``context_len``, is what
    upstream calls ``prompt_len``. The cache a request needs is always
    ``prompt_len + num_generated`` tokens once it generates.

    >>> r = Request(request_id=1, lora_task_id=7, lora_weights=True,
    ...             prompt_len=8, max_new_tokens=2)
    >>> r.is_first_context_chunk, r.is_started
    (True, False)
    """

    request_id: int
    lora_task_id: int | None
    lora_weights: bool
    prompt_len: int
    max_new_tokens: int
    # Upstream's ``py_lora_path``: where the adapter can be loaded from again. The LLM
    # API's PyTorch backend sends every LoRA request with a path and no weights; a
    # request sent with weights (and no path) loses them at its first registration.
    lora_path: bool = False
    state: LlmRequestState = LlmRequestState.CONTEXT_INIT
    context_current_position: int = 0
    num_generated: int = 0
    num_folded: int = 0
    # Set by the scheduler on every context request it schedules. As in upstream's C++
    # request it starts at the whole prompt: upstream's unchunked path never sets it.
    context_chunk_size: int = attrs.field(
        default=attrs.Factory(lambda self: self.prompt_len, takes_self=True)
    )
    # Upstream's scratch fields, which its scheduler writes (slots leave no room otherwise).
    py_batch_idx: int | None = None
    estimated_reusable_tokens: int = 0
    py_ctx_pre_resize_cap: int | None = None

    @property
    def context_len(self) -> int:
        """Tokens to prefill: the prompt plus what a recompute pause folded in."""
        return self.prompt_len + self.num_folded

    @property
    def py_request_id(self) -> int:
        return self.request_id

    @property
    def state_value(self) -> int:
        return int(self.state)

    @property
    def context_remaining_length(self) -> int:
        return self.context_len - self.context_current_position

    @property
    def num_tokens(self) -> int:
        """Tokens whose KV a running request holds or is about to compute."""
        return self.prompt_len + self.num_generated

    @property
    def is_context_init_state(self) -> bool:
        return self.state == LlmRequestState.CONTEXT_INIT

    @property
    def is_generation_in_progress_state(self) -> bool:
        return self.state == LlmRequestState.GENERATION_IN_PROGRESS

    @property
    def is_generation_to_complete_state(self) -> bool:
        return self.state == LlmRequestState.GENERATION_TO_COMPLETE

    @property
    def is_last_context_chunk(self) -> bool:
        """The chunk set on this request reaches the end of its context."""
        return self.context_current_position + self.context_chunk_size >= self.context_len

    def get_beam_width_by_iter(self, for_next_iteration: bool = False) -> int:
        """Beam width above one is out of scope: always one."""
        return 1

    @property
    def is_first_context_chunk(self) -> bool:
        """A context request none of whose prompt is in KV yet."""
        return self.is_context_init_state and self.context_current_position == 0

    @property
    def is_started(self) -> bool:
        """Upstream's ``_is_started_request``: only started requests own an adapter."""
        # Unfolded from is_context_init_state, is_first_context_chunk and
        # is_generation_in_progress_state: every snapshot asks it of every request.
        state = self.state
        return (
            state == LlmRequestState.CONTEXT_INIT and self.context_current_position != 0
        ) or state == LlmRequestState.GENERATION_IN_PROGRESS

    @property
    def is_schedulable(self) -> bool:
        return LlmRequestState.CONTEXT_INIT <= self.state < LlmRequestState.GENERATION_TO_COMPLETE
