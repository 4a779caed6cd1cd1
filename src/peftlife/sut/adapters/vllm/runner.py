"""The model runner the engine core launches each batch on, as far as the scheduler sees it.

Stands for ``vllm/v1/worker/gpu/model_runner.py``'s ``GPUModelRunner``, the
V2 model runner (the default on 0.33.0, the only one on 0.34.0). What can run
on a CPU runs: the step's adapter set is assembled by vLLM's own ``LoraState``
(``v1/worker/gpu/lora_utils.py``) over the release's own ``LoRARequest``, so
its equality (the name on 0.33.0; the name and id on 0.34.0) decides which
adapters the step asks the slot manager for. What cannot run is modelled,
each rule naming what it stands for: the request slots, and the model's
sampled tokens, among them a drawn end of sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from peftlife.sut.adapters.vllm.checkout import Checkout
from peftlife.sut.adapters.vllm.standins import Fields

TOKEN = 7  # the token the model samples, unless it draws an end of sequence
EOS = 2  # the model's end-of-sequence token, as its generation config gives it


@attrs.define
class Batch:
    """One launched batch: the scheduler's output, and what the model made of it.

    ``sampled`` is filled at launch and read when the engine core takes the
    batch's output; an end of sequence drawn while the batch is in flight
    changes it before then.
    """

    output: Any  # the scheduler's SchedulerOutput
    lora_requests: frozenset[Any]  # the release's LoRARequest objects the step activates
    sampled: dict[str, list[int]]  # request id -> the tokens the model sampled


class ModelRunner:
    """The runner's request slots, adapter table and sampler, for one engine core."""

    def __init__(self, checkout: Checkout, max_num_reqs: int) -> None:
        lora_utils = checkout.module("vllm.v1.worker.gpu.lora_utils")
        with checkout.installed():
            self.lora_state = lora_utils.LoraState(max_num_reqs=max_num_reqs)
        self.checkout = checkout
        # Stands for RequestState's slots (v1/worker/gpu/states.py, add_request and
        # remove_request): the last free index is taken, a freed one goes to the end.
        self.free_indices = list(range(max_num_reqs))
        self.req_id_to_index: dict[str, int] = {}
        self.eos_next: set[str] = set()  # the next token each of these samples is EOS

    def _remove(self, req_id: str) -> None:
        index = self.req_id_to_index.pop(req_id, None)
        if index is not None:
            self.free_indices.append(index)
        self.lora_state.remove_request(req_id)

    def adapter_set(self, output: Any) -> frozenset[Any]:
        """The step's adapters, assembled as ``GPUModelRunner.execute_model`` does.

        Stands for its ``finish_requests`` (finished and preempted requests
        leave the runner), ``add_requests`` (each new request's
        ``lora_request`` into ``LoraState.add_request``) and ``prepare_inputs``'s
        ``LoraState.make_lora_inputs``, whose set is vLLM's own
        ``LoraState.get_activate_loras`` over the scheduled request ids.
        """
        with self.checkout.installed():
            gone = set(output.finished_req_ids) | set(output.preempted_req_ids or ())
            for req_id in sorted(gone):
                self._remove(req_id)
            for new in output.scheduled_new_reqs:
                self._remove(new.req_id)  # a request re-sent as new replaces its state
                assert self.free_indices, "No free indices"  # states.py's own assert
                index = self.free_indices.pop()
                self.req_id_to_index[new.req_id] = index
                self.lora_state.add_request(new.req_id, index, new.lora_request)
            req_ids = list(output.num_scheduled_tokens)
            if hasattr(self.lora_state, "get_activate_loras"):
                return frozenset(self.lora_state.get_activate_loras(req_ids))
            # To 0.23.0 the set is make_lora_inputs's third result, over the slots.
            slots = np.array([self.req_id_to_index[r] for r in req_ids], dtype=np.int32)
            tokens = np.array([output.num_scheduled_tokens[r] for r in req_ids], dtype=np.int32)
            return frozenset(self.lora_state.make_lora_inputs(req_ids, slots, tokens)[2])

    def launch(self, output: Any, requests: Mapping[str, Any]) -> Batch:
        """``execute_model`` and ``sample_tokens`` for ``output``: the adapter set and the tokens.

        The sampler is modelled (it stands for the model's forward pass and
        ``Sampler``): a request whose scheduled tokens end what it has samples
        one token, a prefill chunk that does not samples none (the runner
        discards it); the scheduler marks which is which on the request itself
        (``Request.is_prefill_chunk``, set in ``Scheduler._update_after_schedule``).
        The token is ``TOKEN``, or ``EOS`` for a request ``draw_eos`` named.
        """
        lora_requests = self.adapter_set(output)
        sampled: dict[str, list[int]] = {}
        for req_id in output.num_scheduled_tokens:
            if requests[req_id].is_prefill_chunk:
                sampled[req_id] = []
            elif req_id in self.eos_next:
                self.eos_next.discard(req_id)
                sampled[req_id] = [EOS]
            else:
                sampled[req_id] = [TOKEN]
        return Batch(output, lora_requests, sampled)

    def model_output(self, batch: Batch) -> Fields:
        """The batch's ``ModelRunnerOutput`` (``vllm/v1/outputs.py``), as the engine takes it."""
        ids = list(batch.output.num_scheduled_tokens)
        added = self.checkout.release.fields_of("model_runner_output")
        if "req_ids" in added:
            added["req_ids"] = ids
        return Fields(
            "model_runner_output",
            **added,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=[batch.sampled[r] for r in ids],
            logprobs=None,
            prompt_logprobs_dict={},
            prompt_token_id_logprobs_dict={},
            pooler_output=None,
            num_nans_in_logits=None,
            kv_connector_output=None,
            ec_connector_output=None,
            cudagraph_stats=None,
            aux_output_connector_output=None,
        )
