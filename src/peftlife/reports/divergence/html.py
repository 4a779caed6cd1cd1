"""A divergence as one self-contained HTML page: no script, nothing fetched.

One table per iteration, two rows per request (A above B), every cell where
they differ outlined; the diverging iteration is open, the others fold.
"""

from __future__ import annotations

from collections.abc import Callable

from peftlife.reports.divergence.case import DiffCase
from peftlife.reports.divergence.story import (
    NO_ITERATION,
    cells_text,
    story,
    verdict_text,
    verdicts,
    where,
)
from peftlife.reports.format import escape as _e
from peftlife.reports.format import world_lines
from peftlife.search.diff import (
    OUTPUT_KINDS,
    Cell,
    CellKind,
    Observation,
    Paired,
    PairOutcome,
    RequestRow,
)
from peftlife.world.words import count

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
# The iteration-wide rows: label, text of one side, the cell kinds that mark it.
_WIDE: tuple[tuple[str, Callable[[Observation], str], frozenset[CellKind]], ...] = (
    ("output", lambda o: o.output, OUTPUT_KINDS),
    ("calls", lambda o: "; ".join(o.call_texts) or "none", frozenset({"calls"})),
    ("writes", lambda o: "; ".join(o.writes) or "none", frozenset({"writes"})),
    ("errors", lambda o: "; ".join(o.errors) or "none", frozenset({"errors"})),
    ("in flight", lambda o: o.in_flight or "none", frozenset()),
)
_OPTIONAL = ("writes", "errors", "in flight")


def _cell(text: str, cell: Cell, diverging: set[Cell]) -> str:
    marked = cell in diverging
    classes = ' class="diverging"' if marked else ""
    data = f' data-cell="{_e(cell)}"' + (' data-diverging="yes"' if marked else "")
    return f"<td{classes}{data}>{_e(text)}</td>"


def _pair_table(p: Paired) -> str:
    """An iteration as a table: iteration-wide rows, then two rows per request, A above B."""
    diverging = set(p.cells) if p.diverges else set()
    kinds = {c.kind for c in diverging}
    sides = (("A", p.a), ("B", p.b))
    head = "".join(f"<th>{c}</th>" for c in ("", "side", *_COLUMNS))
    rows = [f"<tr>{head}</tr>"]
    span = len(_COLUMNS)
    for label, get, marks in _WIDE:
        texts = [get(o) if o is not None else NO_ITERATION for _, o in sides]
        marked = bool(marks & kinds)
        if label in _OPTIONAL and texts == ["none", "none"] and not marked:
            continue
        for (side, _), text in zip(sides, texts, strict=True):
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
            tds = "".join(_cell(row.field(c), Cell("request", c, rid), diverging) for c in _COLUMNS)
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
        f'<p class="verdict">A and B diverge at iteration {d.iteration}{_e(where(d))}: '
        f"{_e(cells_text(d))}</p>"
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
        f"<b>{side}</b> <code>{_e(spec)}</code>: {_e(verdict_text(outcome, v))}</li>"
        for side, spec, v in verdicts(dcase, outcome)
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
                f"{_e(title)}: A and B differ in {_e(cells_text(p))}</summary>"
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
