"""The story every rendering of a finding tells: each step with its changes.

One ``iteration()`` view (request and adapter rows with ``old→new`` changes,
the scheduler's calls, errors) and one ``story()`` (action numbers, request
ids, violation marks) serve the terminal and the Markdown alike; the world's lines are
``peftlife.reports.format``'s, which a divergence's reports share.
"""

from __future__ import annotations

from typing import Any

import attrs

from peftlife.checker.invariants import Violation, owned
from peftlife.reports.finding.case import Case
from peftlife.search.trace import Action, Entry, Outcome
from peftlife.world.ledger import Call, Fault
from peftlife.world.snapshot import Snapshot, in_flight_line
from peftlife.world.words import count

# ---- the story both renderings tell ----


def length_label(case: Case) -> str:
    """How a report introduces its trace's length: shrunk, or as the search met it."""
    return "shrunk to" if case.shrunk else "not shrunk (the run ended before its shrinker did):"


def request_fields(s: Snapshot) -> dict[int, dict[str, str]]:
    """Each live request's compact fields, by request id."""
    adapters = {a.task_id: a for a in s.adapters}
    fields = {}
    for v in s.requests:
        row = {
            "lora": "-" if v.lora_task_id is None else str(v.lora_task_id),
            "state": v.state.name,
            "prefill": f"{v.position}/{v.context_len}",
            "tokens": f"{v.num_generated}/{v.max_new_tokens}",
            "target": v.target.residency.name,
        }
        if v.draft is not None:
            row["draft"] = v.draft.residency.name
        row["owns"] = "-" if v.lora_task_id is None else owned(v, adapters)
        fields[v.request_id] = row
    return fields


def _entry(entry: Any) -> str:
    return "-" if entry is None else ("in use" if entry.in_use else "done")


def adapter_fields(s: Snapshot) -> dict[int, dict[str, str]]:
    return {
        a.task_id: {
            "active": "{" + ", ".join(map(str, sorted(a.active))) + "}",
            "paused": "{" + ", ".join(map(str, sorted(a.paused))) + "}",
            "device": _entry(a.device),
            "host": _entry(a.host),
        }
        for a in s.adapters
    }


def scheduler_calls(s: Snapshot) -> list[str]:
    """The PEFT calls the scheduler made in this iteration, as short text."""
    calls = s.step.calls if s.step else ()
    return [_peft_call(c) for c in calls if c.caller == "scheduler" and c.component == "peft"]


_WHY: dict[Fault, str] = {
    "failed_grow": "injected grow failure",
    "refused_resume": "injected resume refusal",
    "no_device_room": "no device room",
}


def scheduler_kv_calls(s: Snapshot) -> list[str]:
    """Every KV call the scheduler made in this iteration, failures with their reason."""
    calls = s.step.calls if s.step else ()
    return [_kv_call(c) for c in calls if c.caller == "scheduler" and c.component != "peft"]


def executor_calls(s: Snapshot) -> list[str]:
    """The calls the executor made after the scheduler (resources, LoRA loads, frees).

    A LoRA load of an empty batch changes nothing and is left out.
    """
    return [
        _kv_call(c) if c.component != "peft" else _peft_call(c)
        for c in (s.step.calls if s.step else ())
        if c.caller in ("prepare_resources", "recompute_teardown", "free_resources")
        and not (c.method == "ensure_batch" and not c.args.tasks and not c.facts.evicted)
    ]


def _kv_call(c: Call) -> str:
    pool = "" if c.component == "target" else f"{c.component} "
    reason = _WHY[c.facts.fault] if c.facts.fault else "no room"
    why = f" → failed ({reason})" if c.result is False else ""
    return f"{pool}{c.method}({'' if c.request_id is None else c.request_id}){why}"


def _peft_call(c: Call) -> str:
    if c.method == "ensure_batch":
        evicted = c.facts.evicted
        tail = f", evicting {list(evicted)}" if evicted else ""
        failed = "" if c.result == "ok" else f" → {c.result}"
        return f"ensure_batch(adapters {list(c.args.tasks or ())}{tail}){failed}"
    pause = c.args.pause
    arg = "" if pause is None else f", pause={pause}"
    result = "" if c.result in (None, "ok", True) else f" → {c.result}"
    rid = "" if c.request_id is None else str(c.request_id)
    return f"{c.method}({rid}{arg}){result}"


def output_line(s: Snapshot) -> str:
    out = s.step.output if s.step else None
    if out is None:
        return "no readable output"
    parts = [f"{name} {list(ids)}" for name, ids in out.lists() if ids]
    return "; ".join(parts) if parts else "empty"


@attrs.frozen
class Row:
    """A request or an adapter after an iteration, each field marked if it changed."""

    name: str  # "request 3" or "adapter 7"
    cells: tuple[tuple[str, str, bool], ...]  # (field, shown value, changed?)
    new: bool
    mark: str | None  # the invariant this row is the subject of

    @property
    def unchanged(self) -> bool:
        return not self.new and self.mark is None and not any(c for _, _, c in self.cells)


def _row(name: str, old: dict[str, str] | None, new: dict[str, str], marks: dict[str, str]) -> Row:
    cells = []
    for key, value in new.items():
        before = None if old is None else old.get(key)
        changed = before is not None and before != value
        cells.append((key, f"{before}→{value}" if changed else value, changed))
    return Row(name, tuple(cells), old is None, marks.get(name))


