"""Counterexample reports: the story, the JSON, the Markdown and the regression test.

The cases (tests/report_cases.py) are built by hand (no search), so every
rendering is fixed and the golden files in ``tests/golden`` pin it. After an intended change to the
renderings, regenerate them and read the diff::

    PEFTLIFE_REGEN_GOLDEN=1 .venv/bin/pytest tests/reports/test_report.py
"""

from __future__ import annotations

import ast
import copy
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from rich.console import Console
from tests.report_cases import CASE, DRAIN_CASE, GOLDEN, OVERLAP_CASE, REGEN, SUBMIT

from peftlife import reports as report
from peftlife.reports import Case, Outcome, ReportError, Step
from peftlife.search.trace import Action
from peftlife.world.config import EngineConfig


@pytest.fixture(scope="module")
def outcome() -> Outcome:
    return report.replay(CASE)


@pytest.fixture(scope="module")
def overlap_outcome() -> Outcome:
    return report.replay(OVERLAP_CASE)


@pytest.fixture(scope="module")
def drain_outcome() -> Outcome:
    return report.replay(DRAIN_CASE)


def check_golden(name: str, text: str) -> None:
    # Trailing spaces carry nothing and editors strip them: compare without them.
    text = "".join(line.rstrip() + "\n" for line in text.splitlines())
    path = GOLDEN / name
    if REGEN:
        assert text.strip(), f"refusing to write an empty {name}"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (
        f"{name} changed; if that is intended, regenerate with PEFTLIFE_REGEN_GOLDEN=1"
    )


# ---- the fixed case ----


def test_fixed_case_fails_where_the_defect_is(outcome: Outcome) -> None:
    assert not outcome.held
    assert outcome.during == "step"
    (violation,) = outcome.violations
    assert violation.invariant == "ownership_follows_residency"
    assert violation.iteration == 2
    assert str(violation.subject) == "request 1 (adapter 1)"
    # Two steps, two iterations: the replay stopped at the violation, no drain.
    assert [e.action_index for e in outcome.entries] == [1, 3]
    assert [e.snapshot.iteration for e in outcome.entries] == [1, 2]


def test_drain_case_fails_only_in_the_drain(drain_outcome: Outcome) -> None:
    assert drain_outcome.during == "drain"
    (violation,) = drain_outcome.violations
    assert violation.invariant == "drain_completes"
    assert str(violation.subject) == "requests [1]"
    stepped = [e for e in drain_outcome.entries if e.action_index is not None]
    drained = [e for e in drain_outcome.entries if e.action_index is None]
    assert len(stepped) == 1
    assert len(drained) > 3  # long enough to be elided


# ---- golden renderings ----


def test_terminal_golden(outcome: Outcome) -> None:
    check_golden("terminal.txt", report.terminal_text(CASE, outcome, width=110))


def test_markdown_golden(outcome: Outcome) -> None:
    check_golden("report.md", report.render_markdown(CASE, outcome))


def test_terminal_golden_of_a_drain_failure(drain_outcome: Outcome) -> None:
    check_golden("terminal-drain.txt", report.terminal_text(DRAIN_CASE, drain_outcome, width=110))


def test_markdown_golden_of_a_drain_failure(drain_outcome: Outcome) -> None:
    check_golden("report-drain.md", report.render_markdown(DRAIN_CASE, drain_outcome))


def test_terminal_golden_of_an_overlap_case(overlap_outcome: Outcome) -> None:
    check_golden(
        "terminal-overlap.txt", report.terminal_text(OVERLAP_CASE, overlap_outcome, width=110)
    )


def test_markdown_golden_of_an_overlap_case(overlap_outcome: Outcome) -> None:
    check_golden("report-overlap.md", report.render_markdown(OVERLAP_CASE, overlap_outcome))


# ---- the overlap executor in the story ----


