"""Settings profiles: HOW LONG the state machine searches.

``dev`` is quick, ``ci`` is derandomized with a budget sized for a two-core CI
run of the whole suite, ``nightly`` is long and random. They are registered
with Hypothesis under these names, so ``--hypothesis-profile`` selects them;
``register()`` is safe to call more than once.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

NAMES = ("dev", "ci", "nightly")

# A stateful example builds a world and drains it; slow data generation is expected.
_BASE = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def register() -> None:
    """Register the three profiles with Hypothesis."""
    settings.register_profile("dev", _BASE, max_examples=40, stateful_step_count=30)
    settings.register_profile(
        "ci",
        _BASE,
        max_examples=300,
        stateful_step_count=40,
        derandomize=True,
        database=None,
        print_blob=False,
    )
    settings.register_profile("nightly", _BASE, max_examples=2000, stateful_step_count=100)


def default_name() -> str:
    """``ci`` when the CI variable is set, else ``dev``."""
    return "ci" if os.environ.get("CI") else "dev"


def get(name: str) -> settings:
    """The registered settings of one profile."""
    register()
    return settings.get_profile(name)
