"""The kit both engine adapters run upstream files with, over stand-ins, on a CPU.

``standins.py``: stand-in modules that record a name they lack
(``MissingStandIn``) and ``installed()``, which puts modules in ``sys.modules``
for one call only. ``loader.py``: ``Loader``, which executes an engine's
unmodified files under their real module names over those stand-ins and turns
a miss into one ``CheckoutError`` line, and ``find_package`` /
``package_locations``, which find a checkout's or an installed package's files
without importing them. ``release.py``: ``release_files``, a release's Python
files from the package registry, each checked against its wheel's ``RECORD``.
"""

from peftlife.sut.adapters.upstream.loader import (
    CheckoutError,
    Loader,
    find_package,
    package_locations,
)
from peftlife.sut.adapters.upstream.release import release_files
from peftlife.sut.adapters.upstream.standins import (
    MissingStandIn,
    StandInModule,
    as_package,
    installed,
)

__all__ = [
    "CheckoutError",
    "Loader",
    "MissingStandIn",
    "StandInModule",
    "as_package",
    "find_package",
    "installed",
    "package_locations",
    "release_files",
]
