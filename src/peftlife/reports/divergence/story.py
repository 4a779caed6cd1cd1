"""A divergence of two schedulers, side by side: terminal, Markdown, JSON and HTML.

A ``DiffCase`` is a ``Case`` (A's SUT, the scenario, the world and the actions)
with the other scheduler and what the comparison ignored; ``replay`` runs it on
both (``peftlife.search.diff.replay``). Every rendering tells the same story:
the actions in order, each iteration the two sides agreed on once, and the
diverging iteration side by side with the cells that differ named. Below it
stands what the invariants said of each side: a divergence is no verdict.
"""

from __future__ import annotations

import html
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from peftlife import sut as sut_module
from peftlife.checker.invariants import Violation
from peftlife.reports.finding.case import SCHEMA_VERSION as CASE_VERSION
from peftlife.reports.finding.case import Case, ReportError, trace_hash
from peftlife.reports.folder import report_folder
from peftlife.reports.format import world_lines
from peftlife.search import diff
from peftlife.search.diff import Observation, Paired, PairOutcome, RequestRow
from peftlife.world.fields import is_quiet
from peftlife.world.words import count

SCHEMA_VERSION = 1
# Drain iterations shown before the divergence; earlier ones are one summary line.
DRAIN_SHOWN = 3


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


# ---- the story every rendering tells ----


@attrs.frozen
class Line:
    """One line of the story: an action (numbered), a drain iteration, or a summary."""

    text: str
    number: int | None = None
    request_id: int | None = None
    paired: Paired | None = None


def story(dcase: DiffCase, outcome: PairOutcome) -> list[Line]:
    """The actions with the iterations they ran, then the drain up to the divergence."""
    by_action = {p.action_index: p for p in outcome.iterations if p.action_index is not None}
    lines: list[Line] = []
    submitted = 0
    last = outcome.iterations[-1] if outcome.iterations else None
    for index, action in enumerate(dcase.case.actions):
        submitted += action.kind == "submit"
        rid = submitted if action.kind == "submit" else None
        paired = by_action.get(index)
        lines.append(Line(action.describe(), index + 1, rid, paired))
        if paired is not None and paired is last and paired.diverges:
            return lines
    drained = [p for p in outcome.iterations if p.action_index is None]
    shown_from = len(drained) - DRAIN_SHOWN if outcome.divergence is not None else len(drained)
    if shown_from > 0:
        lines.append(Line(f"drain: {count(shown_from, 'iteration')} the same on both sides"))
    for number, paired in enumerate(drained, start=1):
        if number > shown_from:
            # Numbered without a total: the story stops at the divergence, not at the drain's end.
            total = "" if outcome.divergence is not None else f"/{len(drained)}"
            lines.append(Line(f"drain {number}{total}", paired=paired))
    return lines


def _request_text(row: RequestRow, fields: tuple[str, ...] = diff.REQUEST_FIELDS) -> str:
    adapter = "" if row.adapter is None else f"lora {row.adapter} "
    shown = [
        f"in {row.listed}" if f == "listed" else f"{f} {row.field(f)}"
        for f in fields
        if f != "calls" and row.field(f) != "-"
    ]
    return adapter + " ".join(shown)


def _headline(dcase: DiffCase, outcome: PairOutcome) -> str:
    d = outcome.divergence
    if d is None:
        return f"peftlife diff: {dcase.a} and {dcase.b} behave the same on this trace"
    return f"peftlife divergence at iteration {d.iteration}{_where(d)}: {_cells(d)}"


def _where(d: Paired) -> str:
    return " (in the drain)" if d.action_index is None else f" (action {d.action_index + 1})"


def _cells(d: Paired) -> str:
    """The diverging cells, a request's fields grouped: ``calls, request 2 (owns, calls)``."""
    plain: list[str] = []
    by_request: dict[str, list[str]] = {}
    for cell in d.cells:
        if found := re.match(r"(request \d+) (\w+)$", cell):
            by_request.setdefault(found[1], []).append(found[2])
        else:
            plain.append(cell.replace("_", " "))
    return ", ".join([*plain, *(f"{r} ({', '.join(f)})" for r, f in by_request.items())])


