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
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import attrs
from rich.console import Console
from rich.text import Text

from peftlife import sut as sut_module
from peftlife.engine import EngineConfig
from peftlife.ledger import Call
from peftlife.machine import LifecycleFailure
from peftlife.snapshot import AdapterView, RequestView, Snapshot
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
    if isinstance(value, Call):
        return {
            "iteration": value.iteration,
            "caller": value.caller,
            "component": value.component,
            "method": value.method,
            "request_id": value.request_id,
            "args": {k: _plain(v) for k, v in value.args},
            "result": _plain(value.result),
            "detail": {k: _plain(v) for k, v in value.detail},
        }
    if attrs.has(type(value)):
        return {f.name: _plain(getattr(value, f.name)) for f in attrs.fields(type(value))}
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


def _owns(view: RequestView, adapters: dict[int, AdapterView]) -> str:
    if view.lora_task_id is None:
        return "-"
    adapter = adapters.get(view.lora_task_id)
    if adapter is None:
        return "none"
    if view.request_id in adapter.active:
        return "active"
    return "paused" if view.request_id in adapter.paused else "none"


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
        row["owns"] = _owns(v, adapters)
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


def _changed(old: dict[str, str] | None, new: dict[str, str]) -> Iterator[tuple[str, str, bool]]:
    """(field, shown value, changed?) with a change shown as ``old→new``."""
    for key, value in new.items():
        before = None if old is None else old.get(key)
        if before is not None and before != value:
            yield key, f"{before}→{value}", True
        else:
            yield key, value, old is None


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
class Step:
    label: str
    action: Action | None
    entry: Entry | None
    previous: Snapshot | None


def story(case: Case, outcome: Outcome, drain_shown: int = 3) -> list[Step | str]:
    """The numbered actions with their iterations; a long drain is elided."""
    by_action = {e.action_index: e for e in outcome.entries if e.action_index is not None}
    items: list[Step | str] = []
    previous: Snapshot | None = None
    for index, action in enumerate(case.actions):
        entry = by_action.get(index)
        items.append(Step(f"{index + 1:>3} {action.describe()}", action, entry, previous))
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
                items.append(Step(f"    drain {number}/{len(drained)}", None, entry, previous))
                previous = entry.snapshot
    return items


def violation_subjects(outcome: Outcome) -> dict[str, str]:
    """Rows a violation is about (``request 3``, ``adapter 7``), with its invariant."""
    marks: dict[str, str] = {}
    for v in outcome.violations:
        for kind, number in re.findall(r"(request|adapter) (\d+)", v.subject):
            marks.setdefault(f"{kind} {number}", v.invariant)
    return marks


def _ended(s: Snapshot) -> list[str]:
    return [f"request {rid} {outcome}" for rid, outcome in s.ended]


# ---- terminal ----


def render_terminal(case: Case, outcome: Outcome, console: Console) -> None:
    """Print the story; colours only on a terminal, none with NO_COLOR."""

    def say(text: str, style: str = "") -> None:
        console.print(Text(text, style=style), soft_wrap=True)

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
    next_id = 1
    last = outcome.entries[-1] if outcome.entries else None
    for item in story(case, outcome):
        if isinstance(item, str):
            say(f"    … {item}", "dim")
            continue
        line = Text(item.label, style="bold")
        if item.action is not None and item.action.kind == "submit":
            line.append(f"  → request {next_id}", style="cyan")
            next_id += 1
        if item.entry is not None:
            line.append(f"  → iteration {item.entry.snapshot.iteration}", style="cyan")
        console.print(line, soft_wrap=True)
        if item.entry is not None:
            marks = violation_subjects(outcome) if item.entry is last else {}
            _print_iteration(console, item.entry.snapshot, item.previous, marks)
    say("")
    for v in outcome.violations:
        say(f"✗ {v.invariant}: {v.subject} at iteration {v.iteration}", "bold red")
        say(f"    expected  {v.expected}")
        say(f"    found     {v.found}", "red")


