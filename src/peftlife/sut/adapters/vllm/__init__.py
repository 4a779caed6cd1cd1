"""vLLM's v1 scheduler and KV cache chain, from a checkout or a release's wheel, on a CPU.

A spike toward peftlife's second world (docs/engines.md): ``Checkout(path)``
loads the unmodified ``SamplingParams``, ``LoRARequest``, request, scheduler
(and ``AsyncScheduler``), KV cache manager, coordinator, block pool, block
hasher and the model runner's ``LoraState`` over stand-ins (with what its
release range adds, ``releases.py``); ``Driver`` steps them as vLLM's engine
core does (synchronously, or with a batch queue), over the model runner of
``runner.py``, and reads the decisions, the real pool and its cache fills and
hits back (``observe.py``); ``release_files(version, cache)`` fetches a
release's files with ``pip download --no-deps``. Not yet a SUT behind the doors.
"""

from peftlife.sut.adapters.upstream import CheckoutError
from peftlife.sut.adapters.vllm.checkout import Checkout
from peftlife.sut.adapters.vllm.driver import Driver, Step, TinyConfig
from peftlife.sut.adapters.vllm.observe import CacheEvent, Identity, Pool
from peftlife.sut.adapters.vllm.release import release_files

__all__ = [
    "CacheEvent",
    "Checkout",
    "CheckoutError",
    "Driver",
    "Identity",
    "Pool",
    "Step",
    "TinyConfig",
    "release_files",
]