def _request_marks(d: Paired) -> dict[int, list[str]]:
    marks: dict[int, list[str]] = {}
    for cell in d.cells:
        if found := re.match(r"request (\d+) (\w+)$", cell):
            marks.setdefault(int(found[1]), []).append(found[2])
    return marks


def _verdicts(dcase: DiffCase, outcome: PairOutcome) -> list[tuple[str, str, Violation | None]]:
    """Per side: its label, its SUT and its first broken invariant (None: all held)."""
    return [
        ("A", dcase.a, outcome.violations_a[0] if outcome.violations_a else None),
        ("B", dcase.b, outcome.violations_b[0] if outcome.violations_b else None),
    ]


def _verdict_text(outcome: PairOutcome, violation: Violation | None) -> str:
    if violation is not None:
        return f"breaks {violation}"
    last = outcome.iterations[-1].iteration if outcome.iterations else 0
    return f"every invariant held up to iteration {last}"


def _side_rows(d: Paired) -> list[tuple[str, str, str, bool]]:
    """(label, A's text, B's text, differs) for the side-by-side view of one iteration."""
    a, b = d.a, d.b
    cells = set(d.cells)

    def text(obs: Observation | None, get: Callable[[Observation], str]) -> str:
        return "no iteration (its drain had ended)" if obs is None else get(obs)

    rows = [
        (
            "output",
            text(a, lambda o: o.output),
            text(b, lambda o: o.output),
            bool(cells & {"output", "iteration", *diff.LISTS}),
        ),
        (
            "calls",
            text(a, lambda o: "; ".join(o.call_texts) or "none"),
            text(b, lambda o: "; ".join(o.call_texts) or "none"),
            "calls" in cells,
        ),
    ]
    for key in ("writes", "errors"):
        values = ["; ".join(getattr(o, key)) or "none" if o is not None else "-" for o in (a, b)]
        if key in cells or values != ["none", "none"]:
            rows.append((key, values[0], values[1], key in cells))
    flights = [o.in_flight if o is not None else "-" for o in (a, b)]
    if any(f not in ("", "-") for f in flights):
        rows.append(("in flight", flights[0] or "-", flights[1] or "-", False))
    marks = _request_marks(d)
    ids = sorted({r.request_id for o in (a, b) if o is not None for r in o.requests})
    for rid in ids:
        ra = a.request(rid) if a is not None else RequestRow(rid, None)
        rb = b.request(rid) if b is not None else RequestRow(rid, None)
        rows.append(
            (
                f"request {rid}",
                _request_text(ra) or "-",
                _request_text(rb) or "-",
                any(f != "calls" for f in marks.get(rid, [])),
            )
        )
        if ra.calls or rb.calls:
            rows.append(
                (
                    "  its calls",
                    ra.field("calls"),
                    rb.field("calls"),
                    "calls" in marks.get(rid, []),
                )
            )
    return rows


def _label(label: str, differs: bool, d: Paired) -> str:
    if not differs:
        return label
    fields = _request_marks(d).get(int(label.split()[1]), []) if label.startswith("request") else []
    shown = [f for f in fields if f != "calls"]
    return f"≠ {label}" + (f" ({', '.join(shown)})" if shown else "")


# ---- terminal ----