def test_the_overlap_case_fails_where_the_defect_is(overlap_outcome: Outcome) -> None:
    assert overlap_outcome.during == "step"
    assert overlap_outcome.violations[0].invariant == "no_scheduler_caused_fault"
    steps = [e.snapshot.step.overlap for e in overlap_outcome.entries if e.snapshot.step]
    assert len(steps) == len(overlap_outcome.entries)
    assert all(s is not None for s in steps)
    # What the case is built to show: a held batch, an end-of-sequence, a retiring request.
    assert [s.held for s in steps if s] == [False, False, True, False, False, False]
    assert [s.eos for s in steps if s][2] == (1,)
    assert [s.retiring for s in steps if s][-1] == (2,)


def test_each_overlap_iteration_says_what_is_in_flight(overlap_outcome: Outcome) -> None:
    lines = [
        view.in_flight
        for item in report.story(OVERLAP_CASE, overlap_outcome)
        if isinstance(item, Step) and (view := item.view()) is not None
    ]
    assert lines == [
        "in flight: none read back; [1] launched",
        "in flight: [1] read back; [1] launched",
        "in flight: [1] read back; batch held, none launched; end-of-sequence [1]",
        "in flight: none read back; [2] launched",
        "in flight: [2] read back; [2] launched",
        "in flight: [2] read back; none launched; retiring [2]",
    ]
    text = report.terminal_text(OVERLAP_CASE, overlap_outcome, width=110)
    markdown = report.render_markdown(OVERLAP_CASE, overlap_outcome)
    for line in lines:
        assert f"      {line}\n" in text
        assert f"; {line};" in markdown


def test_a_simple_loop_story_has_no_in_flight_line(outcome: Outcome) -> None:
    views = [i.view() for i in report.story(CASE, outcome) if isinstance(i, Step)]
    assert all(v.in_flight is None for v in views if v is not None)
    assert len(report.world_lines(CASE.config)) == 3


def test_the_empty_mode_report_says_once_that_the_in_flight_pin_is_not_checked(
    overlap_outcome: Outcome,
) -> None:
    note = "in_flight_pin (14) not checked"
    assert report.world_lines(OVERLAP_CASE.config)[-1].endswith(note)
    for text in (
        report.terminal_text(OVERLAP_CASE, overlap_outcome, width=110),
        report.render_markdown(OVERLAP_CASE, overlap_outcome),
        report.render_html(OVERLAP_CASE, overlap_outcome),
    ):
        assert text.count(note) == 1
    told = attrs.evolve(OVERLAP_CASE.config, inflight_ids="batch")
    assert report.world_lines(told)[-1].endswith("the scheduler is told batch N")
    assert not any("not checked" in line for line in report.world_lines(told))


def test_terminal_text_is_what_render_terminal_prints(outcome: Outcome) -> None:
    # terminal_text is documented as "the terminal rendering as plain text".
    printed = io.StringIO()
    console = Console(file=printed, width=110, color_system=None, force_terminal=False)
    report.render_terminal(CASE, outcome, console)
    assert printed.getvalue().strip()
    assert report.terminal_text(CASE, outcome, width=110) == printed.getvalue()


def test_markdown_tells_the_story(outcome: Outcome) -> None:
    # What the golden file must keep saying, whatever the layout.
    md = report.render_markdown(CASE, outcome)
    assert md.startswith("### peftlife: `ownership_follows_residency` violated\n")
    assert "`mutant:no_release_on_suspend`" in md
    for number, action in enumerate(CASE.actions, start=1):
        assert f"| {number} | `{action.describe()}` |" in md
    assert "**iteration 1**" in md
    assert "**iteration 2**" in md
    assert "target ACTIVE→SUSPENDED" in md  # the change since the previous iteration
    assert "try_allocate_generation(1) → failed" in md  # the scheduler's KV call
    assert "suspend_request(1)" in md
    assert "- expected: paused (started, KV suspended)" in md
    assert "- found: active" in md


def test_markdown_lists_the_report_files(outcome: Outcome) -> None:
    md = report.render_markdown(CASE, outcome, {"replay": "peftlife replay x.json"})
    assert md.rstrip().endswith("replay: `peftlife replay x.json`")


# ---- the story and its drain elision ----


