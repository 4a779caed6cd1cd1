"""The Markdown report, for a CI summary or a pull-request comment."""

from __future__ import annotations

from peftlife.reports.finding.case import Case
from peftlife.reports.finding.story import (
    Iteration,
    Row,
    length_label,
    story,
)
from peftlife.reports.format import seed_said, world_lines
from peftlife.search.trace import Outcome
from peftlife.world.words import count

# ---- Markdown ----


def _phrases(view: Iteration) -> list[str]:
    """An iteration as short phrases: what changed, and violation subjects in full."""
    phrases = [f"output {view.output}"]
    if view.in_flight is not None:
        phrases.append(view.in_flight)
    phrases += [p for row in view.requests if (p := _row_phrase(row))]
    phrases += [text + _marked(mark) for text, mark in view.ended]
    phrases += [p for row in view.adapters if (p := _row_phrase(row))]
    phrases += [f"{what} calls {calls}" for what, calls in view.calls]
    phrases += [f"engine: {message}" for message in view.errors]
    return phrases


def _row_phrase(row: Row) -> str:
    """The fields that changed, or all of them for a new row or a violation subject."""
    full = row.new or row.mark is not None
    cells = [f"{key} {value}" for key, value, changed in row.cells if changed or full]
    if not cells:
        return ""
    return f"{row.name}: " + ", ".join(cells) + _marked(row.mark)


def _marked(mark: str | None) -> str:
    """What follows a violation's subject: the invariant that names it."""
    return f" ← **{mark}**" if mark else ""


def render_markdown(case: Case, outcome: Outcome, files: dict[str, str] | None = None) -> str:
    """A short Markdown story for a CI summary or a pull-request comment."""
    lines = []
    if outcome.violations:
        lines.append(f"### peftlife: `{outcome.violations[0].invariant}` violated")
    else:
        lines.append("### peftlife replay: every invariant held")
    seed = f"`{case.seed}`" if case.seed is not None else seed_said(None, case.profile)
    lines += [
        "",
        f"- **SUT** `{case.sut}` · **scenario** `{case.scenario}` · **seed** {seed}"
        + (f" · **profile** `{case.profile}`" if case.profile else ""),
        *(f"- {line}" for line in world_lines(case.config)),
        f"- **{length_label(case)}** {count(len(case.actions), 'action')}, "
        f"{count(len(outcome.entries), 'iteration')}"
        + (f" ({case.shrink_note})" if case.shrink_note else ""),
        "",
        "| # | action | what happened |",
        "|---:|---|---|",
    ]
    for item in story(case, outcome):
        if isinstance(item, str):
            lines.append(f"| | … | {item} |")
            continue
        view = item.view()
        if item.request_id is not None:
            happened = f"request {item.request_id} arrives"
        elif view is not None:
            assert item.entry is not None
            happened = f"**iteration {item.entry.snapshot.iteration}**: " + "; ".join(
                _phrases(view)
            )
        else:
            happened = "takes effect at the next iteration"
        number = "" if item.number is None else str(item.number)
        lines.append(f"| {number} | `{item.text}` | {happened.replace('|', '/')} |")
    lines.append("")
    for v in outcome.violations:
        lines += [
            f"**Violation** `{v.invariant}` at iteration {v.iteration}: {v.subject}",
            f"- expected: {v.expected}",
            f"- found: {v.found}",
            "",
        ]
    if files:
        lines.append(" · ".join(f"{what}: `{name}`" for what, name in files.items()))
    return "\n".join(lines).rstrip() + "\n"