def render_terminal(dcase: DiffCase, outcome: PairOutcome, console: Console) -> None:
    """Print the divergence: the agreed iterations once, the diverging one side by side."""

    def say(text: str | Text, style: str = "") -> None:
        console.print(Text(text, style=style) if isinstance(text, str) else text, soft_wrap=True)

    case = dcase.case
    divergence = outcome.divergence
    say(_headline(dcase, outcome), "bold red" if divergence else "bold green")
    say(f"A {dcase.a}")
    say(f"B {dcase.b}")
    seed = "derandomized" if case.seed is None else str(case.seed)
    profile = f" ({case.profile} profile)" if case.profile else ""
    say(f"scenario {case.scenario} · seed {seed}{profile}")
    say(f"compared: {dcase.compared}", "dim")
    for world in world_lines(case.config):
        say(f"  {world}", "dim")
    if case.shrink_note:
        say(f"  note: {case.shrink_note}", "yellow")
    say("")
    for line in story(dcase, outcome):
        if line.number is None and line.paired is None:
            say(f"    … {line.text}", "dim")
            continue
        head = Text(f"{line.number:>3} {line.text}" if line.number else f"    {line.text}")
        head.stylize("bold")
        if line.request_id is not None:
            head.append(f"  → request {line.request_id}", style="cyan")
        p = line.paired
        if p is None:
            say(head)
            continue
        if p.diverges:
            head.append(f"  → iteration {p.iteration}: A and B differ", style="bold red")
            say(head)
            console.print(_side_table(p))
        else:
            head.append(f"  → iteration {p.iteration}, the same on both sides", style="cyan")
            say(head)
            _print_agreed(say, p)
    say("")
    if divergence is not None:
        say(f"≠ A and B diverge at iteration {divergence.iteration}: {_cells(divergence)}", "bold")
    say("invariants (a divergence is no verdict on either side):")
    for side, spec, violation in _verdicts(dcase, outcome):
        style = "red" if violation is not None else "green"
        say(f"  {side} {spec}: {_verdict_text(outcome, violation)}", style)


def _agreed(p: Paired) -> list[tuple[str, str]]:
    """An iteration both sides agreed on, as (what, text) pairs. What was left out
    of the comparison (the calls, an order) may still differ: both sides are then shown."""
    a, b = p.a, p.b
    assert a is not None and b is not None
    parts: list[tuple[str, str]] = []

    def both(what: str, get: Callable[[Observation], str]) -> None:
        ta, tb = get(a), get(b)
        if ta == tb:
            if ta:
                parts.append((what, ta))
        else:
            parts.extend([(f"{what} (A)", ta or "none"), (f"{what} (B)", tb or "none")])

    both("output", lambda o: o.output)
    both("in flight", lambda o: o.in_flight)
    parts.extend((f"request {row.request_id}", _request_text(row)) for row in a.requests)
    both("scheduler calls", lambda o: "; ".join(o.call_texts))
    both("writes", lambda o: "; ".join(o.writes))
    both("errors", lambda o: "; ".join(o.errors))
    return parts


def _print_agreed(say: Callable[..., None], p: Paired) -> None:
    for what, text in _agreed(p):
        say(f"      {what:<11} {text}" if what.startswith("request") else f"      {what}: {text}")


def _side_table(p: Paired) -> Table:
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, show_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("A", overflow="fold", ratio=1)
    table.add_column("B", overflow="fold", ratio=1)
    for label, a, b, differs in _side_rows(p):
        style = "bold red" if differs else ""
        table.add_row(Text(_label(label, differs, p), style=style), a, b)
    return table


