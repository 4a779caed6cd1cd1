"""summary.json: what a run was, in the report directory, for CI and for ``--baseline``.

Every kind of run's JSON has ``command``, ``ok`` and a ``findings`` list of
``{"invariant", "trace", "report", "known"}``: a valid baseline file. A
random run says its ``seed`` and the ``rerun`` command that searches the same
examples again; a derandomized one says ``"derandomized": true`` instead.
Notes (invariant 14 not checked) appear only when there is something to note.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from peftlife import reports
from peftlife.doors.outputs.records import (
    BisectSummary,
    CampaignSummary,
    Defect,
    ExplorationSummary,
    Replay,
    RunSummary,
)

Summary = RunSummary | CampaignSummary | ExplorationSummary | BisectSummary


def of(summary: Summary) -> dict[str, Any]:
    """The JSON object of one run's summary."""
    if isinstance(summary, RunSummary):
        return _run(summary)
    if isinstance(summary, CampaignSummary):
        return _campaign(summary)
    if isinstance(summary, ExplorationSummary):
        return _exploration(summary)
    return _bisect(summary)


def write(summary: Summary, path: Path) -> None:
    reports.report_folder(path.parent)
    path.write_text(json.dumps(of(summary), indent=1) + "\n", "utf-8")


def replay_fields(replay: Replay | None) -> dict[str, Any]:
    """``seed`` and ``rerun`` of a random run; ``derandomized`` of one that was."""
    if replay is None:
        return {}
    if replay.derandomized:
        return {"seed": None, "derandomized": True, "rerun": replay.command}
    return {"seed": replay.seed, "rerun": replay.command}


def _notes(notes: list[str] | tuple[str, ...]) -> dict[str, Any]:
    # Only when there is something to note: a simple-loop run's summary is as before.
    return {"notes": list(notes)} if notes else {}


def _run(s: RunSummary) -> dict[str, Any]:
    return {
        "command": s.command,
        "profile": s.profile,
        "ok": s.ok,
        **replay_fields(s.replay),
        "runs": [
            {
                "sut": r.sut,
                "scenario": r.scenario,
                "verdict": r.verdict,
                "examples": r.examples,
                "budget": r.budget,
                "iterations": r.iterations,
                "seconds": r.seconds,
                "paths_reached": {p: r.coverage[p] for p in r.paths},
                "rules": {k: v for k, v in r.coverage.items() if k.startswith("rule: ")},
                "finding": None if r.finding is None else attrs.asdict(r.finding),
            }
            for r in s.runs
        ],
        "warnings": s.warnings(),
        "findings": [attrs.asdict(r.finding) for r in s.runs if r.finding is not None],
        **_notes(s.notes()),
    }


def _defect(d: Defect) -> dict[str, Any]:
    return {
        "invariant": d.invariant,
        "move": list(d.move),
        "found": d.count,
        "workers": list(d.workers),
        "scenario": d.scenario,
        "actions": d.actions,
        "shrunk": d.shrunk,
        "trace": d.trace,
        "report": d.report or None,
        "reports": dict(d.reports),
        **({"first": attrs.asdict(d.first)} if d.first is not None else {}),
        **({"not_written": d.unwritten} if d.unwritten else {}),
        **replay_fields(d.replay),
    }


def _campaign(s: CampaignSummary) -> dict[str, Any]:
    return {
        "command": "fuzz",
        "profile": s.profile,
        "ok": s.ok,
        "sut": s.sut,
        "scenarios": [searched.name for searched in s.scenarios],
        "workers": s.workers,
        "seed": s.seed,
        **({"rerun": s.rerun} if s.rerun else {}),
        "examples": s.examples,
        "seconds": s.seconds,
        "interrupted": s.interrupted,
        "found": s.found,
        "defects": [_defect(defect) for defect in s.defects],
        "crashes": list(s.crashes),
        "warnings": list(s.warnings),
        "findings": [attrs.asdict(finding) for finding in s.findings()],
        **_notes(s.notes()),
    }


def _exploration(s: ExplorationSummary) -> dict[str, Any]:
    finding = None if s.finding is None else attrs.asdict(s.finding)
    return {
        "command": "explore",
        "ok": s.ok,
        "sut": s.sut,
        "scenario": s.scenario,
        "verdict": "held" if s.ok else "counterexample",
        "states": s.states,
        "depth": s.depth,
        "max_depth": s.max_depth,
        "max_states": s.max_states,
        "complete": s.complete,
        "seconds": s.seconds,
        "finding": finding,
        "warnings": s.warnings(),
        "findings": [] if finding is None else [finding],
        **_notes(s.notes),
    }


def _bisect(s: BisectSummary) -> dict[str, Any]:
    finding = None if s.finding is None else attrs.asdict(s.finding)
    first = None if s.first_bad is None else {"sha": s.first_bad[0], "subject": s.first_bad[1]}
    return {
        "command": "bisect",
        "profile": s.profile,
        "ok": s.ok,
        **replay_fields(s.replay),
        "repo": s.repo,
        "good": s.good,
        "bad": s.bad,
        "test": s.test,
        "first_bad": first,
        "candidates": [{"sha": sha, "subject": subject} for sha, subject in s.candidates],
        "last_good_replays_clean": s.last_good_clean,
        "probes": [attrs.asdict(p) for p in s.probes],
        "seconds": s.seconds,
        "finding": finding,
        "findings": [] if finding is None else [finding],
    }
