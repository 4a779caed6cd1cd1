"""A skeleton scheduler that passes peftlife: admit only what can finish, never evict."""

from peftlife import Environment, Request, SchedulerOutput


class Skeleton:
    def __init__(self, env: Environment) -> None:
        self.pools = [p for p in (env.kv_cache_manager, env.draft_kv_cache_manager) if p]
        self.peft = env.peft_cache_manager
        self.config = env.config

    def schedule_request(self, active: list[Request], inflight: set[int]) -> SchedulerOutput:
        out = SchedulerOutput()
        tokens, slots = self.config.max_num_tokens, self.config.max_batch_size
        # A request holding KV keeps it to the end: its whole life was reserved on admission.
        running = [r for r in active if self.pools[0].has_cache(r.request_id)]
        for req in active:
            if req.request_id in inflight or slots == 0 or tokens == 0:
                continue
            if req.is_generation_in_progress_state and self._grow_generation(req):
                out.generation_requests.append(req)
                tokens, slots = tokens - 1, slots - 1
            elif req.is_context_init_state:
                chunk = min(req.context_remaining_length, tokens)
                if chunk < req.context_remaining_length:  # chunk only if allowed, in units
                    unit = self.config.chunk_unit_size
                    chunk = chunk - chunk % unit if self.config.enable_chunked_context else 0
                new = req not in running
                if chunk == 0 or (new and not self._fits([*running, req])):
                    continue
                if not self._grow_context(req, chunk):
                    for pool in self.pools if new else ():  # a failed first chunk keeps no KV
                        pool.free_resources(req)
                    continue
                running += [req] if new else []
                req.context_chunk_size = chunk  # the one request field a scheduler writes
                out.context_requests.append(req)
                tokens, slots = tokens - chunk, slots - 1
        return out

    def _grow_generation(self, req: Request) -> bool:
        """One more token in every pool; a draft that fails undoes the target's grow."""
        if not self.pools[0].try_allocate_generation(req):
            return False  # an injected grow failure: try again next pass
        if all(pool.try_allocate_generation(req) for pool in self.pools[1:]):
            return True
        self.pools[0].revert_allocate_generation(req)
        return False

    def _grow_context(self, req: Request, chunk: int) -> bool:
        """Create or resume the cache, then room for ``chunk`` tokens past the cursor."""
        return all(p.prepare_context(req) and p.resize_context(req, chunk) for p in self.pools)

    def _fits(self, running: list[Request]) -> bool:
        """Every running request's whole life fits every pool, their adapters the LoRA cache."""
        for pool in self.pools:
            need = sum(pool.pages_for(r.context_len + r.max_new_tokens) for r in running)
            if need > pool.device_capacity:
                return False
        if self.peft is None:
            return True
        adapters = {r.lora_task_id: r for r in running if r.lora_task_id is not None}
        pages = sum(self.peft.determine_num_pages(r) for r in adapters.values())
        return pages <= self.peft.max_device_pages