def test_story_elides_a_long_drain(drain_outcome: Outcome) -> None:
    items = report.story(DRAIN_CASE, drain_outcome)
    drained = [e for e in drain_outcome.entries if e.action_index is None]
    hidden = len(drained) - 3
    assert [type(i) for i in items] == [Step, Step, str, Step, Step, Step]
    assert items[2] == f"drain: {hidden} iterations of {len(drained)} with every check holding"
    shown = [i for i in items[3:] if isinstance(i, Step)]
    assert [s.entry for s in shown] == drained[hidden:]
    assert all(s.action is None for s in shown)
    # Drain steps are labelled as drain iterations, not as numbered actions.
    total = len(drained)
    assert [s.label.strip() for s in shown] == [
        f"drain {n}/{total}" for n in range(hidden + 1, total + 1)
    ]
    # The first shown drain step is compared with the last elided one.
    assert shown[0].previous is drained[hidden - 1].snapshot
    assert shown[1].previous is shown[0].entry.snapshot


def test_story_shows_as_much_drain_as_asked(drain_outcome: Outcome) -> None:
    items = report.story(DRAIN_CASE, drain_outcome, drain_shown=1)
    drained = [e for e in drain_outcome.entries if e.action_index is None]
    assert (
        items[2]
        == f"drain: {len(drained) - 1} iterations of {len(drained)} with every check holding"
    )
    assert len(items) == 4
    assert isinstance(items[3], Step)
    assert items[3].entry is drain_outcome.entries[-1]


def test_story_of_a_short_drain_elides_nothing() -> None:
    case = attrs.evolve(DRAIN_CASE, sut="tests.bad_schedulers:StatelessNeverSchedules")
    outcome = report.replay(case)
    assert outcome.during == "drain"
    # A pass that schedules nobody is a stalled pass: upstream's executor stops on it.
    assert "V2 scheduler deadlock" in outcome.violations[0].found
    items = report.story(case, outcome)
    assert all(isinstance(i, Step) for i in items)
    assert len(items) == len(case.actions) + len(outcome.entries) - 1


def test_story_of_a_step_failure_stops_at_the_violation(outcome: Outcome) -> None:
    case = attrs.evolve(CASE, actions=(*CASE.actions, Action("step"), Action("step")))
    longer = report.replay(case)
    assert longer.violations == outcome.violations
    items = report.story(case, longer)
    assert all(isinstance(i, Step) for i in items)
    assert [i.label.split()[0] for i in items if isinstance(i, Step)] == ["1", "2", "3", "4"]


def test_story_of_a_held_replay_elides_the_whole_drain() -> None:
    held = report.replay(CASE, sut="reference")
    drained = [e for e in held.entries if e.action_index is None]
    items = report.story(CASE, held)
    word = "iteration" if len(drained) == 1 else "iterations"
    assert items[-1] == f"drain: {len(drained)} {word} of {len(drained)} with every check holding"
    assert len(items) == len(CASE.actions) + 1


def test_a_violation_marks_only_its_subject(outcome: Outcome) -> None:
    # The subject is "request 1 (adapter 1)": request 1's row, not adapter 1's.
    assert report.violation_subjects(outcome) == {"request 1": "ownership_follows_residency"}
    text = report.terminal_text(CASE, outcome)
    marked = [line for line in text.splitlines() if "← ownership_follows_residency" in line]
    assert len(marked) == 1
    assert marked[0].lstrip().startswith("request 1")


def test_every_call_of_an_iteration_is_shown(outcome: Outcome) -> None:
    """Successful calls too: each ledger call of the scheduler and the executor, in order."""
    for item in report.story(CASE, outcome):
        if not isinstance(item, Step) or item.entry is None:
            continue
        step = item.entry.snapshot.step
        assert step is not None
        view = item.view()
        assert view is not None
        shown = " ; ".join(calls for _, calls in view.calls)
        for call in step.calls:
            if call.method == "ensure_batch" and not call.args.tasks:
                continue  # a LoRA load of an empty batch does nothing
            assert f"{call.method}(" in shown, (call, shown)
    first = report.story(CASE, outcome)[1]
    assert isinstance(first, Step)
    view = first.view()
    assert view is not None
    assert dict(view.calls)["scheduler KV"] == "prepare_context(1); resize_context(1)"


