"""Counterexample reports: a shrunk failure a person reads in a minute and replays forever.

A ``Case`` is everything needed to replay a finding (SUT, scenario, seed, the
world's configuration and the actions); ``replay`` runs it through the engine
with no search and returns an ``Outcome`` (a snapshot per iteration and the
violations). From a case and its outcome this module renders:

* the terminal story (rich): numbered steps, each iteration's requests and
  adapters with what changed shown as ``old→new``, the scheduler's PEFT
  calls, and the violation as expected against found;
* JSON with a ``schema_version``, which ``Case.from_json`` reads back;
* Markdown for a CI summary or a pull-request comment;
* a standalone regression test that replays the case and asserts the invariants.
"""

from __future__ import annotations

import enum
import io
import json
import pprint
import re
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import attrs
from rich.console import Console
from rich.text import Text

from peftlife import sut as sut_module
from peftlife.engine import EngineConfig
from peftlife.invariants import owned
from peftlife.ledger import Call
from peftlife.machine import LifecycleFailure
from peftlife.snapshot import Snapshot
from peftlife.trace import Action, Entry, Outcome, checked_replay

__all__ = ["Case", "Entry", "Outcome", "ReportError", "replay"]

SCHEMA_VERSION = 1


class ReportError(ValueError):
    """A report file that cannot be read; the message says how to fix it."""


# ---- the case and its replay ----