def terminal_text(dcase: DiffCase, outcome: PairOutcome, width: int = 110) -> str:
    """The terminal rendering as plain text (what a log or a test sees)."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    render_terminal(dcase, outcome, console)
    return buffer.getvalue()


# ---- Markdown ----


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
            happened = f"**iteration {p.iteration}: A and B differ** in {_cells(p)}"
        elif p is not None:
            parts = [f"{what} {text}" for what, text in _agreed(p) if not what.startswith("req")]
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
        for label, a, b, differs in _side_rows(d):
            shown = f"**{_label(label, differs, d)}**" if differs else label.strip()
            lines.append(f"| {_md(shown)} | {_md(a)} | {_md(b)} |")
    lines += ["", "**Invariants** (a divergence is no verdict on either side):", ""]
    for side, spec, violation in _verdicts(dcase, outcome):
        lines.append(f"- {side} `{spec}`: {_md(_verdict_text(outcome, violation))}")
    lines.append("")
    if files:
        lines.append(" · ".join(f"{what}: `{file}`" for what, file in files.items()))
    return "\n".join(lines).rstrip() + "\n"


# ---- JSON ----


def _plain(value: Any) -> Any:
    if not attrs.has(type(value)):
        return value
    return attrs.asdict(value, filter=lambda field, v: not is_quiet(field, v))


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
        "seed": case.seed,
        "profile": case.profile,
        "examples": case.examples,
        "shrink_note": case.shrink_note,
        "config": _plain(case.config),
        "actions": [a.to_json() for a in case.actions],
        "divergence": None
        if d is None
        else {"iteration": d.iteration, "action_index": d.action_index, "cells": list(d.cells)},
        "invariants": {
            "a": [_plain(v) for v in outcome.violations_a],
            "b": [_plain(v) for v in outcome.violations_b],
        },
        "iterations": [
            {
                "iteration": p.iteration,
                "action_index": p.action_index,
                "drain": p.action_index is None,
                "cells": list(p.cells),
                "a": None if p.a is None else _plain(p.a),
                "b": None if p.b is None else _plain(p.b),
            }
            for p in outcome.iterations
        ],
    }


def from_json(data: Any) -> DiffCase:
    """Read a divergence back (its case validated as a report's is); ``ReportError`` if bad."""
    if not isinstance(data, dict) or data.get("diff_schema_version") != SCHEMA_VERSION:
        raise ReportError(
            f"not a peftlife diff report of version {SCHEMA_VERSION}: regenerate it with "
            "this version of peftlife diff"
        )
    keys = ("scenario", "seed", "profile", "config", "actions", "examples", "shrink_note")
    case = Case.from_json(
        {"schema_version": CASE_VERSION, "sut": data.get("sut_a")}
        | {k: data[k] for k in keys if k in data}
    )
    other, ignore = data.get("sut_b"), data.get("ignore", [])
    if not isinstance(other, str) or not other:
        raise ReportError(f"sut_b must be a non-empty string, not {other!r}")
    if not isinstance(ignore, list) or not set(ignore) <= set(diff.IGNORABLE):
        raise ReportError(f"ignore must list some of {', '.join(diff.IGNORABLE)}, not {ignore!r}")
    return DiffCase(case, other, tuple(ignore))


# ---- HTML ----


_CSS = """
* { box-sizing: border-box; }
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1b1b1b;
  margin: 1.2rem; background: #fff; }
h1 { font-size: 1.25rem; margin: 0 0 .4rem; } h2 { font-size: 1.05rem; margin: 1.2rem 0 .4rem; }
code, .mono, td { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; }
.verdict { color: #d55e00; } .verdict.same { color: #009e73; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .1rem 1rem;
  margin: .4rem 0; }
dl.facts dt { color: #666; } dl.facts dd { margin: 0; }
.world { margin: .3rem 0; padding: .3rem .6rem; border-left: 3px solid #c8c8c8; font-size: .85em; }
ol.actions { font-size: .9em; }
ol.actions .iter { color: #0072b2; } ol.actions .diverges { color: #d55e00; font-weight: 700; }
details { border: 1px solid #c8c8c8; border-radius: 4px; padding: .3rem .7rem; margin: .5rem 0; }
details.diverging { border: 2px solid #d55e00; }
summary { cursor: pointer; font-weight: 600; }
table.pair { border-collapse: collapse; font-size: .78rem; margin: .4rem 0; }
table.pair th, table.pair td { border: 1px solid #ddd; padding: .1rem .4rem; text-align: left;
  vertical-align: top; }
table.pair th { background: #f4f4f4; font-weight: 600; }
table.pair tr.side-a td { border-bottom-style: dashed; }
table.pair tr.side-b td { border-top-style: dashed; }
table.pair td.side { font-weight: 700; color: #666; text-align: center; }
table.pair td.diverging { outline: 3px solid #d55e00; outline-offset: -2px; background: #fff1e8;
  font-weight: 700; }
.sample { display: inline-block; width: 1.1rem; height: .9rem; vertical-align: middle;
  outline: 3px solid #d55e00; outline-offset: -2px; background: #fff1e8; }
.invariants li.broken { color: #d55e00; }
.note { color: #666; font-size: .85rem; }
"""

_COLUMNS = ("listed", "state", "prefill", "tokens", "target", "draft", "owns", "calls")


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _cell(text: str, cell: str, diverging: set[str]) -> str:
    marked = cell in diverging
    classes = ' class="diverging"' if marked else ""
    data = f' data-cell="{_e(cell)}"' + (' data-diverging="yes"' if marked else "")
    return f"<td{classes}{data}>{_e(text)}</td>"


def _pair_table(p: Paired) -> str:
    """An iteration as a table: iteration-wide rows, then two rows per request, A above B."""
    diverging = set(p.cells) if p.diverges else set()
    sides = (("A", p.a), ("B", p.b))
    head = "".join(f"<th>{c}</th>" for c in ("", "side", *_COLUMNS))
    rows = [f"<tr>{head}</tr>"]
    span = len(_COLUMNS)
    output_cells = {"output", "iteration", *diff.LISTS}
    wide: list[tuple[str, Callable[[Observation], str], set[str]]] = [
        ("output", lambda o: o.output, output_cells),
        ("calls", lambda o: "; ".join(o.call_texts) or "none", {"calls"}),
        ("writes", lambda o: "; ".join(o.writes) or "none", {"writes"}),
        ("errors", lambda o: "; ".join(o.errors) or "none", {"errors"}),
        ("in flight", lambda o: o.in_flight or "none", set()),
    ]
    for label, get, cells in wide:
        texts = [
            get(o) if o is not None else "no iteration (its drain had ended)" for _, o in sides
        ]
        optional = label in ("writes", "errors", "in flight")
        if optional and texts == ["none", "none"] and not cells & diverging:
            continue
        for (side, _), text in zip(sides, texts, strict=True):
            marked = bool(cells & diverging)
            first = f'<th rowspan="2">{label}</th>' if side == "A" else ""
            rows.append(
                f'<tr class="side-{side.lower()}" data-row="{label}" data-side="{side}">{first}'
                f'<td class="side">{side}</td>'
                + (
                    f'<td colspan="{span}" class="diverging" data-cell="{label}" '
                    f'data-diverging="yes">{_e(text)}</td>'
                    if marked
                    else f'<td colspan="{span}" data-cell="{label}">{_e(text)}</td>'
                )
                + "</tr>"
            )
    ids = sorted({r.request_id for _, o in sides if o is not None for r in o.requests})
    for rid in ids:
        pair = [o.request(rid) if o is not None else RequestRow(rid, None) for _, o in sides]
        task = next((r.adapter for r in pair if r.adapter is not None), None)
        adapter = "" if task is None else f" (adapter {task})"
        for (side, _), row in zip(sides, pair, strict=True):
            first = f'<th rowspan="2">request {rid}{_e(adapter)}</th>' if side == "A" else ""
            tds = "".join(_cell(row.field(c), f"request {rid} {c}", diverging) for c in _COLUMNS)
            rows.append(
                f'<tr class="side-{side.lower()}" data-row="request {rid}" data-side="{side}">'
                f'{first}<td class="side">{side}</td>{tds}</tr>'
            )
    return f'<table class="pair" data-iteration="{p.iteration}">' + "".join(rows) + "</table>"


def render_html(dcase: DiffCase, outcome: PairOutcome, files: dict[str, str] | None = None) -> str:
    """The divergence as one self-contained page: no script, nothing fetched."""
    case = dcase.case
    d = outcome.divergence
    files = files or {}
    seed = "derandomized" if case.seed is None else str(case.seed)
    verdict = (
        f'<p class="verdict">A and B diverge at iteration {d.iteration}{_e(_where(d))}: '
        f"{_e(_cells(d))}</p>"
        if d is not None
        else '<p class="verdict same">A and B behave the same on this trace</p>'
    )
    facts = [
        ("A", f"<code>{_e(dcase.a)}</code>"),
        ("B", f"<code>{_e(dcase.b)}</code>"),
        ("scenario", _e(case.scenario)),
        ("seed", _e(seed) + (f" ({_e(case.profile)} profile)" if case.profile else "")),
        ("compared", _e(dcase.compared)),
        ("shrunk to", _e(count(len(case.actions), "action"))),
        *((what, f"<code>{_e(file)}</code>") for what, file in files.items()),
    ]
    if case.shrink_note:
        facts.append(("note", _e(case.shrink_note)))
    invariants = "".join(
        f'<li class="{"broken" if v is not None else "held"}" data-side="{side}">'
        f"<b>{side}</b> <code>{_e(spec)}</code>: {_e(_verdict_text(outcome, v))}</li>"
        for side, spec, v in _verdicts(dcase, outcome)
    )
    actions = []
    sections = []
    for line in story(dcase, outcome):
        p = line.paired
        if line.number is not None:
            tail = ""
            if line.request_id is not None:
                tail = f" → request {line.request_id}"
            elif p is not None:
                css = "diverges" if p.diverges else "iter"
                word = "A and B differ" if p.diverges else "the same"
                tail = f' <span class="{css}">→ iteration {p.iteration}: {word}</span>'
            actions.append(f"<li><code>{_e(line.text)}</code>{tail if p else _e(tail)}</li>")
        if p is None:
            if line.number is None:
                sections.append(f'<p class="note">… {_e(line.text)}</p>')
            continue
        title = f"iteration {p.iteration}" + (
            f" (action {line.number})" if line.number else f" ({line.text})"
        )
        if p.diverges:
            sections.append(
                f'<details class="diverging" open data-iteration="{p.iteration}"><summary>'
                f"{_e(title)}: A and B differ in {_e(_cells(p))}</summary>"
                f"{_pair_table(p)}</details>"
            )
        else:
            sections.append(
                f'<details data-iteration="{p.iteration}"><summary>{_e(title)}: '
                f"the same on both sides</summary>{_pair_table(p)}</details>"
            )
    title = (
        f"peftlife diff: {dcase.a} and {dcase.b} diverge"
        if d is not None
        else f"peftlife diff: {dcase.a} and {dcase.b}"
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # Nothing may load from anywhere: the page must open from an artifact offline.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>\n<body>"
        f"<h1>{_e(title)}</h1>{verdict}"
        '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"
        '<div class="world">'
        + "".join(f"<div>{_e(w)}</div>" for w in world_lines(case.config))
        + "</div>"
        '<h2>Invariants</h2><p class="note">A divergence is no verdict on either side; each '
        f'side was checked on its own.</p><ul class="invariants">{invariants}</ul>'
        f'<h2>Actions</h2><ol class="actions">{"".join(actions)}</ol>'
        '<h2>Iterations</h2><p class="note">Two rows per request, A above B; '
        '<span class="sample"></span> marks a cell where they differ.</p>'
        + "".join(sections)
        + "</body></html>\n"
    )


# ---- writing them ----


def write(dcase: DiffCase, outcome: PairOutcome, directory: Path) -> dict[str, Path]:
    """Write the JSON, the Markdown and the HTML page side by side; return their paths."""
    report_folder(directory)
    stem = name(dcase)
    paths = {
        "json": directory / f"{stem}.json",
        "markdown": directory / f"{stem}.md",
        "html": directory / f"{stem}.html",
    }
    paths["json"].write_text(json.dumps(to_json(dcase, outcome), indent=1) + "\n", "utf-8")
    files = {"json": paths["json"].name, "html": paths["html"].name}
    paths["markdown"].write_text(render_markdown(dcase, outcome, files), "utf-8")
    paths["html"].write_text(render_html(dcase, outcome, files), "utf-8")
    return paths


def load_json(path: Path) -> DiffCase:
    """Read a diff report's case back; ``ReportError`` names what is wrong."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReportError(f"cannot read diff report {str(path)!r}: {err}") from err
    return from_json(data)


__all__ = [
    "SCHEMA_VERSION",
    "DiffCase",
    "from_json",
    "load_json",
    "name",
    "render_html",
    "render_markdown",
    "render_terminal",
    "replay",
    "story",
    "terminal_text",
    "to_json",
    "write",
]
