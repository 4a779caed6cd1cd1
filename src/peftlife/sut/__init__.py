"""The system under test: the reference scheduler, the mutant catalogue, and how a SUT is loaded.

``load(spec)`` resolves the SUT string every front door takes (``world_of(spec)``
the world settings it is searched under), and ``wired(spec)``
also builds its factory once in a small world to refuse a miswired SUT before
any search. The protocol a scheduler implements lives with the world, in
``peftlife.world.protocol``.
"""

from peftlife.sut.loader import FORMS, SUTError, SutWorld, load, world_of
from peftlife.sut.wiring import WiringError, wired

__all__ = [
    "FORMS",
    "SUTError",
    "SutWorld",
    "WiringError",
    "load",
    "wired",
    "world_of",
]
