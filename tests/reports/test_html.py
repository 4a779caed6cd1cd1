"""The HTML timeline page and the index, read as structure (the browser tests look at them).

The golden file pins the grid of the shrunk ``no_release_on_suspend`` case:
its rows, columns, the actions on each column and the marked cells. After an
intended change, regenerate it and read the diff::

    PEFTLIFE_REGEN_GOLDEN=1 .venv/bin/pytest tests/reports/test_html.py
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import attrs
import pytest
from tests.html_structure import grid_structure
from tests.report_cases import CASE, DRAIN_CASE, GOLDEN, OVERLAP_CASE, REGEN

from peftlife import reports as report
from peftlife.reports import Case, Outcome
from peftlife.reports.finding.html import render_html, render_index, verdict_words, write_index


@pytest.fixture(scope="module")
def replayed() -> dict[str, Outcome]:
    """The report tests' cases, replayed once: a step failure, a drain failure, and a
    step failure under the overlap executor."""
    return {
        "step": report.replay(CASE),
        "drain": report.replay(DRAIN_CASE),
        "overlap": report.replay(OVERLAP_CASE),
    }


def test_golden_grid_of_the_shrunk_no_release_on_suspend_case(replayed: dict[str, Outcome]) -> None:
    outcome = replayed["step"]
    structure = grid_structure(render_html(CASE, outcome))
    path = GOLDEN / "html-grid.json"
    text = json.dumps(structure, indent=1, ensure_ascii=False) + "\n"
    if REGEN:
        path.write_text(text, "utf-8")
    assert json.loads(text) == json.loads(path.read_text("utf-8"))


def test_grid_shows_the_defect_where_it_happened(replayed: dict[str, Outcome]) -> None:
    outcome = replayed["step"]
    g = grid_structure(render_html(CASE, outcome))
    assert g["rows"] == ["request 1", "adapter 1"]
    assert [c["iteration"] for c in g["columns"]] == [1, 2]
    # The submit lands in iteration 1, the injected grow failure in iteration 2.
    assert g["acts"] == {"1": ["submit → request 1"], "2": ["fail_grow (target)"]}
    # Request 1 is suspended at iteration 2 yet still owns its adapter actively.
    (marked_request,) = [c for c in g["marked"] if c["row"] == "request 1"]
    assert marked_request["iteration"] == "2"
    assert (marked_request["target"], marked_request["owns"]) == ("SUSPENDED", "active")
    assert marked_request["invariant"] == "ownership_follows_residency"
    assert g["notes"]["request 1"] == "ownership_follows_residency"
    # Only the violating iteration is marked.
    assert {c["iteration"] for c in g["marked"]} == {"2"}
    assert g["details"] == ["1", "2"]
    assert g["external"] == []


def test_the_page_says_what_a_person_needs(replayed: dict[str, Outcome]) -> None:
    outcome = replayed["step"]
    case = attrs.evolve(CASE, examples=17, seed=99)
    page = render_html(case, outcome, {"replay": "peftlife replay x.json"})
    (violation,) = outcome.violations
    for text in (
        verdict_words(violation.invariant),
        case.sut,
        "default",
        "<dd>99</dd>",
        "<dd>ci</dd>",
        "<dd>17</dd>",
        "4 actions, 2 iterations",
        "peftlife replay x.json",
        violation.expected,
        *report.world_lines(case.config),
    ):
        assert text in page, text
    # Hover text: state and prefill progress of each request cell.
    assert "state: GENERATION_IN_PROGRESS" in page
    assert "prefill: 1/1" in page
    assert "target: SUSPENDED (was ACTIVE)" in page


def test_the_violating_iteration_is_open_with_its_calls_as_the_story_words_them(
    replayed: dict[str, Outcome],
) -> None:
    outcome = replayed["step"]
    page = render_html(CASE, outcome)
    (violation,) = outcome.violations
    sections = re.findall(r'<section class="detail"[^>]*data-iteration="(\d+)"([^>]*)>', page)
    assert sections == [("1", " hidden"), (str(violation.iteration), "")]
    opened = page.split(f'id="iteration-{violation.iteration}"')[1].split("</section>")[0]
    assert f"expected {html.escape(violation.expected)}, found <b>{violation.found}</b>" in opened
    # The story's words for the missing call, at the top of the page and in the open detail.
    story = report.terminal_text(CASE, outcome, width=100)
    assert "scheduler PEFT calls: none" in story
    said = '<span class="label">scheduler PEFT calls:</span> <code>none</code>'
    header = page.split("</header>")[0]
    assert said in header and said in opened
    assert "suspend_request(1)" in header


def test_a_page_that_held_opens_no_iteration() -> None:
    held = attrs.evolve(CASE, sut="reference")
    outcome = report.replay(held)
    assert outcome.held
    page = render_html(held, outcome)
    assert 'class="decisive"' not in page
    assert all(
        "hidden" in attrs_ for attrs_ in re.findall(r'<section class="detail"([^>]*)>', page)
    )


# ---- the overlap executor ----


def test_each_in_flight_batch_is_a_band_across_its_two_iterations(
    replayed: dict[str, Outcome],
) -> None:
    outcome = replayed["overlap"]
    g = grid_structure(render_html(OVERLAP_CASE, outcome))
    flights: dict[int, set[tuple[str, int]]] = {}
    for cell in g["cells"]:
        for launched in cell.get("flight", "").split():
            flights.setdefault(int(launched), set()).add((cell["row"], int(cell["iteration"])))
    # Every batch launched, from the snapshots: its members' cells in the iteration that
    # launched it and in the one that read it back (the last is still on the device).
    expected: dict[int, set[tuple[str, int]]] = {}
    last = outcome.entries[-1].snapshot.iteration
    for entry in outcome.entries:
        s = entry.snapshot
        for rid in s.in_flight:
            ends = (s.iteration, s.iteration + 1) if s.iteration < last else (s.iteration,)
            expected.setdefault(s.iteration, set()).update((f"request {rid}", i) for i in ends)
    assert flights == expected
    # Request 1 runs in batches 1 and 2 and ends in iteration 3 (the held batch's).
    assert flights[1] == {("request 1", 1), ("request 1", 2)}
    assert flights[2] == {("request 1", 2), ("request 1", 3)}
    assert 3 not in flights  # held: nothing launched
    page = render_html(OVERLAP_CASE, outcome)
    assert page.count('class="band from') + page.count('class="band to') == sum(
        len(members) for members in flights.values()
    )


def test_the_overlap_page_marks_retiring_requests_and_its_actions(
    replayed: dict[str, Outcome],
) -> None:
    outcome = replayed["overlap"]
    page = render_html(OVERLAP_CASE, outcome)
    g = grid_structure(page)
    assert g["acts"]["3"] == [
        "end-of-sequence request 1",
        "submit → request 2",
        "hold batch",
    ]
    retiring = re.findall(r'<td class="cell[^"]* retiring" [^>]*data-row="([^"]+)"', page)
    states = [
        f"request {v.request_id}"
        for e in outcome.entries
        for v in e.snapshot.requests
        if v.state.name == "GENERATION_TO_COMPLETE"
    ]
    assert retiring == states and states
    assert "in flight: the band joins" in page  # the legend
    # Each iteration's detail says what was on the device.
    assert '<p class="in-flight">in flight: [1] read back; batch held, none launched; ' in page


def test_a_simple_loop_page_has_no_overlap_mark(replayed: dict[str, Outcome]) -> None:
    for case, outcome in ((CASE, replayed["step"]), (DRAIN_CASE, replayed["drain"])):
        page = render_html(case, outcome)
        for word in ("band", "data-flight", "retiring", "in-flight", "--flight"):
            assert word not in page, word


def test_verdict_words_come_from_the_checker() -> None:
    assert verdict_words("ownership_follows_residency").startswith("Started and ACTIVE")
    assert verdict_words("drain_completes").startswith("With arrivals stopped")
    assert verdict_words("made_up_rule") == "made up rule"


def test_the_drain_folds_into_one_column_group(replayed: dict[str, Outcome]) -> None:
    drain_outcome = replayed["drain"]
    g = grid_structure(render_html(DRAIN_CASE, drain_outcome))
    drained = [e.snapshot.iteration for e in drain_outcome.entries if e.action_index is None]
    groups = [c["group"] for c in g["columns"]]
    assert groups == ["step", "fold"] + ["drain"] * len(drained)
    # The folded column stands for the drain's last iteration.
    assert g["columns"][1]["iteration"] == drained[-1]
    # drain_completes names "requests [1]": the violating cell is request 1 at the end.
    marked = {(c["row"], c["iteration"], c["group"]) for c in g["marked"]}
    assert ("request 1", str(drained[-1]), "fold") in marked
    assert ("request 1", str(drained[-1]), "drain") in marked
    # Every drain cell belongs to the drain group, so folding hides exactly those.
    drain_cells = [c for c in g["cells"] if c.get("drain") or c["group"] == "drain"]
    assert {int(c["iteration"]) for c in drain_cells} == set(drained)


def _pages(outcome: Outcome, case: Case, sizes: list[int]) -> list[int]:
    return [
        len(render_html(case, attrs.evolve(outcome, entries=outcome.entries[:n])).encode())
        for n in sizes
    ]


def test_size_grows_linearly_with_the_trace(replayed: dict[str, Outcome]) -> None:
    drain_outcome = replayed["drain"]
    n = len(drain_outcome.entries)
    assert n >= 24
    small, middle, large = _pages(drain_outcome, DRAIN_CASE, [n // 4, n // 2, n])
    # Each added iteration costs about the same: doubling the trace adds a
    # similar amount per iteration, never a growing one.
    per_iteration_first = (middle - small) / (n // 2 - n // 4)
    per_iteration_second = (large - middle) / (n - n // 2)
    assert per_iteration_second <= 1.2 * per_iteration_first


def test_the_page_loads_nothing(replayed: dict[str, Outcome]) -> None:
    outcome = replayed["step"]
    page = render_html(CASE, outcome)
    body = page.split("<body", 1)[1]
    assert not re.search(r"""(src|href)=["']?[a-z]+:""", page)
    assert "@import" not in page and "url(" not in page
    assert "<link" not in page
    assert "default-src 'none'" in page  # and the page forbids it to the browser too
    assert "<script>" in body and "<style>" in page