@attrs.frozen
class Iteration:
    """What both renderings show of one iteration."""

    output: str
    requests: tuple[Row, ...]
    # Requests that ended in it, each with the invariant it is the subject of, if any.
    ended: tuple[tuple[str, str | None], ...]
    adapters: tuple[Row, ...]
    calls: tuple[tuple[str, str], ...]  # (whose calls, the calls as text)
    errors: tuple[str, ...]
    # The overlap executor's batches in this iteration (``in_flight_line``); None if simple.
    in_flight: str | None = None


def call_lines(s: Snapshot) -> tuple[tuple[str, str], ...]:
    """The iteration's calls as the story tells them: (whose, the calls), e.g.
    ("scheduler PEFT", "none") after a KV move with no PEFT move."""
    kv_calls, peft_calls = scheduler_kv_calls(s), scheduler_calls(s)
    calls = [("scheduler KV", "; ".join(kv_calls))] if kv_calls else []
    if peft_calls or (kv_calls and s.adapters):
        # A KV move without its PEFT move is often the defect itself: say "none".
        calls.append(("scheduler PEFT", "; ".join(peft_calls) or "none"))
    if executor := executor_calls(s):
        calls.append(("executor", "; ".join(executor)))
    return tuple(calls)


def iteration(s: Snapshot, previous: Snapshot | None, marks: dict[str, str]) -> Iteration:
    old_requests = request_fields(previous) if previous else {}
    old_adapters = adapter_fields(previous) if previous else {}
    return Iteration(
        output=output_line(s),
        requests=tuple(
            _row(f"request {rid}", old_requests.get(rid), fields, marks)
            for rid, fields in request_fields(s).items()
        ),
        ended=tuple(
            (f"request {rid} {outcome}", marks.get(f"request {rid}")) for rid, outcome in s.ended
        ),
        adapters=tuple(
            _row(f"adapter {task}", old_adapters.get(task), fields, marks)
            for task, fields in adapter_fields(s).items()
        ),
        calls=call_lines(s),
        errors=tuple(e.message for e in (s.step.errors if s.step else ())),
        in_flight=in_flight_line(s),
    )


@attrs.frozen
class Step:
    """One line of the story: an action (numbered) or a drain iteration (not)."""

    number: int | None
    text: str
    action: Action | None
    entry: Entry | None
    previous: Snapshot | None
    # The id a submit gives its request; the rows a violation is about, at its iteration.
    request_id: int | None = None
    marks: dict[str, str] = attrs.field(factory=dict, eq=False)

    @property
    def label(self) -> str:
        return f"{self.number:>3} {self.text}" if self.number else f"    {self.text}"

    def view(self) -> Iteration | None:
        if self.entry is None:
            return None
        return iteration(self.entry.snapshot, self.previous, self.marks)


def story(case: Case, outcome: Outcome, drain_shown: int = 3) -> list[Step | str]:
    """The numbered actions with their iterations; a long drain is elided."""
    by_action = {e.action_index: e for e in outcome.entries if e.action_index is not None}
    last = outcome.entries[-1] if outcome.violations else None

    def marks(entry: Entry | None) -> dict[str, str]:
        return violation_subjects(outcome) if entry is not None and entry is last else {}

    items: list[Step | str] = []
    previous: Snapshot | None = None
    submitted = 0
    for index, action in enumerate(case.actions):
        entry = by_action.get(index)
        submitted += action.kind == "submit"
        request_id = submitted if action.kind == "submit" else None
        items.append(
            Step(index + 1, action.describe(), action, entry, previous, request_id, marks(entry))
        )
        if entry is not None:
            previous = entry.snapshot
        if outcome.during == "step" and entry is outcome.entries[-1]:
            return items
    drained = [e for e in outcome.entries if e.action_index is None]
    if outcome.during != "drain":
        if drained:
            items.append(_drain_summary(len(drained), len(drained)))
        return items
    # The last few drain iterations are shown, and every one a violation names;
    # each run of others in between is one summary line.
    named = {v.iteration for v in outcome.violations}
    shown = [
        i >= len(drained) - drain_shown or e.snapshot.iteration in named
        for i, e in enumerate(drained)
    ]
    hidden = 0
    for number, (entry, show) in enumerate(zip(drained, shown, strict=True), start=1):
        if not show:
            hidden += 1
            previous = entry.snapshot
            continue
        if hidden:
            items.append(_drain_summary(hidden, len(drained)))
            hidden = 0
        text = f"drain {number}/{len(drained)}"
        items.append(Step(None, text, None, entry, previous, marks=marks(entry)))
        previous = entry.snapshot
    return items


def _drain_summary(hidden: int, total: int) -> str:
    return f"drain: {count(hidden, 'iteration')} of {total} with every check holding"


def subject_rows(v: Violation) -> tuple[str, ...]:
    """The rows a violation marks in every rendering: its subject's requests and adapters.

    What the subject says in brackets is context: "request 3 (adapter 1)" marks request 3.
    """
    return (
        *(f"request {rid}" for rid in v.subject.requests),
        *(f"adapter {task}" for task in v.subject.adapters),
    )


def violation_subjects(outcome: Outcome) -> dict[str, str]:
    """Rows the violations are about (``request 3``, ``adapter 7``), each with the first
    invariant that marks it."""
    marks: dict[str, str] = {}
    for v in outcome.violations:
        for row in subject_rows(v):
            marks.setdefault(row, v.invariant)
    return marks
