"""The step summary: Markdown appended to ``--summary`` or ``$GITHUB_STEP_SUMMARY``.

One section per run: a title with the verdict and the profile, a table (a row
per scenario searched, per gate row, per defect, per commit probed), then its
warnings and notes, and a finding's Markdown report when there is one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from peftlife.doors.outputs.records import (
    BisectSummary,
    CampaignSummary,
    DiffSummary,
    ExplorationSummary,
    RunSummary,
)
from peftlife.doors.outputs.unchecked import note
from peftlife.search import gate
from peftlife.world.words import count


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


def append(text: str, path: str | None) -> Path | None:
    """Append to ``path``, else to ``$GITHUB_STEP_SUMMARY`` when set; the file written."""
    target = path or os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    file = Path(target)
    file.parent.mkdir(parents=True, exist_ok=True)
    with file.open("a", encoding="utf-8") as out:
        out.write(text.rstrip() + "\n\n")
    return file


def _bullets(kind: str, lines: Sequence[str]) -> str:
    return "\n" + "\n".join(f"- {kind}: {line}" for line in lines) + "\n" if lines else ""


def _details(details: str) -> str:
    return f"\n{details.rstrip()}\n" if details else ""


def run(summary: RunSummary, details: str = "") -> str:
    """A check's runs; ``details`` (a finding's report) is appended."""
    verdict = "passed" if summary.ok else "FAILED"
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
        for r in summary.runs
    ]
    title = f"peftlife {summary.command}: {verdict} ({summary.profile} profile)"
    text = table_markdown(title, header, rows) + _bullets("warning", summary.warnings())
    return text + _bullets("note", summary.notes(told=bool(details))) + _details(details)


def gate_table(table: gate.Gate, profile: str) -> str:
    """The mutant gate: its table and its verdict."""
    title = f"peftlife mutants: {'passed' if table.ok else 'FAILED'} ({profile} profile)"
    cells = [row.cells() for row in table.rows]
    markdown = table_markdown(title, gate.HEADER, cells) + f"\n{table.verdict}\n"
    if said := note(table.searched):
        markdown += f"\n- note: {said}\n"
    return markdown


def campaign(s: CampaignSummary) -> str:
    """A row per defect, then the campaign's totals."""
    title = f"peftlife fuzz: {'passed' if s.ok else 'FAILED'} ({s.profile} profile)"
    where = ", ".join(f"`{searched.name}`" for searched in s.scenarios)
    line = (
        f"`{s.sut}` in {where}: {count(s.examples, 'example')} in {s.seconds:.1f} s on "
        f"{count(s.workers, 'worker')}, base seed {s.seed}"
        + (" (interrupted)" if s.interrupted else "")
    )
    if s.defects:
        header = ["invariant", "scheduler's calls", "found", "workers", "actions"]
        header += ["scenario", "first seen", "report"]
        rows = [
            [
                f"`{d.invariant}`",
                ", ".join(d.move) or "none",
                str(d.count),
                ",".join(map(str, d.workers)),
                str(d.actions) + ("" if d.shrunk else " (unshrunk)"),
                f"`{d.scenario}`",
                "-" if d.first is None else d.first.describe(),
                f"`{d.report}`" if d.report else f"not written ({d.unwritten})",
            ]
            for d in s.defects
        ]
        text = table_markdown(title, header, rows) + f"\n{line}: {s.tally}\n"
    else:
        tally = "a worker crashed" if s.crashes else "no finding, every example held"
        text = f"### {title}\n\n{line}: {tally}\n"
    bullets = [f"- crash: {c}" for c in s.crashes]
    bullets += [f"- warning: {w}" for w in s.warnings]
    bullets += [f"- note: {n}" for n in s.notes()]
    return text + ("\n" + "\n".join(bullets) + "\n" if bullets else "")


def exploration(s: ExplorationSummary, details: str = "") -> str:
    """The states explored and the verdict; ``details`` (a report) is appended."""
    title = f"peftlife explore: {'passed' if s.ok else 'FAILED'}"
    found = "" if s.finding is None else f" (`{s.finding.invariant}`)"
    text = (
        f"### {title}\n\n`{s.sut}` in `{s.scenario}`: {count(s.states, 'state')} in "
        f"{s.seconds:.1f} s, {s.verdict}{found}\n"
    )
    text += _bullets("warning", s.warnings())
    # A counterexample's report, when it follows, says it in its world line.
    if not (details and s.finding):
        text += _bullets("note", s.notes)
    return text + _details(details)


def diff(s: DiffSummary, details: str = "") -> str:
    """Two schedulers that behaved the same, or the divergence's report (``details``)."""
    if s.failure is not None:
        return details
    return (
        f"### peftlife diff: `{s.a}` and `{s.b}` behave the same\n\n"
        f"{count(s.examples, 'example')} in {s.where} ({s.profile} profile)\n"
    )


def bisection(s: BisectSummary, details: str = "") -> str:
    """A row per commit probed, the first bad one named; its finding's report appended."""
    title = f"peftlife bisect: {s.verdict} ({s.profile} profile)"
    rows = [
        [f"`{p.commit[:12]}`", p.subject, p.verdict, f"`{p.invariant}`" if p.invariant else "-"]
        for p in s.probes
    ]
    text = table_markdown(title, ["commit", "subject", "verdict", "invariant"], rows)
    text += f"\n{s.test} on each commit of `{s.repo}` after `{s.good}` up to `{s.bad}`\n"
    if s.first_bad is not None:
        clean = {True: "replays clean", False: "FAILS too", None: "was not replayed"}
        text += (
            f"\nfirst bad commit: `{s.first_bad[0]}` {s.first_bad[1]}; the last good commit "
            f"{clean[s.last_good_clean]} with its case\n"
        )
    else:
        text += _bullets("candidate", [f"`{sha[:12]}` {subject}" for sha, subject in s.candidates])
    return text + _details(details)
