"""A SUT for the campaign deadline test: a known defect whose findings never finish shrinking.

``slow_shrinker:factory`` is ``mutant:no_release_on_suspend``. A campaign's worker
imports this module to build the scheduler, and so swaps the trace shrinker for
one that sleeps for an hour, as a shrinker stuck on a hard finding would.
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

from peftlife import sut
from peftlife.search import shrink


def _never_done(*_args: Any, **_kwargs: Any) -> Any:
    time.sleep(3600)
    raise AssertionError("the campaign should have ended this worker long ago")


assert hasattr(shrink, "minimize"), "the shrinker's entry point moved: patch the new one"
# Only in the campaign's spawned worker: imported anywhere else (the campaign's parent
# wiring the SUT, a collector) it would make every later shrink in that process hang.
if multiprocessing.parent_process() is not None:
    shrink.minimize = _never_done
factory = sut.load("mutant:no_release_on_suspend")