def test_a_long_drain_keeps_the_iterations_a_violation_names(drain_outcome: Outcome) -> None:
    drained = [e for e in drain_outcome.entries if e.action_index is None]
    middle = drained[len(drained) // 2].snapshot.iteration
    named = attrs.evolve(drain_outcome.violations[0], iteration=middle)
    outcome = attrs.evolve(drain_outcome, violations=(named,))
    items = report.story(DRAIN_CASE, outcome)
    shown = [i.entry.snapshot.iteration for i in items if isinstance(i, Step) and i.entry]
    assert middle in shown
    summaries = [i for i in items if isinstance(i, str)]
    assert len(summaries) == 2  # before and after the named iteration
    hidden = sum(int(text.split()[1]) for text in summaries)
    assert hidden == len(drained) - 3 - 1


# ---- colour: on a terminal, never with NO_COLOR, never off a terminal ----

_SGR = re.compile(r"\x1b\[([0-9;]*)m")


def colour_codes(text: str) -> list[str]:
    """The colour parameters of the SGR sequences in ``text`` (bold and reset are not colour)."""
    found = []
    for params in _SGR.findall(text):
        for p in params.split(";"):
            if p.isdigit() and (30 <= int(p) <= 49 or 90 <= int(p) <= 107):
                found.append(p)
    return found


def rendered(outcome: Outcome, **console: Any) -> str:
    out = io.StringIO()
    report.render_terminal(CASE, outcome, Console(file=out, width=110, **console))
    return out.getvalue()


@pytest.fixture
def plain_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLORTERM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    return monkeypatch


def test_a_terminal_gets_colour(outcome: Outcome, plain_env: pytest.MonkeyPatch) -> None:
    text = rendered(outcome, force_terminal=True, color_system="standard")
    assert "\x1b[" in text
    assert "31" in colour_codes(text)  # the violation in red
    # Same story underneath the escapes.
    assert _SGR.sub("", text) == rendered(outcome, force_terminal=False)


@pytest.mark.parametrize("color_system", ["auto", "standard"])
def test_no_color_means_no_colour(
    outcome: Outcome, plain_env: pytest.MonkeyPatch, color_system: Any
) -> None:
    assert colour_codes(rendered(outcome, force_terminal=True, color_system=color_system))
    plain_env.setenv("NO_COLOR", "1")
    text = rendered(outcome, force_terminal=True, color_system=color_system)
    assert colour_codes(text) == []
    assert "ownership_follows_residency" in text


def test_not_a_terminal_is_plain_text(outcome: Outcome, plain_env: pytest.MonkeyPatch) -> None:
    text = rendered(outcome, force_terminal=False)
    assert "\x1b" not in text
    assert "✗ ownership_follows_residency" in text


def test_print_report_to_a_file_is_plain(outcome: Outcome, plain_env: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    report.print_report(CASE, outcome, file=out)
    assert "\x1b" not in out.getvalue()
    assert "expected  paused (started, KV suspended)" in out.getvalue()


# ---- JSON ----


def test_json_holds_everything_a_replay_needs(outcome: Outcome) -> None:
    data = report.to_json(CASE, outcome)
    assert data["schema_version"] == 1 == report.SCHEMA_VERSION
    assert data["sut"] == "mutant:no_release_on_suspend"
    assert data["scenario"] == "default"
    assert data["seed"] is None
    assert data["profile"] == "ci"
    assert data["config"]["device_pages"] == 8
    assert data["config"]["adapter_pages"] == [[1, 1]]
    assert data["actions"][0] == {
        "kind": "submit",
        "lora_task_id": 1,
        "lora_weights": True,
        "prompt_len": 1,
        "max_new_tokens": 2,
    }
    assert [a["kind"] for a in data["actions"]] == ["submit", "step", "fail_grow", "step"]
    assert data["during"] == "step"
    assert data["violation"] == {
        "invariant": "ownership_follows_residency",
        "subject": "request 1 (adapter 1)",
        "expected": "paused (started, KV suspended)",
        "found": "active",
        "iteration": 2,
        # The rows it marks: the subject's request, not its adapter (context in brackets).
        "requests": [1],
        "adapters": [],
    }
    assert data["violations"] == [data["violation"]]


def test_json_steps_carry_snapshots_and_calls(outcome: Outcome) -> None:
    steps = report.to_json(CASE, outcome)["steps"]
    assert [(s["action_index"], s["drain"]) for s in steps] == [(1, False), (3, False)]
    last = steps[-1]["snapshot"]
    assert last["iteration"] == 2
    (request,) = last["requests"]
    assert request["state"] == "GENERATION_IN_PROGRESS"
    assert request["target"]["residency"] == "SUSPENDED"
    (adapter,) = last["adapters"]
    assert adapter["active"] == [1]
    assert adapter["paused"] == []
    calls = [(c["caller"], c["component"], c["method"]) for c in last["step"]["calls"]]
    assert ("scheduler", "target", "suspend_request") in calls
    failed = [c for c in last["step"]["calls"] if c["method"] == "try_allocate_generation"]
    assert failed
    assert failed[0]["result"] is False
    assert failed[0]["request_id"] == 1


def test_json_of_a_drain_failure_marks_the_drain(drain_outcome: Outcome) -> None:
    data = report.to_json(DRAIN_CASE, drain_outcome)
    assert data["during"] == "drain"
    assert data["seed"] == 1234
    assert data["steps"][0]["drain"] is False
    assert all(s["drain"] and s["action_index"] is None for s in data["steps"][1:])
    assert data["violation"]["invariant"] == "drain_completes"


def test_json_of_a_held_replay_has_no_violation() -> None:
    data = report.to_json(CASE, report.replay(CASE, sut="reference"))
    assert data["during"] is None
    assert data["violation"] is None
    assert data["violations"] == []


def test_json_is_plain_json_and_round_trips(outcome: Outcome, drain_outcome: Outcome) -> None:
    data = report.to_json(CASE, outcome)
    text = json.dumps(data)
    assert json.loads(text) == data
    assert Case.from_json(json.loads(text)) == CASE
    drain = json.loads(json.dumps(report.to_json(DRAIN_CASE, drain_outcome)))
    assert Case.from_json(drain) == DRAIN_CASE


def test_round_trip_keeps_every_config_field() -> None:
    config = EngineConfig(
        device_pages=5,
        host_pages=7,
        draft_device_pages=3,
        draft_host_pages=6,
        tokens_per_block=3,
        lora_device_pages=2,
        lora_host_pages=9,
        adapter_pages=((1, 2), (4, 1)),
        max_num_tokens=11,
        max_batch_size=2,
        enable_chunked_context=True,
        chunk_unit_size=2,
        enable_recompute_pause=False,
    )
    actions = (
        SUBMIT,
        Action("submit", prompt_len=3, max_new_tokens=1),
        Action("refuse_resume", pool="draft"),
        Action("fail_grow", pool="draft"),
        Action("cancel", request_id=2),
        Action("step"),
    )
    case = Case("reference", "draft-pool", config, actions, seed=7, profile="nightly")
    data = json.loads(json.dumps(report.to_json(case, report.replay(case))))
    assert Case.from_json(data) == case


def test_replaying_the_json_gives_the_same_snapshots(outcome: Outcome) -> None:
    data = json.loads(json.dumps(report.to_json(CASE, outcome)))
    again = report.replay(Case.from_json(copy.deepcopy(data)))
    assert again.entries == outcome.entries
    assert json.loads(json.dumps(report.to_json(CASE, again))) == data


def test_reading_a_case_leaves_the_data_alone(outcome: Outcome) -> None:
    data = json.loads(json.dumps(report.to_json(CASE, outcome)))
    before = copy.deepcopy(data)
    Case.from_json(data)
    assert data == before


def valid() -> dict[str, Any]:
    return json.loads(json.dumps(report.to_json(CASE, report.replay(CASE))))


def test_wrong_schema_version_says_to_regenerate() -> None:
    data = valid() | {"schema_version": 99}
    with pytest.raises(ReportError, match=r"schema_version is 99.*regenerate"):
        Case.from_json(data)
    with pytest.raises(ReportError, match="schema_version is None"):
        Case.from_json({k: v for k, v in valid().items() if k != "schema_version"})


@pytest.mark.parametrize("data", [[1, 2], "report", None, 3])
def test_not_an_object_is_refused(data: Any) -> None:
    with pytest.raises(ReportError, match="a peftlife report is a JSON object"):
        Case.from_json(data)


@pytest.mark.parametrize("key", ["sut", "scenario", "config", "actions"])
def test_a_missing_key_is_named(key: str) -> None:
    data = valid()
    del data[key]
    with pytest.raises(ReportError, match=f"^{key} is missing"):
        Case.from_json(data)


@pytest.mark.parametrize(
    ("config", "path"),
    [
        ({"device_pages": 0}, "config.device_pages must be a whole number of at least 1"),
        ({"no_such_knob": 1}, "config.no_such_knob is not a field"),
        ({"adapter_pages": 3}, "config.adapter_pages must be a list of"),
        ({"max_batch_size": "8"}, "config.max_batch_size must be a whole number"),
    ],
    ids=["zero-pages", "unknown-field", "adapters-not-a-list", "string-number"],
)
def test_a_malformed_config_is_refused(config: dict[str, Any], path: str) -> None:
    data = valid()
    data["config"] |= config
    with pytest.raises(ReportError, match=f"^{re.escape(path)}"):
        Case.from_json(data)


@pytest.mark.parametrize("config", ["KV 8 pages", [8, 2]])
def test_a_config_that_is_not_an_object_is_refused(config: Any) -> None:
    data = valid() | {"config": config}
    with pytest.raises(ReportError, match=r"^config must be an object"):
        Case.from_json(data)


@pytest.mark.parametrize(
    ("action", "path"),
    [({"prompt_len": 1}, "kind is missing"), ({"kind": "step", "speed": 2}, "speed is not a")],
    ids=["no-kind", "unknown-argument"],
)
def test_a_malformed_action_is_refused(action: dict[str, Any], path: str) -> None:
    data = valid()
    data["actions"].append(action)
    with pytest.raises(ReportError, match=re.escape(f"actions[{len(data['actions']) - 1}].{path}")):
        Case.from_json(data)


def test_an_unknown_action_kind_is_refused() -> None:
    # A report from a newer peftlife (or a typo) must not replay as something else:
    # today ``apply`` treats any unknown kind as ``fail_grow``.
    data = valid()
    data["actions"].insert(1, {"kind": "preempt"})
    with pytest.raises(ReportError):
        Case.from_json(data)


def test_an_adapter_entry_that_is_not_a_pair_is_refused() -> None:
    # Accepted today, then replay crashes building the engine with a bare ValueError.
    data = valid()
    data["config"]["adapter_pages"] = [[1, 2, 3, 4]]
    with pytest.raises(ReportError):
        Case.from_json(data)


def test_load_json_reads_a_report_file(tmp_path: Path, outcome: Outcome) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report.to_json(CASE, outcome)), encoding="utf-8")
    assert report.load_json(path) == CASE


