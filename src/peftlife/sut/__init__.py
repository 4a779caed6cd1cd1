"""The system under test: the reference scheduler, the mutant catalogue, and how a SUT is loaded.

``load(spec)`` resolves the SUT string every front door takes. The protocol a
scheduler implements lives with the world, in ``peftlife.world.protocol``.
"""

from peftlife.sut.loader import FORMS, SUTError, load

__all__ = ["FORMS", "SUTError", "load"]
