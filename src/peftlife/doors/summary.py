"""What one run of the command did, for CI: a JSON summary and a Markdown one.

Every run has a summary, a passing one included: the examples searched out of
the budget, the executor iterations, the scheduler paths reached (the labels
the coverage test asserts) and a warning for each path never reached, plus
each finding with its invariant, trace hash and report. The JSON's
``findings`` list is also a valid ``--baseline`` file.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from peftlife.search.machine import COVERAGE_LABELS, unreached


@attrs.frozen
class Finding:
    """A counterexample: its invariant, the hash of its shrunk trace, its report."""

    invariant: str
    trace: str
    report: str | None = None
    # In the baseline: known and accepted, so it does not fail the run.
    known: bool = False


@attrs.frozen
class ScenarioRun:
    """One search of one SUT in one scenario."""

    sut: str
    scenario: str
    examples: int
    budget: int
    iterations: int
    seconds: float
    coverage: dict[str, int]
    finding: Finding | None = None

    @classmethod
    def of(cls, result: Any, budget: int, finding: Finding | None = None) -> ScenarioRun:
        """From a ``SearchResult``."""
        return cls(
            result.sut,
            result.scenario,
            result.examples,
            budget,
            result.iterations,
            round(result.seconds, 2),
            dict(Counter(result.coverage)),
            finding,
        )

    @property
    def paths(self) -> list[str]:
        """The scheduler paths reached, in the order the coverage test lists them."""
        return [label for label in COVERAGE_LABELS if self.coverage.get(label)]

    @property
    def never_reached(self) -> list[str]:
        return list(unreached(self.coverage))

    @property
    def verdict(self) -> str:
        if self.finding is None:
            return "held"
        return "known finding" if self.finding.known else "counterexample"


@attrs.frozen
class RunSummary:
    """A whole command's runs, under one profile."""

    command: str
    profile: str
    runs: tuple[ScenarioRun, ...]

    @property
    def ok(self) -> bool:
        """No finding outside the baseline."""
        return all(r.finding is None or r.finding.known for r in self.runs)

    def warnings(self) -> list[str]:
        """A path a search that held never reached is one it could not have tested."""
        return [
            f"{run.sut} in {run.scenario}: path '{label}' never reached"
            for run in self.runs
            if run.finding is None
            for label in run.never_reached
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "profile": self.profile,
            "ok": self.ok,
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
                for r in self.runs
            ],
            "warnings": self.warnings(),
            "findings": [attrs.asdict(r.finding) for r in self.runs if r.finding is not None],
        }

    def markdown(self, details: str = "") -> str:
        """The Markdown for a CI step summary; ``details`` (a report) is appended."""
        verdict = "passed" if self.ok else "FAILED"
        header = ["scenario", "SUT", "verdict", "examples", "iterations", "paths reached"]
        rows = [
            [
                f"`{r.scenario}`",
                f"`{r.sut}`",
                r.verdict + (f" (`{r.finding.invariant}`)" if r.finding else ""),
                f"{r.examples}/{r.budget}",
                str(r.iterations),
                ", ".join(r.paths) or "none",
            ]
            for r in self.runs
        ]
        title = f"peftlife {self.command}: {verdict} ({self.profile} profile)"
        text = table_markdown(title, header, rows)
        if warnings := self.warnings():
            text += "\n" + "\n".join(f"- warning: {w}" for w in warnings) + "\n"
        return text + (f"\n{details.rstrip()}\n" if details else "")


def table_markdown(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A titled Markdown table.

    >>> print(table_markdown("t", ["a", "b"], [["1", "x|y"]]), end="")
    ### t
    <BLANKLINE>
    | a | b |
    |---|---|
    | 1 | x/y |
    """
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |"]
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def append_markdown(text: str, path: str | None) -> Path | None:
    """Append to ``path``, else to ``$GITHUB_STEP_SUMMARY`` when set; the file written."""
    target = path or os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    file = Path(target)
    file.parent.mkdir(parents=True, exist_ok=True)
    with file.open("a", encoding="utf-8") as out:
        out.write(text.rstrip() + "\n\n")
    return file


def write_json(summary: RunSummary, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary.to_json(), indent=1) + "\n", "utf-8")