def test_load_json_of_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match=r"cannot read report .*nope\.json"):
        report.load_json(tmp_path / "nope.json")


def test_load_json_of_a_file_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("# peftlife report\n", encoding="utf-8")
    with pytest.raises(ReportError, match=r"is not JSON .*give a peftlife report"):
        report.load_json(path)


# ---- replay ----


def test_replay_is_deterministic(outcome: Outcome) -> None:
    again = report.replay(CASE)
    assert again.entries == outcome.entries
    assert again.violations == outcome.violations
    drain = report.replay(DRAIN_CASE)
    assert drain.entries == report.replay(DRAIN_CASE).entries


def test_replay_against_the_reference_holds_and_drains() -> None:
    held = report.replay(CASE, sut="reference")
    assert held.held
    assert held.during is None
    assert held.violations == ()
    stepped = [e.action_index for e in held.entries if e.action_index is not None]
    assert stepped == [1, 3]
    drained = [e for e in held.entries if e.action_index is None]
    assert drained
    end = drained[-1].snapshot
    assert end.requests == ()
    assert dict(end.ended) == {1: "finished"}
    assert all(not a.active and not a.paused for a in end.adapters)


def test_held_replay_renders_as_held() -> None:
    held = report.replay(CASE, sut="reference")
    md = report.render_markdown(CASE, held)
    assert md.startswith("### peftlife replay: every invariant held\n")
    assert "**Violation**" not in md
    text = rendered(held, force_terminal=False)
    assert text.startswith("peftlife replay: every invariant held\n")
    assert "✗" not in text


