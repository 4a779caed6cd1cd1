"""What a front door asks of every lifecycle machine it runs in this session.

The pytest plugin sets these from ``--peftlife-sut``, ``--peftlife-scenario``,
``--peftlife-profile``, ``--peftlife-database`` and ``--peftlife-shrink-timeout``
for the length of a pytest session, so a
``lifecycle_machine(...).TestCase`` collected from a project's tests is
retargeted as the options say; outside a session every field is None and a
machine runs what it was built with, under the default profile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import attrs

from peftlife import sut as sut_module
from peftlife.search.shrink import DEFAULT_TIMEOUT, ShrinkProgress

if TYPE_CHECKING:
    from peftlife.search.scenarios import Scenario


@attrs.frozen
class Options:
    """Overrides for every machine run in this session; None keeps the machine's own."""

    # A SUT string, or as the front door resolved it once for the session.
    sut: str | sut_module.Resolved | None = None
    # A scenario's name or path, or as the front door read it once for the session.
    scenario: Scenario | str | None = None
    profile: str | None = None
    # An example database (Hypothesis's), opened once for the session.
    database: object = None
    # The cap on shrinking one finding (None: no cap), and who hears how it goes.
    shrink_timeout: float | None = DEFAULT_TIMEOUT
    shrink_progress: Callable[[ShrinkProgress], None] | None = None
    # Told each search a machine's test ran, with its result (a ``SearchResult``):
    # the pytest plugin's statistics.
    on_search: Callable[[Any], None] | None = None


_current: list[Options] = [Options()]


def current() -> Options:
    """The options in force.

    >>> current().sut is None
    True
    """
    return _current[-1]


def begin(options: Options) -> None:
    """Put ``options`` in force until ``end()``."""
    _current.append(options)


def end() -> None:
    """Restore the options in force before the last ``begin()``."""
    if len(_current) > 1:
        _current.pop()


@contextmanager
def using(options: Options) -> Iterator[None]:
    """``options`` in force inside the block.

    >>> with using(Options(sut="reference")):
    ...     current().sut
    'reference'
    """
    begin(options)
    try:
        yield
    finally:
        end()
