"""vLLM's v1 ``Scheduler``, from a checkout or a release's wheel, on a machine without GPUs.

A spike toward peftlife's second world (docs/engines.md): ``Checkout(path)``
loads the unmodified ``vllm/v1/core/sched/scheduler.py`` (and the five files it
needs beside it) over stand-ins; ``Driver`` steps it on a tiny configuration
and reads its decisions back; ``release_files(version, cache)`` fetches a
release's files with ``pip download --no-deps``. Not yet a SUT behind the doors.
"""

from peftlife.sut.adapters.tensorrt_llm.checkout import CheckoutError
from peftlife.sut.adapters.vllm.checkout import Checkout
from peftlife.sut.adapters.vllm.driver import Driver, Step, TinyConfig
from peftlife.sut.adapters.vllm.release import release_files

__all__ = ["Checkout", "CheckoutError", "Driver", "Step", "TinyConfig", "release_files"]