# ---- the regression test ----


@pytest.fixture(scope="module")
def regression_file(tmp_path_factory: pytest.TempPathFactory, outcome: Outcome) -> Path:
    path = tmp_path_factory.mktemp("kept") / "test_kept.py"
    path.write_text(report.render_regression_test(CASE, outcome), encoding="utf-8")
    return path


def run_pytest(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PEFTLIFE_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path.name, *args],
        cwd=path.parent,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_regression_test_is_python_with_the_case_inside(outcome: Outcome) -> None:
    source = report.render_regression_test(CASE, outcome)
    compile(source, "test_kept.py", "exec")
    tree = ast.parse(source)
    tests = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert tests == [f"test_{report.kept_test_name(CASE, outcome)}"]
    assert max(len(line) for line in source.splitlines()) <= 100
    # Only the public API: what ``import peftlife`` exports.
    imports = [n for n in tree.body if isinstance(n, ast.ImportFrom)]
    assert [(n.module, [a.name for a in n.names]) for n in imports] == [
        ("peftlife", ["check_case"])
    ]
    (assign,) = [n for n in tree.body if isinstance(n, ast.Assign)]
    assert Case.from_json(ast.literal_eval(assign.value)) == CASE
    assert "ownership_follows_residency" in (ast.get_docstring(tree) or "")
    assert "hypothesis" not in source.lower().replace("no hypothesis search", "")


