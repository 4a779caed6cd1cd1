"""Hypothesis observability records of peftlife runs, with peftlife's own features.

Every example the state machine runs records, as Hypothesis ``event``s, the
SUT, the scenario, the iterations it checked, its verdict (``held`` or the
invariant violated) and the scheduler paths it reached (``victim eviction``,
``refused resume``, ...). Hypothesis puts a test case's events in the
``features`` of its observability record, so viewers built on that format
(Tyche, or a few lines of ``jq``) show what the search covered.

Two ways to get the records, neither on by default:

- ``PEFTLIFE_OBSERVABILITY=runs.jsonl``: ``search`` (``peftlife check``, the
  mutant gate, ``peftlife_search`` in pytest) appends one JSON line per test
  case to that file, its ``property`` named ``peftlife SUT @ SCENARIO``;
- ``HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1``: Hypothesis's own switch, which
  writes every test case of the process under ``.hypothesis/observed/``.

Nothing here runs at import time: a callback is registered only for the
length of one search, and removed after it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from peftlife.search import compat

ENV = "PEFTLIFE_OBSERVABILITY"


def _jsonable(observation: Any) -> Any:
    try:  # Hypothesis's own conversion, as its file writer uses it
        from hypothesis.strategies._internal.utils import to_jsonable

        return to_jsonable(observation, avoid_realization=False)
    except (ImportError, TypeError):
        return json.loads(json.dumps(dataclasses.asdict(observation), default=str))


def record(observation: Any, sut: str, scenario: str) -> dict[str, Any] | None:
    """A test case observation as peftlife writes it; None for Hypothesis's info lines.

    >>> record(type("Info", (), {"type": "info"})(), "reference", "default") is None
    True
    """
    if getattr(observation, "type", None) != "test_case":
        return None
    data: dict[str, Any] = _jsonable(observation)
    data["property"] = f"peftlife {sut} @ {scenario}"
    return data


@contextmanager
def recording(path: Path | None, sut: str, scenario: str) -> Iterator[None]:
    """Append the observability record of every test case run inside to ``path``.

    With ``path`` None it does nothing, so a caller can always wrap its run.
    """
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)

    def deliver(observation: Any) -> None:
        data = record(observation, sut, scenario)
        if data is not None:
            # One write per line, in append mode: parallel gate workers never interleave.
            with path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(data, default=str) + "\n")

    with compat.observing(deliver):
        yield


def path_from_env() -> Path | None:
    """The file ``PEFTLIFE_OBSERVABILITY`` names, if it is set."""
    value = os.environ.get(ENV, "").strip()
    return Path(value) if value else None