# ---- the index ----


def test_index_lists_every_finding_and_the_gate(
    tmp_path: Path, replayed: dict[str, Outcome]
) -> None:
    outcome = replayed["step"]
    paths = report.write(CASE, outcome, tmp_path)
    assert paths["html"].exists() and paths["index"] == tmp_path / "index.html"
    drain_paths = report.write(DRAIN_CASE, report.replay(DRAIN_CASE), tmp_path)
    gate = {
        "ok": True,
        "rows": [
            {
                "mutant": "no_release_on_suspend",
                "kind": "mutant",
                "caught": True,
                "scenario": "default",
                "invariant": "ownership_follows_residency",
                "acceptable": True,
                "examples": 3,
                "shrunk_steps": 4,
                "seconds": 0.4,
            }
        ],
    }
    (tmp_path / "mutants.json").write_text(json.dumps(gate), "utf-8")
    (tmp_path / "broken.json").write_text("{", "utf-8")  # not a report: left out
    index = write_index(tmp_path).read_text("utf-8")
    assert f'href="{paths["html"].name}"' in index
    assert f'href="{drain_paths["html"].name}"' in index
    assert "findings (2)" in index
    # When, and what was expected and found, without opening a finding.
    assert re.search(r"index written \d{4}-\d\d-\d\d \d\d:\d\d UTC", index)
    (violation,) = outcome.violations
    assert html.escape(violation.expected) in index and f"<b>{violation.found}</b>" in index
    assert "mutant gate" in index and "no_release_on_suspend" in index
    assert "the reference held and every mutant was caught" in index


def test_index_says_when_a_gate_table_cannot_be_read(tmp_path: Path) -> None:
    # A table of rows that do not say what they ran (the reference, or a mutant).
    gate = {"ok": True, "rows": [{"mutant": "no_release_on_suspend", "caught": True}]}
    (tmp_path / "mutants.json").write_text(json.dumps(gate), "utf-8")
    index = render_index(tmp_path)
    assert "mutant gate" in index and "not readable" in index and "has no kind" in index
    assert "every mutant was caught" not in index


def test_index_of_an_empty_directory(tmp_path: Path) -> None:
    assert "no finding in this directory" in render_index(tmp_path)