def test_regression_test_fails_against_the_mutant(regression_file: Path, outcome: Outcome) -> None:
    run = run_pytest(regression_file)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed" in run.stdout
    # The failure is the story, line for line, not a repr of a violation.
    for line in report.terminal_text(CASE, outcome, width=100).splitlines():
        assert line.rstrip() in run.stdout
    assert "Violation(" not in run.stdout


def test_regression_test_passes_against_the_reference(regression_file: Path) -> None:
    run = run_pytest(regression_file, "--peftlife-sut", "reference")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


def test_one_finding_kept_in_two_folders_collects_as_two_tests(
    tmp_path: Path, outcome: Outcome
) -> None:
    """The same file name in two folders (the shrinks converge): no import file mismatch."""
    first = report.write(CASE, outcome, tmp_path / "reports")["test"]
    second = report.write(CASE, outcome, tmp_path / "kept")["test"]
    assert first.name == second.name
    run = run_pytest(tmp_path / "reports", "kept")
    assert "mismatch" not in run.stdout + run.stderr
    assert run.returncode == 1 and "2 failed" in run.stdout, run.stdout + run.stderr


def test_a_kept_test_whose_sut_cannot_be_imported_is_one_usage_line(
    tmp_path: Path, outcome: Outcome
) -> None:
    """Bad input, not the defect still being there: pytest's usage error, as --peftlife-sut."""
    gone = attrs.evolve(CASE, sut="gone.sched:Suspender")
    path = tmp_path / "test_kept.py"
    path.write_text(report.render_regression_test(gone, outcome), encoding="utf-8")
    run = run_pytest(path)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    output = (run.stdout + run.stderr).strip().splitlines()
    (line,) = [line for line in output if "peftlife: error:" in line]
    assert "'gone.sched:Suspender'" in line and "sys.path" in line
    assert "Traceback" not in run.stdout + run.stderr
    assert "ownership_follows_residency" not in run.stdout + run.stderr
    # Replayed against a scheduler that loads, the same file runs: the check is the SUT's.
    assert run_pytest(path, "--peftlife-sut", "reference").returncode == 0


