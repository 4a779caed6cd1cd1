"""A divergence in Markdown, for a CI summary or a pull-request comment."""

from __future__ import annotations

from peftlife.reports.divergence.case import DiffCase
from peftlife.reports.divergence.story import (
    agreed,
    cells_text,
    side_rows,
    story,
    verdict_text,
    verdicts,
)
from peftlife.reports.format import world_lines
from peftlife.search.diff import PairOutcome
from peftlife.world.words import count


def _md(text: str) -> str:
    return text.replace("|", "/")


def render_markdown(
    dcase: DiffCase, outcome: PairOutcome, files: dict[str, str] | None = None
) -> str:
    """A short Markdown account for a CI summary or a pull-request comment."""
    case = dcase.case
    d = outcome.divergence
    seed = "derandomized" if case.seed is None else f"`{case.seed}`"
    title = (
        f"### peftlife diff: `{dcase.a}` and `{dcase.b}` diverge at iteration {d.iteration}"
        if d is not None
        else f"### peftlife diff: `{dcase.a}` and `{dcase.b}` behave the same"
    )
    lines = [
        title,
        "",
        f"- **A** `{dcase.a}` · **B** `{dcase.b}` · **scenario** `{case.scenario}` · "
        f"**seed** {seed}" + (f" · **profile** `{case.profile}`" if case.profile else ""),
        *(f"- {line}" for line in world_lines(case.config)),
        f"- **shrunk to** {count(len(case.actions), 'action')}, "
        f"{count(len(outcome.iterations), 'iteration')}"
        + (f" ({case.shrink_note})" if case.shrink_note else ""),
        f"- **compared** {dcase.compared}",
        "",
        "| # | action | what happened |",
        "|---:|---|---|",
    ]
    for line in story(dcase, outcome):
        p = line.paired
        if line.request_id is not None:
            happened = f"request {line.request_id} arrives"
        elif p is not None and p.diverges:
            happened = f"**iteration {p.iteration}: A and B differ** in {cells_text(p)}"
        elif p is not None:
            parts = [f"{x.what} {x.text}" for x in agreed(p) if x.request_id is None]
            happened = f"iteration {p.iteration}, the same on both sides: " + "; ".join(parts)
        elif line.number is None:
            happened = line.text
        else:
            happened = "takes effect at the next iteration"
        number = "" if line.number is None else str(line.number)
        text = "…" if line.number is None and p is None else f"`{line.text}`"
        lines.append(f"| {number} | {text} | {_md(happened)} |")
    if d is not None:
        lines += [
            "",
            f"**Iteration {d.iteration}, side by side** (≠ marks what differs)",
            "",
            f"| | A `{_md(dcase.a)}` | B `{_md(dcase.b)}` |",
            "|---|---|---|",
        ]
        for row in side_rows(d):
            shown = f"**{row.marked}**" if row.differs else row.label.strip()
            lines.append(f"| {_md(shown)} | {_md(row.a)} | {_md(row.b)} |")
    lines += ["", "**Invariants** (a divergence is no verdict on either side):", ""]
    for side, spec, violation in verdicts(dcase, outcome):
        lines.append(f"- {side} `{spec}`: {_md(verdict_text(outcome, violation))}")
    lines.append("")
    if files:
        lines.append(" · ".join(f"{what}: `{file}`" for what, file in files.items()))
    return "\n".join(lines).rstrip() + "\n"
