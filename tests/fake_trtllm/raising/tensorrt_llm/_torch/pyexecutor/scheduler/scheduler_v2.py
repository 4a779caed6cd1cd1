"""Fake of TensorRT-LLM's scheduler_v2.py whose scheduler raises inside a pass."""

from .scheduler import RequestScheduler, SchedulerOutput, log


class KVCacheV2Scheduler(RequestScheduler):
    def __init__(self, max_batch_size, max_num_tokens, kv_cache_manager, scheduler_policy, **_):
        self.kv = kv_cache_manager

    def schedule_request(self, active_requests, inflight_request_ids):
        if active_requests:
            log("giving up")
            raise RuntimeError("V2 scheduler deadlock: the pool is exhausted")
        return SchedulerOutput()