def _print_iteration(
    console: Console, s: Snapshot, previous: Snapshot | None, marks: dict[str, str]
) -> None:
    console.print(Text(f"      scheduler output: {output_line(s)}"), soft_wrap=True)
    old_requests = request_fields(previous) if previous else {}
    for rid, fields in request_fields(s).items():
        _print_row(console, f"request {rid}", old_requests.get(rid), fields, marks)
    for text in _ended(s):
        console.print(Text(f"      {text}", style="cyan"))
    old_adapters = adapter_fields(previous) if previous else {}
    for task, fields in adapter_fields(s).items():
        _print_row(console, f"adapter {task}", old_adapters.get(task), fields, marks)
    kv_calls, peft_calls = scheduler_kv_calls(s), scheduler_calls(s)
    if kv_calls:
        console.print(Text(f"      scheduler KV calls: {'; '.join(kv_calls)}"), soft_wrap=True)
    if peft_calls or (kv_calls and s.adapters):
        # A KV move without its PEFT move is often the defect itself: say "none".
        shown = "; ".join(peft_calls) or "none"
        console.print(Text(f"      scheduler PEFT calls: {shown}"), soft_wrap=True)
    for err in s.step.errors if s.step else ():
        console.print(Text(f"      engine: {err.message}", style="red"), soft_wrap=True)


def _print_row(
    console: Console,
    name: str,
    old: dict[str, str] | None,
    new: dict[str, str],
    marks: dict[str, str],
) -> None:
    row = Text(f"      {name:<11}")
    if old == new and name not in marks:
        row.append(" unchanged", style="dim")
    else:
        for key, value, changed in _changed(old, new):
            row.append(f" {key} ")
            row.append(value, style="bold yellow" if changed and old is not None else "")
    if name in marks:
        row.append(f"  ← {marks[name]}", style="bold red")
    console.print(row, soft_wrap=True)


def terminal_text(case: Case, outcome: Outcome, width: int = 110) -> str:
    """The terminal rendering as plain text (what a log or a golden test sees)."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    render_terminal(case, outcome, console)
    return buffer.getvalue()


# ---- Markdown ----


def _changes(s: Snapshot, previous: Snapshot | None, marks: dict[str, str]) -> list[str]:
    """What an iteration changed, as short phrases; violation subjects in full."""
    phrases = [f"output {output_line(s)}"]
    old_requests = request_fields(previous) if previous else {}
    for rid, fields in request_fields(s).items():
        diffs = [f"{k} {v}" for k, v, changed in _changed(old_requests.get(rid), fields) if changed]
        if rid not in old_requests or f"request {rid}" in marks:
            diffs = [f"{k} {v}" for k, v, _ in _changed(old_requests.get(rid), fields)]
        if diffs:
            mark = f" ← **{marks[f'request {rid}']}**" if f"request {rid}" in marks else ""
            phrases.append(f"request {rid}: " + ", ".join(diffs) + mark)
    phrases += _ended(s)
    old_adapters = adapter_fields(previous) if previous else {}
    for task, fields in adapter_fields(s).items():
        old = old_adapters.get(task)
        subject = f"adapter {task}" in marks
        diffs = [f"{k} {v}" for k, v, changed in _changed(old, fields) if changed or subject]
        if diffs:
            mark = f" ← **{marks[f'adapter {task}']}**" if subject else ""
            phrases.append(f"adapter {task}: " + ", ".join(diffs) + mark)
    kv_calls, peft_calls = scheduler_kv_calls(s), scheduler_calls(s)
    if kv_calls:
        phrases.append("scheduler KV calls " + "; ".join(kv_calls))
    if peft_calls or (kv_calls and s.adapters):
        phrases.append("scheduler PEFT calls " + ("; ".join(peft_calls) or "none"))
    phrases += [f"engine: {e.message}" for e in (s.step.errors if s.step else ())]
    return phrases


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
    next_id = 1
    last = outcome.entries[-1] if outcome.entries else None
    for item in story(case, outcome):
        if isinstance(item, str):
            lines.append(f"| | … | {item} |")
            continue
        number, _, label = item.label.strip().partition(" ")
        if item.action is None:
            number, label = "", item.label.strip()
        if item.action is not None and item.action.kind == "submit":
            happened = f"request {next_id} arrives"
            next_id += 1
        elif item.entry is not None:
            marks = violation_subjects(outcome) if item.entry is last else {}
            happened = f"**iteration {item.entry.snapshot.iteration}**: " + "; ".join(
                _changes(item.entry.snapshot, item.previous, marks)
            )
        else:
            happened = "takes effect at the next iteration"
        lines.append(f"| {number} | `{label}` | {happened.replace('|', '/')} |")
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