# ---- writing the files ----


def test_write_gives_consistently_named_files(tmp_path: Path, outcome: Outcome) -> None:
    paths = report.write(CASE, outcome, tmp_path / "reports")
    name = "mutant_no_release_on_suspend_default_ownership_follows_residency_"
    name += report.trace_hash(CASE)
    assert report.case_name(CASE, outcome) == name
    assert {k: p.name for k, p in paths.items()} == {
        "json": f"{name}.json",
        "markdown": f"{name}.md",
        "test": f"test_peftlife_{name}.py",
        "html": f"{name}.html",
        "index": "index.html",
    }
    # A folder it made is ignored by git, as .hypothesis/ is.
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == sorted(
        [".gitignore", *(p.name for p in paths.values())]
    )
    assert (tmp_path / "reports" / ".gitignore").read_text("utf-8").endswith("\n*\n")
    assert report.load_json(paths["json"]) == CASE
    assert json.loads(paths["json"].read_text("utf-8")) == json.loads(
        json.dumps(report.to_json(CASE, outcome))
    )
    assert paths["test"].read_text("utf-8") == report.render_regression_test(CASE, outcome)
    md = paths["markdown"].read_text("utf-8")
    assert md.startswith(report.render_markdown(CASE, outcome).rstrip())
    # Paths as the folder was named: here absolute, so they run from anywhere.
    assert f"`peftlife replay {paths['json']}`" in md
    assert f"`{paths['test']}`" in md


def test_a_folder_that_was_there_gets_no_gitignore(tmp_path: Path, outcome: Outcome) -> None:
    report.write(CASE, outcome, tmp_path)
    assert not (tmp_path / ".gitignore").exists()


def test_the_replay_line_runs_from_where_the_command_ran(
    tmp_path: Path, outcome: Outcome, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    paths = report.write(CASE, outcome, Path("out") / "reports")
    replay_line = f"peftlife replay {Path('out') / 'reports' / paths['json'].name}"
    assert f"`{replay_line}`" in paths["markdown"].read_text("utf-8")
    assert replay_line in paths["html"].read_text("utf-8")


def test_write_names_do_not_collide_across_invariants(
    tmp_path: Path, outcome: Outcome, drain_outcome: Outcome
) -> None:
    first = report.write(CASE, outcome, tmp_path)
    second = report.write(DRAIN_CASE, drain_outcome, tmp_path)
    # Only the directory's index is shared.
    assert set(first.values()) & set(second.values()) == {first["index"]}
    assert report.case_name(DRAIN_CASE, drain_outcome) == (
        f"tests_bad_schedulers_neverschedules_default_drain_completes_{report.trace_hash(DRAIN_CASE)}"
    )
    assert len(list(tmp_path.iterdir())) == 9


def test_a_second_finding_of_the_same_invariant_does_not_overwrite_the_first(
    tmp_path: Path, outcome: Outcome
) -> None:
    longer = attrs.evolve(CASE, actions=(Action("step"), *CASE.actions))
    longer_outcome = report.replay(longer)
    assert longer_outcome.violations[0].invariant == outcome.violations[0].invariant
    first = report.write(CASE, outcome, tmp_path)
    second = report.write(longer, longer_outcome, tmp_path)
    assert set(first.values()) & set(second.values()) == {first["index"]}
    assert len(list(tmp_path.iterdir())) == 9
    # The hash is of the trace: the same case always gets the same name.
    assert report.trace_hash(CASE) == report.trace_hash(attrs.evolve(CASE))
    assert report.trace_hash(CASE) != report.trace_hash(longer)
