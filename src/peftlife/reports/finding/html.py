"""The HTML timeline of a finding, and the index page of a report directory.

One self-contained page per finding (inline CSS and JS, no network, no fonts
to fetch) that opens from a CI artifact anywhere: requests and adapters as
rows, executor iterations as columns, KV residency as colour with a letter,
ownership as a glyph, the actions on the column where they took effect, the
violating cell outlined with expected against found beside it, and every
call of an iteration a click away. The drain folds into one column group.
It is built from the same views as the terminal and Markdown stories
(``story.request_fields``, ``adapter_fields``, ``output_line``), so all three
tell one story; its size grows linearly with the trace (a request's columns
before it arrives and after it ends are one spanning cell each).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from peftlife.checker.invariants import Violation
from peftlife.checker.registry import BY_NAME
from peftlife.reports.finding.case import Case
from peftlife.reports.finding.story import (
    adapter_fields,
    call_lines,
    length_label,
    output_line,
    request_fields,
    subject_rows,
)
from peftlife.reports.format import escape as _e
from peftlife.reports.format import seed_said, world_lines
from peftlife.search import gate
from peftlife.search.trace import Entry, Outcome
from peftlife.world.ledger import Args, Call, Facts, given
from peftlife.world.request import LlmRequestState
from peftlife.world.snapshot import Snapshot, in_flight_line
from peftlife.world.words import count

__all__ = ["INDEX_NAME", "render_html", "render_index", "verdict_words", "write_html"]

INDEX_NAME = "index.html"

_DASH = "\N{EN DASH}"  # an empty set or no KV: wider than "-", so it reads in a small cell
_LETTER = {"ACTIVE": "A", "SUSPENDED": "S", "NONE": _DASH}
_OWNS = {"active": "●", "paused": "○", "both": "◆", "none": "·", "-": ""}
_ENTRY = {"in use": "■", "done": "□", "-": _DASH}
_ENDED = {"finished": "✓", "failed": "✗", "cancelled": "⊘"}
_RETIRING = "⇥"  # GENERATION_TO_COMPLETE: its last token is on the device


def _asset(name: str) -> str:
    return resources.files("peftlife.reports.finding").joinpath("assets", name).read_text("utf-8")


def verdict_words(invariant: str) -> str:
    """The invariant in words, from its record in the checker's registry.

    >>> verdict_words("exclusive_ownership")
    'No request is both active and paused on one adapter.'
    """
    record = BY_NAME.get(invariant)
    return invariant.replace("_", " ") if record is None else record.words


# ---- what the grid is made of ----


@attrs.frozen
class _Column:
    """One executor iteration: its entry, the snapshot before it, and what took effect."""

    entry: Entry
    previous: Snapshot | None
    acts: tuple[tuple[str, bool], ...]  # (text, is a fault)
    drain: bool
    # The folded drain's one column: it stands beside iterations it does not follow.
    folded: bool = False

    @property
    def iteration(self) -> int:
        return self.entry.snapshot.iteration


def _columns(case: Case, outcome: Outcome) -> list[_Column]:
    """The iterations in order, each with the actions that took effect in it.

    An action between steps takes effect in the next iteration the engine runs
    (a submit's request arrives there, a fault lands there).
    """
    acts: dict[int, list[tuple[str, bool]]] = {}
    pending: list[tuple[str, bool]] = []
    submitted = 0
    entry_at = {e.action_index: n for n, e in enumerate(outcome.entries)}
    for index, action in enumerate(case.actions):
        if action.kind == "submit":
            submitted += 1
            pending.append((f"submit → request {submitted}", False))
        elif action.kind == "cancel":
            pending.append((f"cancel request {action.request_id}", False))
        elif action.kind == "eos":
            pending.append((f"end-of-sequence request {action.request_id}", False))
        elif action.kind == "hold_batch":
            pending.append(("hold batch", True))
        elif action.kind != "step":
            pending.append((f"{action.kind} ({action.pool})", True))
        if index in entry_at:
            acts[entry_at[index]] = pending
            pending = []
    first_drain = next((n for n, e in enumerate(outcome.entries) if e.action_index is None), None)
    if pending and first_drain is not None:
        acts.setdefault(first_drain, []).extend(pending)
    columns = []
    previous = None
    for n, entry in enumerate(outcome.entries):
        columns.append(_Column(entry, previous, tuple(acts.get(n, ())), entry.action_index is None))
        previous = entry.snapshot
    return columns


def _marks(outcome: Outcome) -> dict[tuple[str, int], Violation]:
    """(row, iteration) of every violating cell, with the first violation there."""
    marks: dict[tuple[str, int], Violation] = {}
    for v in outcome.violations:
        for row in subject_rows(v):
            marks.setdefault((row, v.iteration), v)
    return marks


# ---- cells ----


@attrs.frozen
class _Cell:
    """One grid cell: its classes, data attributes, hover text and content."""

    classes: tuple[str, ...]
    data: tuple[tuple[str, str], ...]
    title: str
    content: str


def _title(name: str, iteration: int, now: dict[str, str], before: dict[str, str] | None) -> str:
    lines = [f"{name} after iteration {iteration}"]
    for key, value in now.items():
        was = None if before is None else before.get(key)
        lines.append(f"{key}: {value}" + (f" (was {was})" if was not in (None, value) else ""))
    return "\n".join(lines)


def _changed(before: dict[str, str] | None, now: dict[str, str]) -> tuple[str, ...]:
    return ("changed",) if before is not None and before != now else ()


def _flights(rid: int, s: Snapshot) -> list[int]:
    """The in-flight batches (by the iteration that launched each) a request's cell is part of.

    Under the overlap executor a batch launched in iteration k is read back in
    iteration k + 1; its members' cells in both columns carry it. None in the
    simple loop.
    """
    step = None if s.step is None else s.step.overlap
    if step is None:
        return []
    return [
        launched
        for launched, members in ((s.iteration - 1, step.in_flight), (s.iteration, s.in_flight))
        if rid in members
    ]


def _bands(flights: list[int], iteration: int) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """The band across a batch's two iterations: its spans, hover lines and the data attribute.

    Consecutive batches alternate between the cell's bottom and top edge, so a
    request in two batches in a row shows both.
    """
    spans, lines = "", ""
    for launched in flights:
        end = "from" if launched == iteration else "to"
        spans += f'<span class="band {end} lane-{launched % 2}"></span>'
        lines += f"\nin flight: launched in iteration {launched}, read back in {launched + 1}"
    data: tuple[tuple[str, str], ...] = ()
    if flights:
        data = (("flight", " ".join(map(str, flights))),)
    return spans, lines, data


def _request_cell(rid: int, column: _Column) -> _Cell | None:
    """A request's cell, or None where it is not in the world."""
    s = column.entry.snapshot
    fields = request_fields(s).get(rid)
    # The folded drain's column draws no band: its neighbours are not its iterations.
    flights = [] if column.folded else _flights(rid, s)
    bands, in_flight, flight = _bands(flights, s.iteration)
    if fields is None:
        ended = dict(s.ended).get(rid)
        if ended is None:
            return None
        title = f"request {rid} {ended} in iteration {s.iteration}{in_flight}"
        return _Cell(
            ("ended",), (("ended", ended), *flight), title, f"{_ENDED[ended]} {ended}{bands}"
        )
    before = request_fields(column.previous).get(rid) if column.previous else None
    target, draft, owns = fields["target"], fields.get("draft"), fields["owns"]
    data = [("target", target), ("owns", owns), *flight]
    content = f'<span class="kv target r-{target.lower()}">{_LETTER[target]}</span>'
    if draft is not None:
        data.append(("draft", draft))
        content += f'<span class="kv draft r-{draft.lower()}">{_LETTER[draft]}</span>'
    content += f'<span class="own">{_OWNS[owns]}</span>'
    classes = _changed(before, fields)
    if fields["state"] == LlmRequestState.GENERATION_TO_COMPLETE.name:
        classes += ("retiring",)
        content += f'<span class="retiring" title="retiring">{_RETIRING}</span>'
    title = _title(f"request {rid}", s.iteration, fields, before) + in_flight
    return _Cell(classes, tuple(data), title, content + bands)


def _adapter_cell(task: int, column: _Column) -> _Cell | None:
    s = column.entry.snapshot
    fields = adapter_fields(s).get(task)
    if fields is None:
        return None
    before = adapter_fields(column.previous).get(task) if column.previous else None
    sets = f"●{fields['active'].strip('{}') or _DASH} ○{fields['paused'].strip('{}') or _DASH}"
    entries = f"dev{_ENTRY[fields['device']]} host{_ENTRY[fields['host']]}"
    content = f'<div class="sets">{_e(sets)}</div><div class="entries">{entries}</div>'
    return _Cell(
        ("adapter", *_changed(before, fields)),
        (("active", fields["active"]), ("paused", fields["paused"])),
        _title(f"adapter {task}", s.iteration, fields, before),
        content,
    )


CellOf = Callable[[_Column], "_Cell | None"]


def _row_cells(
    name: str,
    cell_of: CellOf,
    columns: list[_Column],
    marks: dict[tuple[str, int], Violation],
    group: str = "",
) -> Iterator[str]:
    """A row's cells; each run of columns where the subject is absent is one spanning cell.

    ``group`` ("drain" or "fold") classes every cell, so folding hides exactly those.
    """
    absent = 0

    def gap() -> str:
        span = f' colspan="{absent}"' if absent > 1 else ""
        return f'<td class="{" ".join(("absent", group)).strip()}"{span}></td>'

    for column in columns:
        cell = cell_of(column)
        if cell is None:
            absent += 1
            continue
        if absent:
            yield gap()
            absent = 0
        mark = marks.get((name, column.iteration))
        classes = ("cell", *cell.classes, *((group,) if group else ()))
        data = [*cell.data, ("row", name), ("iteration", str(column.iteration))]
        if mark is not None:
            classes += ("violating",)
            data.append(("invariant", mark.invariant))
        attributes = "".join(f' data-{k}="{_e(v)}"' for k, v in data)
        yield (
            f'<td class="{" ".join(classes)}"{attributes} title="{_e(cell.title)}">'
            f"{cell.content}</td>"
        )
    if absent:
        yield gap()


# ---- the page ----


def _header(case: Case, outcome: Outcome, files: dict[str, str]) -> str:
    drained = sum(e.action_index is None for e in outcome.entries)
    seed = seed_said(case.seed, case.profile)
    facts = [
        ("SUT", f"<code>{_e(case.sut)}</code>"),
        ("scenario", f"<code>{_e(case.scenario)}</code>"),
        ("seed", _e(seed)),
        ("profile", _e(case.profile or "-")),
        ("examples searched", _e("-" if case.examples is None else case.examples)),
        (
            length_label(case).rstrip(":"),
            _e(
                f"{count(len(case.actions), 'action')}, "
                f"{count(len(outcome.entries), 'iteration')}"
                + (f" ({drained} in the drain)" if drained else "")
                + (f"; {case.shrink_note}" if case.shrink_note else "")
            ),
        ),
    ]
    facts += [(what, f"<code>{_e(name)}</code>") for what, name in files.items()]
    if outcome.violations:
        first = outcome.violations[0]
        verdict = (
            f'<h1 class="verdict">{_e(first.invariant)} violated</h1>'
            f'<p class="words">{_e(verdict_words(first.invariant))}</p>'
        )
    else:
        verdict = '<h1 class="verdict held">every invariant held</h1>'
    violations = "".join(_expected_found(v) for v in outcome.violations)
    world = "".join(f"<div>{_e(line)}</div>" for line in world_lines(case.config))
    return (
        f"<header>{verdict}"
        f'<dl class="facts">{"".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)}</dl>'
        f'<div class="world" id="world">{world}</div>'
        + (f'<ul class="violations">{violations}</ul>' if violations else "")
        + _decisive_calls(outcome)
        + "</header>"
    )


def _expected_found(v: Violation) -> str:
    return (
        f"<li><b>{_e(v.invariant)}</b>: {_e(v.subject)} at iteration {v.iteration}: "
        f"expected {_e(v.expected)}, found <b>{_e(v.found)}</b></li>"
    )


def _calls_in_words(s: Snapshot) -> str:
    """The iteration's calls as the terminal story words them ("scheduler PEFT calls: none")."""
    return "".join(
        f'<div class="said"><span class="label">{_e(what)} calls:</span> <code>{_e(calls)}</code>'
        "</div>"
        for what, calls in call_lines(s)
    )


def _decisive_calls(outcome: Outcome) -> str:
    """What the scheduler called (or did not) in the first violation's iteration, at the top:
    often the defect itself, which the grid shows only as a call missing from a list."""
    if not outcome.violations:
        return ""
    at = outcome.violations[0].iteration
    snapshot = next((e.snapshot for e in outcome.entries if e.snapshot.iteration == at), None)
    said = "" if snapshot is None else _calls_in_words(snapshot)
    if not said:
        return ""
    return f'<div class="decisive"><h2>in iteration {at}</h2>{said}</div>'


def _legend(overlap: bool) -> str:
    items = [
        '<span class="kv r-active">A</span> KV ACTIVE',
        '<span class="kv r-suspended">S</span> KV SUSPENDED',
        f'<span class="kv r-none">{_DASH}</span> no KV',
        "first letter target pool, small second letter draft pool",
        "ownership: ● active, ○ paused, ◆ both (a defect), · none",
        "✓ finished ✗ failed ⊘ cancelled",
        f"adapter: ● active set, ○ paused set; dev/host entry ■ in use □ done {_DASH} none",
        "corner dot: changed in this iteration",
        '<span class="violating-sample"></span> violating cell, expected and found at the right',
    ]
    if overlap:  # the overlap executor's marks; a simple-loop page has none
        items += [
            '<span class="band-sample"></span> in flight: the band joins the iteration that '
            "launched a batch to the one that read it back (top and bottom alternate)",
            f"{_RETIRING} retiring: its last token is on the device",
        ]
    return (
        '<div class="legend" id="legend">'
        + "".join(f'<span class="item">{item}</span>' for item in items)
        + "</div>"
    )


def _head_rows(columns: list[_Column]) -> str:
    steps = [c for c in columns if not c.drain]
    drain = [c for c in columns if c.drain]
    phase = f'<th class="row"></th><th class="phase" colspan="{max(len(steps), 1)}">actions</th>'
    if not steps:
        phase = '<th class="row"></th>'
    if drain:
        toggle = (
            '<button type="button" class="drain-toggle" aria-expanded="false">'
            f"drain: {count(len(drain), 'iteration')} ⇔</button>"
        )
        phase += f'<th class="phase fold">{toggle}</th>'
        phase += f'<th class="phase drain" colspan="{len(drain)}">{toggle}</th>'
    phase += '<th class="note"></th>'

    def acts(column: _Column, extra: str = "") -> str:
        chips = "".join(
            f'<span class="act{" fault" if fault else ""}">{_e(text)}</span>'
            for text, fault in column.acts
        )
        return f'<td class="acts{extra}" data-iteration="{column.iteration}">{chips}</td>'

    def head(column: _Column, extra: str = "", label: str = "") -> str:
        return (
            f'<th class="col{extra}" data-iteration="{column.iteration}">'
            f'<button type="button" title="show iteration {column.iteration}\'s calls">'
            f"{label or column.iteration}</button></th>"
        )

    act_row = '<th class="row">took effect</th>' + "".join(acts(c) for c in steps)
    col_row = '<th class="row">iteration</th>' + "".join(head(c) for c in steps)
    if drain:
        last = drain[-1]
        act_row += acts(attrs.evolve(last, acts=sum((c.acts for c in drain), ())), " fold")
        col_row += head(last, " fold", f"{drain[0].iteration}{_DASH}{last.iteration}")
        act_row += "".join(acts(c, " drain") for c in drain)
        col_row += "".join(head(c, " drain") for c in drain)
    return (
        f'<tr>{phase}</tr><tr>{act_row}<td class="note"></td></tr>'
        f'<tr>{col_row}<th class="note">violation</th></tr>'
    )


def _grid(case: Case, outcome: Outcome) -> str:
    columns = _columns(case, outcome)
    marks = _marks(outcome)
    request_ids = sorted(
        {v.request_id for e in outcome.entries for v in e.snapshot.requests}
        | {rid for e in outcome.entries for rid, _ in e.snapshot.ended}
    )
    adapter_ids = sorted({a.task_id for e in outcome.entries for a in e.snapshot.adapters})
    drain = [c for c in columns if c.drain]
    body = []
    rows: list[tuple[str, CellOf]] = [
        (f"request {rid}", partial(_request_cell, rid)) for rid in request_ids
    ]
    rows += [(f"adapter {t}", partial(_adapter_cell, t)) for t in adapter_ids]
    notes: dict[str, Violation] = {}
    for (row, _), mark in marks.items():
        notes.setdefault(row, mark)
    steps = [c for c in columns if not c.drain]
    for name, cell_of in rows:
        kind = "adapter" if name.startswith("adapter") else "request"
        cells = list(_row_cells(name, cell_of, steps, marks))
        if drain:
            # Folded, the drain shows as one column: its last iteration.
            folded = attrs.evolve(drain[-1], folded=True)
            cells += _row_cells(name, cell_of, [folded], marks, "fold")
            cells += _row_cells(name, cell_of, drain, marks, "drain")
        v = notes.get(name)
        note = (
            f'<td class="note" data-invariant="{_e(v.invariant)}">'
            f'<span class="invariant">{_e(v.invariant)}</span> at iteration {v.iteration}<br>'
            f'<span class="label">expected</span> <span class="expected">{_e(v.expected)}</span>'
            f'<br><span class="label">found</span> <span class="found">{_e(v.found)}</span></td>'
            if v is not None
            else '<td class="note"></td>'
        )
        body.append(
            f'<tr class="{kind}" data-row="{_e(name)}"><th class="row" scope="row">{_e(name)}</th>'
            + "".join(cells)
            + note
            + "</tr>"
        )
    return (
        '<div class="scroll"><table class="grid folded" id="grid">'
        f"<thead>{_head_rows(columns)}</thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def _value(value: object) -> str:
    if isinstance(value, Args | Facts):
        return ", ".join(f"{k}={_value(v)}" for k, v in given(value).items())
    if isinstance(value, enum.Enum):
        return value.name
    return "" if value is None else str(value)


def _call_row(number: int, call: Call) -> str:
    failed = ' class="failed"' if call.result is False else ""
    cells = (
        number,
        call.caller,
        call.component,
        call.method,
        "-" if call.request_id is None else call.request_id,
        _value(call.args),
    )
    return (
        "<tr>"
        + "".join(f"<td>{_e(c)}</td>" for c in cells)
        + f"<td{failed}>{_e(_value(call.result))}</td><td>{_e(_value(call.facts))}</td></tr>"
    )


def _detail(column: _Column, outcome: Outcome) -> str:
    """An iteration's output and calls; the first violation's iteration is open at first."""
    s = column.entry.snapshot
    here = [v for v in outcome.violations if v.iteration == s.iteration]
    is_open = bool(outcome.violations) and outcome.violations[0].iteration == s.iteration
    step = s.step
    listed = ""
    if step is not None and step.output is not None and step.output.listed:
        listed = (
            "<h3>listed requests</h3><table><tr><th>request</th><th>list</th><th>state</th>"
            "<th>target</th><th>draft</th><th>chunk</th></tr>"
            + "".join(
                f"<tr><td>{v.request_id}</td><td>{v.output_list}</td><td>{v.state.name}</td>"
                f"<td>{v.target.name}</td><td>{'-' if v.draft is None else v.draft.name}</td>"
                f"<td>{v.chunk_size or '-'}</td></tr>"
                for v in step.output.listed
            )
            + "</table>"
        )
    calls = step.calls if step is not None else ()
    table = (
        "<table><tr><th>#</th><th>caller</th><th>component</th><th>method</th><th>request</th>"
        "<th>args</th><th>result</th><th>detail</th></tr>"
        + "".join(_call_row(n, c) for n, c in enumerate(calls, start=1))
        + "</table>"
        if calls
        else "<p>no KV or PEFT call</p>"
    )
    errors = "".join(
        f'<p class="failed">engine: {_e(e.message)}</p>' for e in (step.errors if step else ())
    )
    ended = ", ".join(f"request {rid} {how}" for rid, how in s.ended)
    phase = "drain iteration" if column.drain else "iteration"
    verdicts = f'<ul class="violations">{"".join(map(_expected_found, here))}</ul>'
    return (
        f'<section class="detail" id="iteration-{s.iteration}" data-iteration="{s.iteration}"'
        f"{'' if is_open else ' hidden'}><h2>{phase} {s.iteration}</h2>"
        + (verdicts if here else "")
        + f"<p>scheduler output: <code>{_e(output_line(s))}</code></p>"
        + _calls_in_words(s)
        + (f'<p class="in-flight">{_e(flight)}</p>' if (flight := in_flight_line(s)) else "")
        + (f"<p>ended: {_e(ended)}</p>" if ended else "")
        + listed
        + errors
        + f"<h3>KV and PEFT calls ({len(calls)})</h3>{table}</section>"
    )


def render_html(case: Case, outcome: Outcome, files: dict[str, str] | None = None) -> str:
    """The finding's timeline as one self-contained HTML page.

    >>> from peftlife.reports.finding.case import replay
    >>> from peftlife.search.trace import Action
    >>> from peftlife.world.config import EngineConfig
    >>> case = Case("reference", "default", EngineConfig(),
    ...             (Action("submit", prompt_len=2, max_new_tokens=1), Action("step")))
    >>> page = render_html(case, replay(case))
    >>> "every invariant held" in page and "http" not in page.split("<body")[1]
    True
    """
    files = files or {}
    title = (
        f"peftlife: {outcome.violations[0].invariant} in {case.sut}"
        if outcome.violations
        else f"peftlife replay of {case.sut}"
    )
    columns = _columns(case, outcome)
    hint = (
        '<p class="hint">Hover a cell for the request\'s state and prefill progress; click an '
        "iteration number for its scheduler output and every KV and PEFT call (the "
        "violating iteration's are open below).</p>"
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # Nothing may load from anywhere: the page must open from an artifact offline.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{_e(title)}</title><style>{_asset('timeline.css')}"
        + (_asset("overlap.css") if case.config.overlap else "")
        + "</style></head>\n<body>"
        + _header(case, outcome, files)
        + _legend(case.config.overlap)
        + hint
        + _grid(case, outcome)
        + '<div id="details">'
        + "".join(_detail(c, outcome) for c in columns)
        + "</div>"
        + f"<script>{_asset('timeline.js')}</script></body></html>\n"
    )


# ---- the index page ----


def _reports(directory: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(data, dict):
            yield path, data


def _finding_row(path: Path, data: dict[str, Any]) -> str:
    page = path.with_suffix(".html")
    link = page.name if page.exists() else path.name
    violation = data.get("violation") or {}
    if not isinstance(violation, dict):
        violation = {"invariant": "?"}
    invariant = violation.get("invariant", "held")
    cells = [
        f'<a href="{_e(link)}">{_e(invariant)}</a>',
        _e(violation.get("subject", "-")),
        _e(violation.get("expected", "-")),
        f"<b>{_e(violation.get('found', '-'))}</b>",
        _e(_when(path)),
        f"<code>{_e(data.get('sut'))}</code>",
        _e(data.get("scenario")),
        _e(seed_said(data.get("seed"), str(data.get("profile", "")))),
        _e(data.get("examples", "-") if data.get("examples") is not None else "-"),
        _e(len(data.get("actions", []))),
        _e(len(data.get("steps", []))),
    ]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _when(path: Path) -> str:
    """When a file was written, in UTC to the minute."""
    try:
        stamp = path.stat().st_mtime
    except OSError:
        return "-"
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _gate_table(path: Path, data: dict[str, Any]) -> str:
    link = f'<a href="{_e(path.name)}">{_e(path.name)}</a>'
    try:
        table = gate.Gate.from_json(data)
    except gate.GateFileError as err:
        return f"<h2>mutant gate ({link}): not readable ({_e(err)})</h2>"
    rows = [
        "<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row.cells()) + "</tr>"
        for row in table.rows
    ]
    return (
        f"<h2>mutant gate ({link}): {_e(table.verdict)}</h2>"
        '<table class="index gate"><tr>'
        + "".join(f"<th>{h}</th>" for h in gate.HEADER)
        + "</tr>"
        + "".join(rows)
        + "</table>"
    )


def render_index(directory: Path) -> str:
    """The index page of a report directory: every finding, and the mutant gate's table.

    >>> import tempfile
    >>> "no finding" in render_index(Path(tempfile.mkdtemp()))
    True
    """
    findings, gates = [], []
    for path, data in _reports(directory):
        if "schema_version" in data and "actions" in data:
            findings.append(_finding_row(path, data))
        elif "rows" in data and "ok" in data:
            gates.append(_gate_table(path, data))
    heads = (
        "invariant violated",
        "by",
        "expected",
        "found",
        "written",
        "SUT",
        "scenario",
        "seed",
        "examples",
        "actions",
        "iterations",
    )
    table = (
        '<table class="index findings" id="findings"><tr>'
        + "".join(f"<th>{h}</th>" for h in heads)
        + "</tr>"
        + "".join(findings)
        + "</table>"
        if findings
        else "<p>no finding in this directory</p>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\"><title>peftlife reports</title>"
        f"<style>{_asset('timeline.css')}</style></head>\n<body><h1>peftlife reports</h1>"
        f'<p class="when">index written {_e(_now())}</p>'
        f"<h2>findings ({len(findings)})</h2>{table}{''.join(gates)}</body></html>\n"
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def write_index(directory: Path) -> Path:
    """Write or refresh ``index.html`` in a report directory; return its path."""
    path = directory / INDEX_NAME
    path.write_text(render_index(directory), "utf-8")
    return path


def write_html(
    case: Case, outcome: Outcome, json_path: Path, files: dict[str, str]
) -> dict[str, Path]:
    """Write the finding's page next to its JSON and refresh the index; return both paths."""
    page = json_path.with_suffix(".html")
    page.write_text(render_html(case, outcome, files), "utf-8")
    return {"html": page, "index": write_index(json_path.parent)}
