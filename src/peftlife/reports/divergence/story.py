"""The story every rendering of a divergence tells, and the rows of its side-by-side view.

The actions in order, each iteration the two sides agreed on once, and the
diverging iteration side by side with the cells that differ named (the cells
are ``peftlife.search.diff.Cell`` records, grouped here by request). Below it
stands what the invariants said of each side: a divergence is no verdict.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from peftlife.checker.invariants import Violation
from peftlife.reports.divergence.case import DiffCase
from peftlife.search import diff
from peftlife.search.diff import Observation, Paired, PairOutcome, RequestRow
from peftlife.world.words import count

# Drain iterations shown before the divergence; earlier ones are one summary line.
DRAIN_SHOWN = 3
# What a side that ran no such iteration shows in its place.
NO_ITERATION = "no iteration (its drain had ended)"


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


def request_text(row: RequestRow, fields: tuple[str, ...] = diff.REQUEST_FIELDS) -> str:
    adapter = "" if row.adapter is None else f"lora {row.adapter} "
    shown = [
        f"in {row.listed}" if f == "listed" else f"{f} {row.field(f)}"
        for f in fields
        if f != "calls" and row.field(f) != "-"
    ]
    return adapter + " ".join(shown)


def headline(dcase: DiffCase, outcome: PairOutcome) -> str:
    d = outcome.divergence
    if d is None:
        return f"peftlife diff: {dcase.a} and {dcase.b} behave the same on this trace"
    return f"peftlife divergence at iteration {d.iteration}{where(d)}: {cells_text(d)}"


def where(d: Paired) -> str:
    return " (in the drain)" if d.action_index is None else f" (action {d.action_index + 1})"


def cells_text(d: Paired) -> str:
    """The diverging cells, a request's fields grouped: ``calls, request 2 (owns, calls)``."""
    plain = [str(c).replace("_", " ") for c in d.cells if c.kind != "request"]
    requests = dict.fromkeys(c.request_id for c in d.cells if c.kind == "request")
    grouped = [f"request {rid} ({', '.join(d.marks(rid))})" for rid in requests if rid is not None]
    return ", ".join([*plain, *grouped])


def verdicts(dcase: DiffCase, outcome: PairOutcome) -> list[tuple[str, str, Violation | None]]:
    """Per side: its label, its SUT and its first broken invariant (None: all held)."""
    return [
        ("A", dcase.a, outcome.violations_a[0] if outcome.violations_a else None),
        ("B", dcase.b, outcome.violations_b[0] if outcome.violations_b else None),
    ]


def verdict_text(outcome: PairOutcome, violation: Violation | None) -> str:
    if violation is not None:
        return f"breaks {violation}"
    last = outcome.iterations[-1].iteration if outcome.iterations else 0
    return f"every invariant held up to iteration {last}"


@attrs.frozen
class SideRow:
    """A row of the side-by-side view: its label, A's text, B's, and the fields that
    differ (a request's; ``differs`` alone for an iteration-wide row)."""

    label: str
    a: str
    b: str
    differs: bool
    fields: tuple[str, ...] = ()

    @property
    def marked(self) -> str:
        """The label, with ``≠`` and the fields that differ when the row differs."""
        if not self.differs:
            return self.label
        return f"≠ {self.label}" + (f" ({', '.join(self.fields)})" if self.fields else "")


def side_rows(d: Paired) -> list[SideRow]:
    """The side-by-side view of one iteration, row by row."""
    a, b = d.a, d.b

    def text(obs: Observation | None, get: Callable[[Observation], str]) -> str:
        return NO_ITERATION if obs is None else get(obs)

    kinds = {c.kind for c in d.cells}
    rows = [
        SideRow(
            "output",
            text(a, lambda o: o.output),
            text(b, lambda o: o.output),
            any(c.about_output for c in d.cells),
        ),
        SideRow(
            "calls",
            text(a, lambda o: "; ".join(o.call_texts) or "none"),
            text(b, lambda o: "; ".join(o.call_texts) or "none"),
            "calls" in kinds,
        ),
    ]
    for key in ("writes", "errors"):
        values = ["; ".join(getattr(o, key)) or "none" if o is not None else "-" for o in (a, b)]
        if key in kinds or values != ["none", "none"]:
            rows.append(SideRow(key, values[0], values[1], key in kinds))
    flights = [o.in_flight if o is not None else "-" for o in (a, b)]
    if any(f not in ("", "-") for f in flights):
        rows.append(SideRow("in flight", flights[0] or "-", flights[1] or "-", False))
    ids = sorted({r.request_id for o in (a, b) if o is not None for r in o.requests})
    for rid in ids:
        ra = a.request(rid) if a is not None else RequestRow(rid, None)
        rb = b.request(rid) if b is not None else RequestRow(rid, None)
        fields = tuple(f for f in d.marks(rid) if f != "calls")
        rows.append(
            SideRow(
                f"request {rid}",
                request_text(ra) or "-",
                request_text(rb) or "-",
                bool(fields),
                fields,
            )
        )
        if ra.calls or rb.calls:
            rows.append(
                SideRow(
                    "  its calls", ra.field("calls"), rb.field("calls"), "calls" in d.marks(rid)
                )
            )
    return rows


@attrs.frozen
class Part:
    """One part of an iteration both sides agreed on: what it is and its text; a
    request's row names its request."""

    what: str
    text: str
    request_id: int | None = None


def agreed(p: Paired) -> list[Part]:
    """An iteration both sides agreed on, part by part. What was left out of the
    comparison (the calls, an order) may still differ: both sides are then shown."""
    a, b = p.a, p.b
    assert a is not None and b is not None
    parts: list[Part] = []

    def both(what: str, get: Callable[[Observation], str]) -> None:
        ta, tb = get(a), get(b)
        if ta == tb:
            if ta:
                parts.append(Part(what, ta))
        else:
            parts.extend([Part(f"{what} (A)", ta or "none"), Part(f"{what} (B)", tb or "none")])

    both("output", lambda o: o.output)
    both("in flight", lambda o: o.in_flight)
    parts.extend(
        Part(f"request {row.request_id}", request_text(row), row.request_id) for row in a.requests
    )
    both("scheduler calls", lambda o: "; ".join(o.call_texts))
    both("writes", lambda o: "; ".join(o.writes))
    both("errors", lambda o: "; ".join(o.errors))
    return parts
