"""TensorRT-LLM's ``KVCacheV2Scheduler``, from a checkout, on a machine without GPUs.

``load("PATH")`` or ``load("PATH:ClassName")`` (the part after ``trtllm:`` in a
SUT string) returns a scheduler factory: the checkout's unmodified
``scheduler_v2.py`` driven over façades of peftlife's world. See
docs/tensorrt-llm.md.
"""

from peftlife.sut.adapters.tensorrt_llm.adapter import TrtllmFactory, TrtllmScheduler, load
from peftlife.sut.adapters.tensorrt_llm.checkout import Checkout
from peftlife.sut.adapters.upstream import CheckoutError

__all__ = ["Checkout", "CheckoutError", "TrtllmFactory", "TrtllmScheduler", "load"]
