"""Settings profiles: HOW LONG the state machine searches.

peftlife's profiles have names of their own, ``peftlife-dev`` (quick, the local
default), ``peftlife-ci`` (derandomized, sized for a two-core CI run; the
default when the ``CI`` variable is set) and ``peftlife-nightly`` (long,
random), and apply only to peftlife's machines: both front doors look them up
here instead of loading them into Hypothesis. ``dev``, ``ci`` and ``nightly``
are accepted as short names. Hypothesis's own profiles, and a project's, are
never touched; ``register()`` only adds the three peftlife names (so
``--hypothesis-profile peftlife-ci`` works too) and only when asked.

Under pytest a machine searches under ``chosen``: the profile asked of peftlife
(``--peftlife-profile``), else the one a project loaded into Hypothesis
(``settings.load_profile`` in a ``conftest.py``, or ``--hypothesis-profile``,
whichever Hypothesis loaded last, as for its own tests), else the default. A
project's profile applies with what a lifecycle example needs on top: no
deadline and slow data generation allowed, as Hypothesis runs any state machine
without a deadline.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets

from hypothesis import HealthCheck, Verbosity, settings

NAMES = ("peftlife-dev", "peftlife-ci", "peftlife-nightly")
SHORT = {name.removeprefix("peftlife-"): name for name in NAMES}

# Hypothesis's own profiles as it registered them, read (never changed) as this module
# is imported: loaded, "default" chooses no search, and "ci", which Hypothesis loads by
# itself on a CI machine, means peftlife's.
_HYPOTHESIS_OWN = {"default": settings.get_profile("default")}
with contextlib.suppress(Exception):  # a Hypothesis older than its "ci" profile has none
    _HYPOTHESIS_OWN["ci"] = settings.get_profile("ci")
# The copy of a profile Hypothesis's pytest plugin loads for --hypothesis-verbosity and
# --hypothesis-explain: "NAME-with-verbose-verbosity", "NAME-with-explain-phase".
_COPY = re.compile(r"(?P<name>.+)-with-(?:[a-z]+-verbosity|explain-phase)")


def _for_machines(profile: settings) -> settings:
    """A profile as a lifecycle machine runs it: no deadline (an example builds a
    world and drains it), slow data generation allowed."""
    slow = (HealthCheck.too_slow, HealthCheck.data_too_large)
    allowed = dict.fromkeys([*profile.suppress_health_check, *slow])  # each once, in order
    return settings(profile, deadline=None, suppress_health_check=list(allowed))


# peftlife's own are built on Hypothesis's defaults, not on whatever profile is loaded:
# under a CI environment variable Hypothesis loads its "ci" profile (derandomized, no
# database), which would otherwise turn peftlife's dev and nightly profiles into that too.
_BASE = _for_machines(_HYPOTHESIS_OWN["default"])

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
        if not _registered(name):
            settings.register_profile(name, profile)


def _registered(name: str) -> bool:
    try:
        settings.get_profile(name)
    except Exception:  # Hypothesis raises InvalidArgument for an unknown name
        return False
    return True


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
        return _for_machines(settings.get_profile(full))
    except Exception as err:
        known = ", ".join(NAMES)
        raise ProfileError(
            f"unknown settings profile {name!r}: use one of {known} (or dev, ci, nightly), "
            "or register it with hypothesis.settings.register_profile first"
        ) from err


def loaded() -> str | None:
    """The profile a project loaded into Hypothesis (``settings.load_profile``, or
    pytest's ``--hypothesis-profile``), or None when it loaded none of its own.

    Hypothesis's ``default`` is no choice; its ``ci`` (which it loads itself where a
    CI variable is set) is ``peftlife-ci``. The copy its pytest plugin loads for
    ``--hypothesis-verbosity`` counts as the profile it copies.

    >>> loaded() is None or loaded() == "peftlife-ci"
    True
    """
    current = getattr(settings, "get_current_profile_name", None)
    if current is None:  # a Hypothesis that does not say which profile is loaded
        return None
    name: str = current()
    while (copy := _COPY.fullmatch(name)) and _registered(copy["name"]):
        name = copy["name"]
    profile = settings.get_profile(name)
    if profile is _HYPOTHESIS_OWN["default"]:
        return None
    return "peftlife-ci" if profile is _HYPOTHESIS_OWN.get("ci") else name


def chosen(asked: str | None = None) -> tuple[str, settings]:
    """The name and settings a machine collected by pytest searches under: ``asked``
    (``--peftlife-profile``), else the profile loaded into Hypothesis (``loaded``),
    else the default (``default_name``).

    >>> chosen("ci")[0], chosen("nightly")[1].max_examples
    ('peftlife-ci', 2000)
    """
    if asked:
        return canonical(asked), get(asked)
    name = loaded() or default_name()
    # A loaded profile is the project's by the name it registered, even a short name.
    return name, _PROFILES.get(name) or _for_machines(settings.get_profile(name))


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
