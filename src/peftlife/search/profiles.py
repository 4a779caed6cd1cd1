"""Settings profiles: HOW LONG the state machine searches.

peftlife's profiles have names of their own, ``peftlife-dev`` (quick, the local
default), ``peftlife-ci`` (derandomized, sized for a two-core CI run; the
default when the ``CI`` variable is set) and ``peftlife-nightly`` (long,
random), and apply only to peftlife's machines: both front doors look them up
here instead of loading them into Hypothesis. ``dev``, ``ci`` and ``nightly``
are accepted as short names. Hypothesis's own profiles, and a project's, are
never touched; ``register()`` only adds the three peftlife names (so
``--hypothesis-profile peftlife-ci`` works too) and only when asked.
"""

from __future__ import annotations

import os
import secrets

from hypothesis import HealthCheck, Verbosity, settings

NAMES = ("peftlife-dev", "peftlife-ci", "peftlife-nightly")
SHORT = {name.removeprefix("peftlife-"): name for name in NAMES}

# A stateful example builds a world and drains it; slow data generation is expected.
# Built on Hypothesis's own defaults, not on whatever profile is loaded: under a CI
# environment variable Hypothesis loads its "ci" profile (derandomized, no database),
# which would otherwise turn peftlife's dev and nightly profiles into that too.
_BASE = settings(
    settings.get_profile("default"),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_PROFILES = {
    "peftlife-dev": settings(_BASE, max_examples=40, stateful_step_count=30),
    "peftlife-ci": settings(
        _BASE,
        max_examples=300,
        stateful_step_count=40,
        derandomize=True,
        database=None,
        print_blob=False,
    ),
    "peftlife-nightly": settings(_BASE, max_examples=2000, stateful_step_count=100),
}


class ProfileError(ValueError):
    """A profile name that is neither peftlife's nor registered with Hypothesis."""


def canonical(name: str) -> str:
    """The full name of a peftlife profile given by its short name; others unchanged.

    >>> canonical("ci"), canonical("peftlife-nightly"), canonical("mine")
    ('peftlife-ci', 'peftlife-nightly', 'mine')
    """
    return SHORT.get(name, name)


def register() -> None:
    """Make the peftlife profiles known to Hypothesis, without replacing any profile.

    >>> register(); settings.get_profile("peftlife-ci").max_examples
    300
    """
    for name, profile in _PROFILES.items():
        try:
            settings.get_profile(name)
        except Exception:  # Hypothesis raises InvalidArgument for an unknown name
            settings.register_profile(name, profile)


def default_name() -> str:
    """The one default at both doors: ``peftlife-ci`` when CI is set, else ``peftlife-dev``."""
    return "peftlife-ci" if os.environ.get("CI") else "peftlife-dev"


def get(name: str) -> settings:
    """The settings of a peftlife profile (short or full name) or a registered Hypothesis one.

    >>> get("dev").max_examples
    40
    """
    full = canonical(name)
    if full in _PROFILES:
        return _PROFILES[full]
    try:
        return settings.get_profile(full)
    except Exception as err:
        known = ", ".join(NAMES)
        raise ProfileError(
            f"unknown settings profile {name!r}: use one of {known} (or dev, ci, nightly), "
            "or register it with hypothesis.settings.register_profile first"
        ) from err


def for_search(
    profile: settings, *, max_examples: int | None = None, database: object = None
) -> settings:
    """A profile as a front door runs it: quiet (the story is peftlife's to tell)
    unless Hypothesis's default settings ask for verbose output.

    ``max_examples`` and ``database`` (a Hypothesis example database) override
    the profile's when given. Hypothesis ignores the database of a derandomized
    search, so a database turns derandomization off (a seed still fixes the search).

    >>> for_search(get("ci"), max_examples=7).max_examples
    7
    """
    # Louder only when asked for (pytest's --hypothesis-verbosity loads it as the default).
    default = settings.default
    loud = default.verbosity if default and default.verbosity > Verbosity.normal else None
    changes: dict[str, object] = {"verbosity": loud or Verbosity.quiet}
    if max_examples is not None:
        changes["max_examples"] = max_examples
    if database is not None:
        changes |= {"database": database, "derandomize": False}
    return settings(profile, **changes)  # type: ignore[arg-type]


def run_seed(profile: settings, seed: int | None = None) -> int | None:
    """The seed a run searches with, so that a random run can be run again.

    The one given; None for a derandomized profile (its draw is fixed already);
    else a fresh one, which the run reports with the command that replays it.

    >>> run_seed(get("dev"), 7), run_seed(get("ci"))
    (7, None)
    """
    if seed is not None or profile.derandomize:
        return seed
    return secrets.randbelow(2**32)
