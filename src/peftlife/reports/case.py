"""A finding as a case: everything a replay needs, its replay, and its JSON.

A ``Case`` (SUT, scenario, seed, the world's configuration and the actions)
is what every report is made from; ``replay`` runs it through the engine with
no search and returns an ``Outcome``; ``to_json`` and ``Case.from_json`` are
the report file's format, with a ``schema_version``.
"""

from __future__ import annotations

import enum
import hashlib
import json
from pathlib import Path
from typing import Any

import attrs

from peftlife import sut as sut_module
from peftlife.search.machine import LifecycleFailure
from peftlife.search.trace import Action, Entry, Outcome, checked_replay
from peftlife.world.engine import EngineConfig
from peftlife.world.ledger import Call

__all__ = [
    "SCHEMA_VERSION",
    "Case",
    "Entry",
    "Outcome",
    "ReportError",
    "load_json",
    "replay",
    "to_json",
    "trace_hash",
]

SCHEMA_VERSION = 1


class ReportError(ValueError):
    """A report file that cannot be read; the message says how to fix it."""


# ---- the case and its replay ----


@attrs.frozen
class Case:
    """A finding, reduced to what a replay needs."""

    sut: str
    scenario: str
    config: EngineConfig
    actions: tuple[Action, ...]
    seed: int | None = None
    profile: str = ""

    @classmethod
    def from_failure(
        cls, failure: LifecycleFailure, *, seed: int | None = None, profile: str = ""
    ) -> Case:
        run = failure.run
        return cls(run.sut, run.scenario, run.config, run.actions, seed, profile)

    @classmethod
    def from_json(cls, data: Any) -> Case:
        """Read a case back from a report's JSON (a dict)."""
        if not isinstance(data, dict):
            raise ReportError("a peftlife report is a JSON object; this file holds something else")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ReportError(
                f"report schema_version is {version!r}; this peftlife reads version "
                f"{SCHEMA_VERSION}: regenerate the report with this version"
            )
        try:
            config = dict(data["config"])
            config["adapter_pages"] = tuple(tuple(pair) for pair in config["adapter_pages"])
            return cls(
                sut=data["sut"],
                scenario=data["scenario"],
                config=EngineConfig(**config),
                actions=tuple(Action.from_json(a) for a in data["actions"]),
                seed=data.get("seed"),
                profile=data.get("profile", ""),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ReportError(f"the report is missing or has a malformed field: {err}") from err


def trace_hash(case: Case) -> str:
    """A short hash of the shrunk trace (the world and the actions), stable across runs.

    Report names carry it, so a second finding never overwrites the first, and a
    baseline of known findings matches on it.
    """
    trace = {"config": _plain(case.config), "actions": [a.to_json() for a in case.actions]}
    digest = hashlib.sha256(json.dumps(trace, sort_keys=True).encode("utf-8")).hexdigest()
    return digest[:8]


def replay(case: Case, sut: str | None = None) -> Outcome:
    """Replay a case against its SUT (or another one), as the machine ran it.

    Every iteration is checked; if all hold, the world is drained (invariant 12).
    """
    return checked_replay(case.config, case.actions, sut_module.load(sut or case.sut))


# ---- JSON ----


def _plain(value: Any) -> Any:
    """A snapshot part as JSON-ready data."""
    if attrs.has(type(value)):
        plain = {f.name: _plain(getattr(value, f.name)) for f in attrs.fields(type(value))}
        if isinstance(value, Call):  # its (key, value) pairs read better as objects
            plain |= {"args": dict(plain["args"]), "detail": dict(plain["detail"])}
        return plain
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, frozenset | set):
        return sorted(_plain(v) for v in value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def to_json(case: Case, outcome: Outcome) -> dict[str, Any]:
    """The report as a JSON object; ``Case.from_json`` reads it back."""
    return {
        "schema_version": SCHEMA_VERSION,
        "sut": case.sut,
        "scenario": case.scenario,
        "seed": case.seed,
        "profile": case.profile,
        "config": _plain(case.config),
        "actions": [a.to_json() for a in case.actions],
        "during": outcome.during,
        "violation": _plain(outcome.violations[0]) if outcome.violations else None,
        "violations": _plain(outcome.violations),
        "steps": [
            {
                "action_index": e.action_index,
                "drain": e.action_index is None,
                "snapshot": _plain(e.snapshot),
            }
            for e in outcome.entries
        ],
    }


def load_json(path: Path) -> Case:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ReportError(f"cannot read report {str(path)!r}: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise ReportError(f"{str(path)!r} is not UTF-8 text; give a peftlife report") from err
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ReportError(f"{str(path)!r} is not JSON ({err}); give a peftlife report") from err
    return Case.from_json(data)