@attrs.frozen
class Case:
    """A finding, reduced to what a replay needs."""

    sut: str
    scenario: str
    config: EngineConfig
    actions: tuple[Action, ...]
    seed: int | None = None
    profile: str = ""

    @classmethod
    def from_failure(
        cls, failure: LifecycleFailure, *, seed: int | None = None, profile: str = ""
    ) -> Case:
        run = failure.run
        return cls(run.sut, run.scenario, run.config, run.actions, seed, profile)

    @classmethod
    def from_json(cls, data: Any) -> Case:
        """Read a case back from a report's JSON (a dict)."""
        if not isinstance(data, dict):
            raise ReportError("a peftlife report is a JSON object; this file holds something else")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ReportError(
                f"report schema_version is {version!r}; this peftlife reads version "
                f"{SCHEMA_VERSION}: regenerate the report with this version"
            )
        try:
            config = dict(data["config"])
            config["adapter_pages"] = tuple(tuple(pair) for pair in config["adapter_pages"])
            return cls(
                sut=data["sut"],
                scenario=data["scenario"],
                config=EngineConfig(**config),
                actions=tuple(Action.from_json(a) for a in data["actions"]),
                seed=data.get("seed"),
                profile=data.get("profile", ""),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ReportError(f"the report is missing or has a malformed field: {err}") from err


def replay(case: Case, sut: str | None = None) -> Outcome:
    """Replay a case against its SUT (or another one), as the machine ran it.

    Every iteration is checked; if all hold, the world is drained (invariant 12).
    """
    return checked_replay(case.config, case.actions, sut_module.load(sut or case.sut))


# ---- JSON ----


def _plain(value: Any) -> Any:
    """A snapshot part as JSON-ready data."""
    if attrs.has(type(value)):
        plain = {f.name: _plain(getattr(value, f.name)) for f in attrs.fields(type(value))}
        if isinstance(value, Call):  # its (key, value) pairs read better as objects
            plain |= {"args": dict(plain["args"]), "detail": dict(plain["detail"])}
        return plain
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, frozenset | set):
        return sorted(_plain(v) for v in value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def to_json(case: Case, outcome: Outcome) -> dict[str, Any]:
    """The report as a JSON object; ``Case.from_json`` reads it back."""
    return {
        "schema_version": SCHEMA_VERSION,
        "sut": case.sut,
        "scenario": case.scenario,
        "seed": case.seed,
        "profile": case.profile,
        "config": _plain(case.config),
        "actions": [a.to_json() for a in case.actions],
        "during": outcome.during,
        "violation": _plain(outcome.violations[0]) if outcome.violations else None,
        "violations": _plain(outcome.violations),
        "steps": [
            {
                "action_index": e.action_index,
                "drain": e.action_index is None,
                "snapshot": _plain(e.snapshot),
            }
            for e in outcome.entries
        ],
    }


def load_json(path: Path) -> Case:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ReportError(f"cannot read report {str(path)!r}: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise ReportError(f"{str(path)!r} is not UTF-8 text; give a peftlife report") from err
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ReportError(f"{str(path)!r} is not JSON ({err}); give a peftlife report") from err
    return Case.from_json(data)


# ---- the story both renderings tell ----


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def world_lines(config: EngineConfig) -> list[str]:
    """The configuration in three short lines a scheduler engineer reads at a glance."""
    tier = f"{_count(config.host_pages, 'host page')}" if config.host_pages else "no lower tier"
    draft = (
        "no draft pool"
        if config.draft_device_pages is None
        else f"draft pool {_count(config.draft_device_pages, 'page')}"
    )
    adapters = ", ".join(f"adapter {t} = {_count(p, 'page')}" for t, p in config.adapter_pages)
    chunking = f"chunks of {config.chunk_unit_size}" if config.enable_chunked_context else "off"
    return [
        f"KV: {_count(config.device_pages, 'page')} x {config.tokens_per_block} tokens, "
        f"{tier}, {draft}",
        f"LoRA: device cache {_count(config.lora_device_pages, 'page')}, host cache "
        f"{_count(config.lora_host_pages, 'page')}; {adapters or 'no adapters'}",
        f"scheduler: budget {_count(config.max_num_tokens, 'token')} / "
        f"{_count(config.max_batch_size, 'request')}, chunking {chunking}, recompute pause "
        f"{'on' if config.enable_recompute_pause else 'off'}",
    ]


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
    calls = []
    for c in s.step.calls if s.step else ():
        if c.caller == "scheduler" and c.component == "peft":
            pause = c.get("pause")
            arg = "" if pause is None else f", pause={pause}"
            result = "" if c.result in (None, "ok") else f" → {c.result}"
            calls.append(f"{c.method}({c.request_id}{arg}){result}")
    return calls


_WHY = {
    "failed_grow": "injected grow failure",
    "refused_resume": "injected resume refusal",
    "no_device_room": "no device room",
}


def scheduler_kv_calls(s: Snapshot) -> list[str]:
    """The scheduler's KV moves that explain an iteration: failures, suspends, frees."""
    calls = []
    for c in s.step.calls if s.step else ():
        if c.caller != "scheduler" or c.component == "peft":
            continue
        failed = c.result is False
        if failed or c.method in ("suspend_request", "free_resources"):
            pool = "" if c.component == "target" else f"{c.component} "
            why = f" → failed ({_WHY.get(str(c.get('fault')), 'no room')})" if failed else ""
            calls.append(f"{pool}{c.method}({c.request_id}){why}")
    return calls


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
    ended: tuple[str, ...]
    adapters: tuple[Row, ...]
    calls: tuple[tuple[str, str], ...]  # ("KV" or "PEFT", the calls as text)
    errors: tuple[str, ...]


def iteration(s: Snapshot, previous: Snapshot | None, marks: dict[str, str]) -> Iteration:
    old_requests = request_fields(previous) if previous else {}
    old_adapters = adapter_fields(previous) if previous else {}
    kv_calls, peft_calls = scheduler_kv_calls(s), scheduler_calls(s)
    calls = [("KV", "; ".join(kv_calls))] if kv_calls else []
    if peft_calls or (kv_calls and s.adapters):
        # A KV move without its PEFT move is often the defect itself: say "none".
        calls.append(("PEFT", "; ".join(peft_calls) or "none"))
    return Iteration(
        output=output_line(s),
        requests=tuple(
            _row(f"request {rid}", old_requests.get(rid), fields, marks)
            for rid, fields in request_fields(s).items()
        ),
        ended=tuple(f"request {rid} {outcome}" for rid, outcome in s.ended),
        adapters=tuple(
            _row(f"adapter {task}", old_adapters.get(task), fields, marks)
            for task, fields in adapter_fields(s).items()
        ),
        calls=tuple(calls),
        errors=tuple(e.message for e in (s.step.errors if s.step else ())),
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
    if drained:
        hidden = len(drained) - drain_shown if outcome.during == "drain" else len(drained)
        if hidden > 0:
            items.append(
                f"drain: {_count(hidden, 'iteration')} of {len(drained)} with every check holding"
            )
            previous = drained[hidden - 1].snapshot
        if outcome.during == "drain":
            for number, entry in enumerate(drained[max(hidden, 0) :], start=max(hidden, 0) + 1):
                text = f"drain {number}/{len(drained)}"
                items.append(Step(None, text, None, entry, previous, marks=marks(entry)))
                previous = entry.snapshot
    return items


def violation_subjects(outcome: Outcome) -> dict[str, str]:
    """Rows a violation is about (``request 3``, ``adapter 7``), with its invariant."""
    marks: dict[str, str] = {}
    for v in outcome.violations:
        for kind, number in re.findall(r"(request|adapter) (\d+)", v.subject):
            marks.setdefault(f"{kind} {number}", v.invariant)
    return marks


# ---- terminal ----


def render_terminal(case: Case, outcome: Outcome, console: Console) -> None:
    """Print the story; colours only on a terminal, none with NO_COLOR."""

    def say(text: str | Text, style: str = "") -> None:
        console.print(Text(text, style=style) if isinstance(text, str) else text, soft_wrap=True)

    if outcome.violations:
        say(f"peftlife counterexample: {outcome.violations[0].invariant}", "bold red")
    else:
        say("peftlife replay: every invariant held", "bold green")
    seed = "derandomized" if case.seed is None else str(case.seed)
    profile = f" ({case.profile} profile)" if case.profile else ""
    say(f"SUT {case.sut} · scenario {case.scenario} · seed {seed}{profile}")
    for world in world_lines(case.config):
        say(f"  {world}", "dim")
    say("")
    for item in story(case, outcome):
        if isinstance(item, str):
            say(f"    … {item}", "dim")
            continue
        line = Text(item.label, style="bold")
        if item.request_id is not None:
            line.append(f"  → request {item.request_id}", style="cyan")
        if item.entry is not None:
            line.append(f"  → iteration {item.entry.snapshot.iteration}", style="cyan")
        say(line)
        if (view := item.view()) is not None:
            _print_iteration(say, view)
    say("")
    for v in outcome.violations:
        say(f"✗ {v.invariant}: {v.subject} at iteration {v.iteration}", "bold red")
        say(f"    expected  {v.expected}")
        say(f"    found     {v.found}", "red")


def _print_iteration(say: Callable[..., None], view: Iteration) -> None:
    say(f"      scheduler output: {view.output}")
    for row in view.requests:
        say(_row_text(row))
    for text in view.ended:
        say(f"      {text}", "cyan")
    for row in view.adapters:
        say(_row_text(row))
    for what, calls in view.calls:
        say(f"      scheduler {what} calls: {calls}")
    for message in view.errors:
        say(f"      engine: {message}", "red")


def _row_text(row: Row) -> Text:
    text = Text(f"      {row.name:<11}")
    if row.unchanged:
        text.append(" unchanged", style="dim")
    else:
        for key, value, changed in row.cells:
            text.append(f" {key} ")
            text.append(value, style="bold yellow" if changed else "")
    if row.mark is not None:
        text.append(f"  ← {row.mark}", style="bold red")
    return text


def terminal_text(case: Case, outcome: Outcome, width: int = 110) -> str:
    """The terminal rendering as plain text (what a log or a golden test sees)."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    render_terminal(case, outcome, console)
    return buffer.getvalue()


# ---- Markdown ----


def _phrases(view: Iteration) -> list[str]:
    """An iteration as short phrases: what changed, and violation subjects in full."""
    phrases = [f"output {view.output}"]
    phrases += [p for row in view.requests if (p := _row_phrase(row))]
    phrases += view.ended
    phrases += [p for row in view.adapters if (p := _row_phrase(row))]
    phrases += [f"scheduler {what} calls {calls}" for what, calls in view.calls]
    phrases += [f"engine: {message}" for message in view.errors]
    return phrases


def _row_phrase(row: Row) -> str:
    """The fields that changed, or all of them for a new row or a violation subject."""
    full = row.new or row.mark is not None
    cells = [f"{key} {value}" for key, value, changed in row.cells if changed or full]
    if not cells:
        return ""
    return f"{row.name}: " + ", ".join(cells) + (f" ← **{row.mark}**" if row.mark else "")


def render_markdown(case: Case, outcome: Outcome, files: dict[str, str] | None = None) -> str:
    """A short Markdown story for a CI summary or a pull-request comment."""
    lines = []
    if outcome.violations:
        lines.append(f"### peftlife: `{outcome.violations[0].invariant}` violated")
    else:
        lines.append("### peftlife replay: every invariant held")
    seed = "derandomized" if case.seed is None else f"`{case.seed}`"
    lines += [
        "",
        f"- **SUT** `{case.sut}` · **scenario** `{case.scenario}` · **seed** {seed}"
        + (f" · **profile** `{case.profile}`" if case.profile else ""),
        *(f"- {line}" for line in world_lines(case.config)),
        f"- **shrunk to** {_count(len(case.actions), 'action')}, "
        f"{_count(len(outcome.entries), 'iteration')}",
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


# ---- the regression test ----

_TEST_TEMPLATE = '''"""Regression test kept from a peftlife counterexample.

{headline}

It replays the exact steps through the engine, with no search, and checks every
invariant after every iteration, then the drain. It fails while the defect is
there and passes once it is fixed. Replay it against another scheduler with
``pytest --peftlife-sut SPEC``.
"""

from peftlife.report import Case, replay

CASE = {case}


def test_{name}(peftlife_sut: str | None) -> None:
    outcome = replay(Case.from_json(CASE), sut=peftlife_sut)
    assert outcome.held, "\\n".join(str(v) for v in outcome.violations)
'''


def case_name(case: Case, outcome: Outcome) -> str:
    """A file-system and Python friendly name for this case."""
    invariant = outcome.violations[0].invariant if outcome.violations else "held"
    raw = f"{case.sut}_{case.scenario}_{invariant}"
    return re.sub(r"[^0-9a-zA-Z]+", "_", raw).strip("_").lower()


def render_regression_test(case: Case, outcome: Outcome) -> str:
    data = to_json(case, outcome)
    kept = {k: data[k] for k in ("schema_version", "sut", "scenario", "seed", "profile")}
    kept |= {"config": data["config"], "actions": data["actions"]}
    headline = (
        f"{outcome.violations[0]}" if outcome.violations else "Every invariant held."
    ).replace('"""', "'''")
    return _TEST_TEMPLATE.format(
        headline=headline,
        case=pprint.pformat(kept, width=96, sort_dicts=False),
        name=case_name(case, outcome),
    )


# ---- writing all of them ----


def write(case: Case, outcome: Outcome, directory: Path) -> dict[str, Path]:
    """Write the JSON, the Markdown and the regression test; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    name = case_name(case, outcome)
    paths = {
        "json": directory / f"{name}.json",
        "markdown": directory / f"{name}.md",
        "test": directory / f"test_peftlife_{name}.py",
    }
    paths["json"].write_text(json.dumps(to_json(case, outcome), indent=1) + "\n", "utf-8")
    files = {
        "replay": f"peftlife replay {paths['json'].name}",
        "regression test": paths["test"].name,
    }
    paths["markdown"].write_text(render_markdown(case, outcome, files), "utf-8")
    paths["test"].write_text(render_regression_test(case, outcome), "utf-8")
    return paths


def print_report(case: Case, outcome: Outcome, file: IO[str] | None = None) -> None:
    """The terminal story on a console of its own (stdout by default)."""
    render_terminal(case, outcome, Console(file=file, highlight=False))
