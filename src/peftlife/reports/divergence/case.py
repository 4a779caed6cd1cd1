"""A divergence as a case: what a replay on both schedulers needs, its replay, and its JSON.

A ``DiffCase`` is a finding's ``Case`` (A's SUT, the scenario, the world and the
actions) with the other scheduler and what the comparison ignored; ``replay``
runs it on both (``peftlife.search.diff.replay``). ``to_json`` and
``from_json`` are the diff report file's format, with a ``diff_schema_version``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs

from peftlife import sut as sut_module
from peftlife.reports.finding.case import CASE_KEYS, Case, ReportError, trace_hash
from peftlife.reports.finding.case import SCHEMA_VERSION as CASE_VERSION
from peftlife.reports.format import plain
from peftlife.search import diff
from peftlife.search.diff import PairOutcome

# Version 2: cells are records ({"kind", "name", "request_id"}), not "request 2 owns",
# and each side's violations have a finding report's shape. Version 1 still loads:
# a replay reads only the case, whose fields are the same.
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)


@attrs.frozen
class DiffCase:
    """A divergence reduced to what a replay needs: A's case, B, and what was ignored."""

    case: Case
    other: str
    ignore: tuple[str, ...] = ()

    @property
    def a(self) -> str:
        return self.case.sut

    @property
    def b(self) -> str:
        return self.other

    @property
    def compared(self) -> str:
        """What the comparison looked at, in words."""
        order = "order" not in self.ignore
        parts = [
            "the output lists (context and generation in order)" if order else "the output lists",
            "each request's state, residency and ownership",
        ]
        if "calls" not in self.ignore:
            parts.insert(1, "the scheduler's calls" + (" in order" if order else ""))
        ignored = f"; ignoring {' and '.join(self.ignore)}" if self.ignore else ""
        return ", ".join(parts) + ignored


def replay(dcase: DiffCase) -> PairOutcome:
    """Run the case on both schedulers, stopping at the first divergence."""
    case = dcase.case
    return diff.replay(
        case.config,
        case.actions,
        sut_module.load(dcase.a),
        sut_module.load(dcase.b),
        dcase.ignore,
    )


def name(dcase: DiffCase) -> str:
    """A file-system friendly name, unique per pair of schedulers and shrunk trace."""
    ignoring = "".join(f"_ignore_{i}" for i in dcase.ignore)
    raw = f"diff_{dcase.a}_vs_{dcase.b}{ignoring}_{dcase.case.scenario}_{trace_hash(dcase.case)}"
    return re.sub(r"[^0-9a-zA-Z]+", "_", raw).strip("_").lower()


# ---- JSON ----


def to_json(dcase: DiffCase, outcome: PairOutcome) -> dict[str, Any]:
    """The divergence as a JSON object: the case, then every iteration of both sides."""
    case = dcase.case
    d = outcome.divergence
    return {
        "diff_schema_version": SCHEMA_VERSION,
        "sut_a": dcase.a,
        "sut_b": dcase.b,
        "ignore": list(dcase.ignore),
        "scenario": case.scenario,
        **({"scenario_path": case.scenario_path} if case.scenario_path else {}),
        "seed": case.seed,
        "profile": case.profile,
        "examples": case.examples,
        "shrink_note": case.shrink_note,
        "config": plain(case.config),
        "actions": [a.to_json() for a in case.actions],
        "divergence": None
        if d is None
        else {"iteration": d.iteration, "action_index": d.action_index, "cells": plain(d.cells)},
        "invariants": {"a": plain(outcome.violations_a), "b": plain(outcome.violations_b)},
        "iterations": [
            {
                "iteration": p.iteration,
                "action_index": p.action_index,
                "drain": p.action_index is None,
                "cells": plain(p.cells),
                "a": plain(p.a),
                "b": plain(p.b),
            }
            for p in outcome.iterations
        ],
    }


def from_json(data: Any) -> DiffCase:
    """Read a divergence back (its case validated as a report's is); ``ReportError`` if bad."""
    if not isinstance(data, dict) or data.get("diff_schema_version") not in READABLE_VERSIONS:
        raise ReportError(
            f"not a peftlife diff report of version {' or '.join(map(str, READABLE_VERSIONS))}: "
            "regenerate it with "
            "this version of peftlife diff"
        )
    case = Case.from_json(
        {"schema_version": CASE_VERSION, "sut": data.get("sut_a")}
        | {k: data[k] for k in CASE_KEYS if k in data}
    )
    other, ignore = data.get("sut_b"), data.get("ignore", [])
    if not isinstance(other, str) or not other:
        raise ReportError(f"sut_b must be a non-empty string, not {other!r}")
    if not isinstance(ignore, list) or not set(ignore) <= set(diff.IGNORABLE):
        raise ReportError(f"ignore must list some of {', '.join(diff.IGNORABLE)}, not {ignore!r}")
    return DiffCase(case, other, tuple(ignore))


def load_json(path: Path) -> DiffCase:
    """Read a diff report's case back; ``ReportError`` names what is wrong."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReportError(f"cannot read diff report {str(path)!r}: {err}") from err
    return from_json(data)
