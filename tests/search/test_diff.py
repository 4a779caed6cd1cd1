"""``peftlife diff A B``: two schedulers on the machine's traces, and where they first differ.

The reference diverges from every mutant of the catalogue and not from a copy
of itself; a scheduler that only adds a harmless second
``mark_request_done(pause=True)`` diverges in its calls, and not when calls are
ignored; two checkouts of the fake TensorRT-LLM tree diverge where one has the
defect. Each search here is small: a divergence takes a few examples.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import attrs
import hypothesis
import pytest

from peftlife import ReferenceScheduler, reports
from peftlife.doors import cli
from peftlife.reports import divergence as diff_reports
from peftlife.search import diff, machine, profiles
from peftlife.search.trace import Action
from peftlife.sut.mutants import CATALOGUE
from peftlife.world.config import EngineConfig
from peftlife.world.protocol import Environment, SchedulerOutput
from peftlife.world.request import Request

CI = profiles.for_search(profiles.get("ci"))
SMALL = hypothesis.settings(CI, max_examples=15)
HERE = "tests.search.test_diff"
MUTANT = "mutant:recompute_pause_keeps_ownership"
# Its release is missing only where the executor leaves the teardown to the scheduler.
OPT_IN = "opt-in/scheduler-teardown"
CHECKOUT = Path(__file__).parents[1] / "fake_trtllm" / "checkout"
SCHEDULER_V2 = Path("tensorrt_llm", "_torch", "pyexecutor", "scheduler", "scheduler_v2.py")


# ---- schedulers of this module (SUT strings tests.search.test_diff:NAME) ----


def copy_of_reference(env: Environment) -> ReferenceScheduler:
    """The reference under another name: nothing may differ."""
    return ReferenceScheduler(env)


class ReleasesTwice(ReferenceScheduler):
    """A second ``mark_request_done(pause=True)`` on suspend: a paused owner stays paused."""

    def release_on_suspend(self, req: Request) -> None:
        super().release_on_suspend(req)
        super().release_on_suspend(req)


class ReleaseFirst(ReferenceScheduler):
    """Releases the adapter, then suspends the KV: the same calls, in another order."""

    def suspend(
        self, p: Any, req: Request, *, owned: bool = True, was_active: bool | None = None
    ) -> None:
        if was_active is None:
            was_active = self.kv.is_request_active(req.request_id)
        if self.owns_adapter(req, owned and was_active):
            self.release_on_suspend(req)
        super().suspend(p, req, owned=False, was_active=was_active)


class Reversed(ReferenceScheduler):
    """The batch in the opposite order: the same requests run, in another order."""

    def schedule_request(
        self, active_requests: list[Request], inflight_request_ids: set[int]
    ) -> SchedulerOutput:
        out = super().schedule_request(active_requests, inflight_request_ids)
        out.context_requests.reverse()
        out.generation_requests.reverse()
        return out


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


# ---- the search ----


@pytest.mark.parametrize("mutant", [m.name for m in CATALOGUE])
def test_the_reference_diverges_from_every_mutant(mutant: str) -> None:
    found = diff.find("reference", f"mutant:{mutant}", "all", CI)
    assert found.divergence is not None, mutant
    assert found.result.failure is None  # a divergence is no broken invariant
    assert found.divergence.paired.diverges


def test_the_reference_does_not_diverge_from_a_copy_of_itself() -> None:
    found = diff.find("reference", f"{HERE}:copy_of_reference", "all", SMALL)
    assert found.result.held
    assert found.result.examples >= 7 * SMALL.max_examples
    assert found.broken == {}


def test_a_second_harmless_release_diverges_in_calls_only() -> None:
    found = diff.find("reference", f"{HERE}:ReleasesTwice", "all", CI)
    assert found.divergence is not None
    shrunk = diff.minimized(found.divergence, f"{HERE}:ReleasesTwice")
    divergence = shrunk.outcome.divergence
    assert divergence is not None
    assert {(c.kind, c.name) for c in divergence.cells} <= {("calls", ""), ("request", "calls")}
    a, b = divergence.a, divergence.b
    assert a is not None and b is not None
    assert b.call_texts.count(next(t for t in b.call_texts if "pause=True" in t)) == 2
    # Both still hold every invariant: a divergence is no verdict.
    assert shrunk.outcome.violations_a == shrunk.outcome.violations_b == ()
    ignored = diff.find("reference", f"{HERE}:ReleasesTwice", "all", SMALL, ignore=["calls"])
    assert ignored.result.held


def test_the_batch_order_counts() -> None:
    """Reversing the batch is a divergence: its order is the order the executor
    registers adapters in, which can make a registration fail."""
    found = diff.find("reference", f"{HERE}:Reversed", "all", CI)
    assert found.divergence is not None
    cells = found.divergence.paired.cells
    assert {diff.Cell("list", "context"), diff.Cell("list", "generation")} & set(cells), cells


def test_calls_in_another_order_diverge_unless_order_is_ignored() -> None:
    found = diff.find("reference", f"{HERE}:ReleaseFirst", "all", CI)
    assert found.divergence is not None
    paired = found.divergence.paired
    assert diff.Cell("calls") in paired.cells
    assert paired.a is not None and paired.b is not None
    assert sorted(paired.a.call_texts) == sorted(paired.b.call_texts)
    ignored = diff.find("reference", f"{HERE}:ReleaseFirst", "all", SMALL, ignore=["order"])
    assert ignored.result.held


def test_paused_lists_compare_as_sets() -> None:
    a = diff.Observation(1, (("paused", ("1", "2")),), "", (), (), (), ())
    b = diff.Observation(1, (("paused", ("2", "1")),), "", (), (), (), ())
    assert diff.differences(a, b) == ()
    c = diff.Observation(1, (("context", ("1", "2")),), "", (), (), (), ())
    d = diff.Observation(1, (("context", ("2", "1")),), "", (), (), (), ())
    assert diff.differences(c, d) == (diff.Cell("list", "context"),)
    assert diff.differences(c, d, ignore=["order"]) == ()


def test_a_divergence_shrinks_and_replays_with_each_sides_invariants() -> None:
    found = diff.find("reference", MUTANT, OPT_IN, CI)
    assert found.divergence is not None
    shrunk = diff.minimized(found.divergence, MUTANT)
    # The invariant shrinker reaches 4 actions here; the divergence shrinker, which
    # must keep the calls diverging rather than one invariant failing, stops a few above.
    assert len(shrunk.actions) <= 10
    assert shrunk.shrink.stopped is None
    divergence = shrunk.outcome.divergence
    assert divergence is not None and diff.Cell("calls") in divergence.cells
    assert shrunk.outcome.violations_a == ()
    assert shrunk.outcome.violations_b[0].invariant == "ownership_follows_residency"
    again = diff.replay(
        shrunk.config, shrunk.actions, ReferenceScheduler, CATALOGUE[2].scheduler
    ).divergence
    assert again == divergence


def test_identical_schedulers_that_break_an_invariant_do_not_diverge() -> None:
    trace = (Action("submit", prompt_len=2, max_new_tokens=1), Action("step"))
    mutant = CATALOGUE[0].scheduler
    outcome = diff.replay(EngineConfig(), trace, mutant, mutant)
    assert outcome.divergence is None
    assert outcome.iterations  # the drain ran and was compared


# ---- fake TensorRT-LLM checkouts ----


def _checkout(tmp_path: Path, name: str, *, fixed: bool) -> Path:
    tree = tmp_path / name
    shutil.copytree(CHECKOUT, tree)
    if fixed:
        file = tree / SCHEDULER_V2
        text = file.read_text("utf-8")
        defect = (
            "        pass  # TensorRT-LLM issue #18407: the adapter stays active on the device\n"
        )
        release = (
            "        if self.peft is not None:\n"
            "            self.peft.mark_request_done(req, pause=True)\n"
        )
        assert defect in text
        file.write_text(text.replace(defect, release), "utf-8")
    return tree


def test_two_checkouts_diverge_where_one_has_the_defect(tmp_path: Path) -> None:
    fixed = _checkout(tmp_path, "fixed", fixed=True)
    broken = _checkout(tmp_path, "broken", fixed=False)
    found = diff.find(f"trtllm:{fixed}", f"trtllm:{broken}", "all", CI)
    failure = found.divergence
    assert failure is not None
    assert diff.Cell("calls") in failure.paired.cells
    a, b = failure.paired.a, failure.paired.b
    assert a is not None and b is not None
    released = [t for t in a.call_texts if t.startswith("mark_request_done")]
    assert released and not [t for t in b.call_texts if t.startswith("mark_request_done")]
    same = diff.find(f"trtllm:{broken}", f"trtllm:{CHECKOUT}", "chunked-prefill", SMALL)
    assert same.result.held
    # Both break ownership the same way: no divergence, and the verdict says so.
    assert same.broken == {
        "A": frozenset({"ownership_follows_residency"}),
        "B": frozenset({"ownership_follows_residency"}),
    }


# ---- the command ----


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, str]] = []
        self.marked: list[str] = []
        self.csp = ""
        self.external: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy":
            self.csp = a["content"]
        if tag == "script":
            self.scripts += 1
        for key in ("src", "href"):
            if "://" in a.get(key, ""):
                self.external.append(a[key])
        if tag == "tr" and "data-row" in a:
            self.rows.append((a["data-row"], a["data-side"]))
        if tag == "td" and a.get("data-diverging") == "yes":
            self.marked.append(a["data-cell"])


def page(path: Path) -> _Page:
    parsed = _Page()
    parsed.feed(path.read_text("utf-8"))
    return parsed


def test_diff_reports_a_divergence_in_every_format(tmp_path: Path) -> None:
    reports_dir = tmp_path / "reports"
    junit_file, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    code, out = run(
        *("diff", "reference", MUTANT, "--scenario", OPT_IN, "--profile", "ci"),
        *("--report-dir", str(reports_dir), "--junit-xml", str(junit_file)),
        *("--summary", str(summary)),
    )
    assert code == 1, out
    assert "peftlife divergence at iteration" in out
    assert f"A reference\nB {MUTANT}" in out
    assert "B mutant:recompute_pause_keeps_ownership: breaks ownership_follows_residency" in out
    assert "A reference: every invariant held" in out
    (json_path,) = reports_dir.glob("diff_*.json")
    data = json.loads(json_path.read_text("utf-8"))
    assert (data["sut_a"], data["sut_b"], data["scenario"]) == ("reference", MUTANT, OPT_IN)
    cells = [diff.Cell(**cell) for cell in data["divergence"]["cells"]]
    assert diff.Cell("calls") in cells
    owns = [c for c in cells if c.kind == "request" and c.name == "owns"]
    assert owns
    assert data["invariants"]["a"] == []
    # Each side's violations have a finding report's shape.
    (broken, *_) = data["invariants"]["b"]
    assert broken["invariant"] == "ownership_follows_residency"
    shape = ("invariant", "subject", "expected", "found", "iteration", "requests", "adapters")
    assert tuple(broken) == shape and isinstance(broken["subject"], str)
    dcase = diff_reports.from_json(data)
    assert diff_reports.replay(dcase).divergence is not None
    markdown = json_path.with_suffix(".md").read_text("utf-8")
    assert "side by side" in markdown and "**≠ calls**" in markdown
    html = page(json_path.with_suffix(".html"))
    assert "default-src 'none'" in html.csp and not html.external and not html.scripts
    # Two rows per request, A above B; the diverging cells are marked.
    requests = [r for r in html.rows if r[0].startswith("request")]
    assert requests and all(
        requests[i][1] == "A" and requests[i + 1] == (requests[i][0], "B")
        for i in range(0, len(requests), 2)
    )
    assert "calls" in html.marked and str(owns[0]) in html.marked
    case = ET.parse(junit_file).getroot().find(".//testcase")
    assert case is not None and case.get("classname") == f"reference vs {MUTANT}"
    failure = case.find("failure")
    assert failure is not None and "divergence at iteration" in (failure.get("message") or "")
    assert "diverge at iteration" in summary.read_text("utf-8")
    # Derandomized under ci, and said so; the command that diffs again.
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["peftlife_seed"] == "derandomized"
    rerun = f"peftlife diff reference {MUTANT} --scenario {OPT_IN} --profile ci"
    assert props["peftlife_rerun"] == rerun
    assert props["peftlife_report"] == str(json_path)


def test_a_random_diff_reports_its_seed_and_replays_it(tmp_path: Path) -> None:
    """Under a random profile the diff picks its seed, as check does: the report and the
    JUnit file name it, not "derandomized"."""
    junit_file = tmp_path / "junit.xml"
    code, out = run(
        *("diff", "reference", MUTANT, "--scenario", OPT_IN, "--profile", "dev", "-q"),
        *("--report-dir", str(tmp_path), "--junit-xml", str(junit_file)),
    )
    assert code in (0, 1), out
    case = ET.parse(junit_file).getroot().find(".//testcase")
    assert case is not None
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    seed = props["peftlife_seed"]
    assert seed.isdigit(), props
    assert props["peftlife_rerun"].endswith(f"--profile dev --seed {seed}")
    if code == 1:
        (json_path,) = tmp_path.glob("diff_*.json")
        assert json.loads(json_path.read_text("utf-8"))["seed"] == int(seed)


def test_diff_exits_0_when_nothing_diverges(tmp_path: Path) -> None:
    code, out = run(
        *("diff", "reference", f"{HERE}:ReleasesTwice", "--ignore", "calls"),
        *("--scenario", "kv-pressure", "--profile", "ci", "--max-examples", "30"),
        *("--report-dir", str(tmp_path), "--summary", str(tmp_path / "summary.md")),
    )
    assert code == 0, out
    assert out.startswith("same: ") and "in scenario kv-pressure" in out
    assert "behave the same" in (tmp_path / "summary.md").read_text("utf-8")
    assert not list(tmp_path.glob("diff_*"))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["diff", "reference", "mutant:nope"], "unknown mutant 'nope'"),
        (["diff", "reference"], "the following arguments are required: B"),
        (["diff", "reference", "reference", "--ignore", "names"], "invalid choice: 'names'"),
        (["diff", "reference", "reference", "--scenario", "nowhere"], "nowhere"),
        (["diff", "reference", "reference", "--max-examples", "0"], "at least 1"),
    ],
)
def test_diff_bad_input_exits_2_with_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err


def test_a_diff_report_reads_back_and_renders_the_same(tmp_path: Path) -> None:
    trace = (
        Action("submit", lora_task_id=1, lora_weights=True, prompt_len=1, max_new_tokens=2),
        Action("step"),
        Action("fail_grow"),
        Action("step"),
    )
    config = EngineConfig(device_pages=8, tokens_per_block=2, adapter_pages=((1, 1),))
    case = reports.Case("reference", "default", config, trace)
    dcase = diff_reports.DiffCase(case, "mutant:no_release_on_suspend", ("order",))
    outcome = diff_reports.replay(dcase)
    assert outcome.divergence is not None
    paths = diff_reports.write(dcase, outcome, tmp_path)
    again = diff_reports.load_json(paths["json"])
    assert again == dcase
    text = diff_reports.terminal_text(again, diff_reports.replay(again))
    assert text == diff_reports.terminal_text(dcase, outcome)
    assert "ignoring order" in text and "≠ calls" in text


def test_a_diff_report_of_version_1_still_loads(tmp_path: Path) -> None:
    """Version 1 wrote cells as text and violations with a nested subject; a replay
    reads only the case, which is the same in both."""
    trace = (Action("submit", prompt_len=2, max_new_tokens=1), Action("step"))
    dcase = diff_reports.DiffCase(
        reports.Case("reference", "default", EngineConfig(), trace), "mutant:evicts_inflight"
    )
    data = diff_reports.to_json(dcase, diff_reports.replay(dcase))
    old = data | {
        "diff_schema_version": 1,
        "divergence": {"iteration": 1, "action_index": 1, "cells": ["calls", "request 1 owns"]},
        "invariants": {"a": [], "b": [{"invariant": "x", "subject": {"requests": [1]}}]},
    }
    assert diff_reports.from_json(old) == dcase
    with pytest.raises(reports.ReportError, match="version 1 or 2"):
        diff_reports.from_json(data | {"diff_schema_version": 3})


def test_the_diff_html_page_marks_only_the_diverging_iteration(tmp_path: Path) -> None:
    trace = (
        Action("submit", lora_task_id=1, lora_weights=True, prompt_len=1, max_new_tokens=2),
        Action("step"),
        Action("fail_grow"),
        Action("step"),
    )
    config = EngineConfig(device_pages=8, tokens_per_block=2, adapter_pages=((1, 1),))
    dcase = diff_reports.DiffCase(
        reports.Case("reference", "default", config, trace), "mutant:no_release_on_suspend"
    )
    outcome = diff_reports.replay(dcase)
    html = diff_reports.render_html(dcase, outcome)
    first, _, last = html.partition('<details class="diverging" open')
    assert "data-diverging" not in first and "data-diverging" in last
    assert "request 1 owns" in last and "http" not in html.split("<body")[1]


# The reference and evicts_inflight part in the drain: B suspends request 3, on the device.
OVERLAP_DIVERGES = EngineConfig(
    device_pages=3,
    tokens_per_block=2,
    adapter_pages=((1, 1),),
    lora_device_pages=1,
    lora_host_pages=1,
    max_num_tokens=3,
    max_batch_size=2,
    executor="overlap",
)
OVERLAP_ACTIONS = (
    Action("submit", None, 1, True, 2, 2),
    Action("submit", None, 1, False, 1, 2),
    Action("submit", None, 1, False, 1, 2),
)


def test_an_overlap_divergence_shows_each_iterations_batches_in_every_format() -> None:
    dcase = diff_reports.DiffCase(
        reports.Case("reference", "overlap", OVERLAP_DIVERGES, OVERLAP_ACTIONS),
        "mutant:evicts_inflight",
    )
    outcome = diff_reports.replay(dcase)
    assert outcome.divergence is not None and outcome.divergence.iteration == 3
    text = diff_reports.terminal_text(dcase, outcome)
    assert "in flight: none read back; [1, 2] launched" in text  # an agreed iteration
    assert "in flight: [1, 2] read back; [3] launched" in text
    (side,) = [ln.split() for ln in text.splitlines() if ln.startswith("in flight")]
    assert " ".join(side) == "in flight [3] read back; [1] launched [3] read back; [1] launched"
    markdown = diff_reports.render_markdown(dcase, outcome)
    assert "in flight [1, 2] read back; [3] launched" in markdown
    assert "| in flight | [3] read back; [1] launched | [3] read back; [1] launched |" in markdown
    html = diff_reports.render_html(dcase, outcome)
    # Each iteration's table has an A and a B row for its batches.
    assert html.count('data-row="in flight"') == 2 * len(outcome.iterations) == 6
    simple_world = attrs.evolve(OVERLAP_DIVERGES, executor="simple")
    simple = attrs.evolve(dcase, case=attrs.evolve(dcase.case, config=simple_world))
    assert "in flight" not in diff_reports.terminal_text(simple, diff_reports.replay(simple))


@pytest.mark.parametrize("paired", [False, True])
def test_an_example_hypothesis_aborted_is_not_drained(
    paired: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Built and torn down by hand, outside a test run, where Hypothesis records no events.
    monkeypatch.setattr(machine, "event", lambda *args: None)
    base = machine.machine_class("reference", "default")
    mixin = diff.paired_with(ReferenceScheduler)
    kind = type("Example", (mixin, base), {}) if paired else base
    search = machine.SearchContext.of(base, schedule_deadline=None)

    def example() -> Any:
        made = kind(search)
        made.build_world(config=EngineConfig(), burst=[(0, False, 2, 1)], moves=[])
        return made

    aborted = example()
    try:
        raise hypothesis.errors.StopTest(0)  # Hypothesis out of choices mid-example
    except hypothesis.errors.StopTest:
        aborted.teardown()
    assert aborted.engine.iteration == 0
    ran = example()
    ran.teardown()  # an example that ran its course drains
    assert ran.engine.iteration == 1
    # So does one searched inside a caller's own exception handler.
    handled = example()
    try:
        raise RuntimeError("the caller's, not Hypothesis's")
    except RuntimeError:
        handled.teardown()
    assert handled.engine.iteration == 1


# ---- the world a mutant carries, for A and B alike ----

TEARDOWN = "mutant:recompute_pause_keeps_ownership"


@pytest.mark.parametrize("sides", [("reference", TEARDOWN), (TEARDOWN, "reference")])
def test_a_mutant_carries_its_world_whichever_side_it_is(
    tmp_path: Path, sides: tuple[str, str]
) -> None:
    """Its defect lives where the scheduler owns the recompute teardown: both sides run
    there, so the diff finds it as B as it does as A, in a scenario that does not say so."""
    a, b = sides
    code, out = run(
        *("diff", a, b, "--scenario", "kv-pressure", "--profile", "ci"),
        *("--report-dir", str(tmp_path)),
    )
    assert code == 1, out
    assert "recompute_teardown = scheduler_only (for A and B alike)" in out
    (json_path,) = tmp_path.glob("diff_*.json")
    data = json.loads(json_path.read_text("utf-8"))
    assert data["config"]["recompute_teardown"] == "scheduler_only"
    assert f"{TEARDOWN}: breaks ownership_follows_residency" in " ".join(out.split())


def test_the_paired_machine_carries_bs_world() -> None:
    mixin = diff.paired_with(ReferenceScheduler, (), TEARDOWN)
    paired = machine.machine_class("reference", "kv-pressure", mixin.beside)
    assert paired.scenario.recompute_teardown == "scheduler_only"
    alone = machine.machine_class("reference", "kv-pressure")
    assert alone.scenario.recompute_teardown != "scheduler_only"


def test_two_sides_that_need_different_worlds_are_bad_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No world has both defects: one line that says what to do instead, exit 2."""
    from peftlife import sut

    carried = {"mutant:no_release_on_suspend": (("recompute_teardown", "executor_frees"),)}
    real = sut.world_of

    def world_of(spec: str) -> sut.SutWorld:
        return attrs.evolve(real(spec), world=carried[spec]) if spec in carried else real(spec)

    monkeypatch.setattr(sut, "world_of", world_of)
    assert cli.main(["diff", "mutant:no_release_on_suspend", TEARDOWN]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "need different worlds" in err, err
