"""The mutation gate: every known defect is caught by search alone.

Each mutant is hunted through the shipped scenarios (the overlap ones for a mutant whose
trigger needs the overlap executor; each in the world its defect lives in), taking
turns in slices, under the ``ci`` profile, with no hand-written steps and no
scenario made for it; a mutant that
escapes, or that is caught on an invariant its catalogue entry does not
accept, fails the suite. The verdict is the gate's own (``GateRow.passed``),
the rule ``peftlife mutants`` applies.
"""

from __future__ import annotations

import json
from pathlib import Path

import hypothesis
import pytest

from peftlife import sut
from peftlife.search import diff, events, gate, profiles, scenarios
from peftlife.search.gate import Gate, GateFileError, GateRow, Kind
from peftlife.search.hunt import SLICE, hunt
from peftlife.search.machine import machine_class
from peftlife.sut.mutants import CATALOGUE, Mutant


@pytest.mark.parametrize("mutant", CATALOGUE, ids=lambda m: m.name)
def test_mutation_gate(mutant: Mutant) -> None:
    """Caught by search alone: the shipped scenarios taking turns, no hand-written steps."""
    row = gate.MutantRun(mutant, "ci", shrink=False).run()
    assert row.passed, f"{row.failure} in {row.scenario}, accepted: {', '.join(mutant.acceptable)}"


OVERLAP_MUTANTS = [m for m in CATALOGUE if m.overlap]


@pytest.mark.parametrize("mutant", OVERLAP_MUTANTS, ids=lambda m: m.name)
def test_an_overlap_mutant_is_the_reference_under_the_simple_loop(mutant: Mutant) -> None:
    """Why the gate hunts it through the overlap scenarios only: no other tells it apart."""
    hunted = gate.hunted_scenarios(mutant)
    assert hunted and all(scenarios.load(name).overlap for name in hunted)
    simple = [n for n in scenarios.shipped_names() if not scenarios.load(n).overlap]
    assert set(scenarios.shipped_names()) - set(simple) >= set(hunted)
    paired = diff.paired_with(sut.load(f"mutant:{mutant.name}"))
    settings = hypothesis.settings(profiles.for_search(profiles.get("ci")), max_examples=SLICE)
    same = hunt("reference", settings, scenario_names=simple, mixin=paired)
    assert same.held, str(same.failure)


def test_every_other_mutant_is_hunted_through_every_scenario() -> None:
    for mutant in CATALOGUE:
        if not mutant.overlap:
            assert gate.hunted_scenarios(mutant) == scenarios.shipped_names()


def test_a_scheduler_teardown_mutant_is_hunted_where_the_scheduler_tears_down() -> None:
    """Upstream's executor terminates a recompute-paused request's adapter itself, so a
    scheduler that does not release it is no defect there: such a mutant carries the
    world that leaves the teardown to the scheduler, and every scenario it is hunted
    through is searched in that world."""
    teardown = [m for m in CATALOGUE if m.scheduler_teardown]
    assert {m.name for m in teardown} == {
        "recompute_pause_keeps_ownership",
        "recompute_pause_terminates",
    }
    assert not any(scenarios.load(n).scheduler_tears_down for n in scenarios.shipped_names())
    for mutant in teardown:
        hunted = gate.hunted_scenarios(mutant)
        assert hunted == scenarios.shipped_names()
        for name in hunted:
            assert machine_class(f"mutant:{mutant.name}", name).scenario.scheduler_tears_down


# ---- the pass rule and the table, on rows made by hand ----


def reference(caught: bool) -> GateRow:
    invariant = "no_phantom_owner" if caught else "-"
    return GateRow(
        Kind.REFERENCE,
        "reference @ default",
        caught,
        "default",
        invariant,
        not caught,
        9,
        None,
        1.0,
    )


def mutant(caught: bool, acceptable: bool) -> GateRow:
    scenario, invariant = ("kv-pressure", "no_phantom_owner") if caught else ("-", "-")
    return GateRow(Kind.MUTANT, "m", caught, scenario, invariant, acceptable, 4, None, 0.5)


@pytest.mark.parametrize(
    ("row", "passed", "verdict", "failure"),
    [
        (reference(False), True, "held", None),
        (reference(True), False, "FAILED", "the reference failed no_phantom_owner in default"),
        (mutant(True, True), True, "yes", None),
        (mutant(True, False), False, "yes, unexpected invariant", "m: caught by no_phantom_owner"),
        (mutant(False, False), False, "NO", "m: not caught"),
    ],
    ids=["reference held", "reference failed", "caught", "misfiled", "escaped"],
)
def test_the_pass_rule(row: GateRow, passed: bool, verdict: str, failure: str | None) -> None:
    assert (row.passed, row.verdict, row.failure) == (passed, verdict, failure)
    assert Gate((reference(False), row)).ok is passed
    assert row.cells()[1] == verdict
    assert len(row.cells()) == len(gate.HEADER)


def test_a_reference_row_shows_as_the_reference_with_its_scenario() -> None:
    assert reference(False).cells()[:3] == ["reference", "held", "default"]


def test_what_the_gate_writes_it_reads_back(tmp_path: Path) -> None:
    table = Gate((reference(False), mutant(True, True), mutant(False, False)))
    path = tmp_path / "out" / "mutants.json"
    gate.write(table, path)
    assert gate.read(path) == table
    data = json.loads(path.read_text("utf-8"))
    assert data["ok"] is False
    assert set(data["rows"][0]) == {
        "mutant",
        "kind",
        "caught",
        "scenario",
        "invariant",
        "acceptable",
        "examples",
        "shrunk_steps",
        "seconds",
    }
    assert [r["kind"] for r in data["rows"]] == ["reference", "mutant", "mutant"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "cannot read"),
        ("[]", "no 'rows' list"),
        ('{"ok": true, "rows": [1]}', "not an object"),
        ('{"ok": true, "rows": [{"mutant": "m", "caught": true}]}', "has no kind"),
        ('{"ok": true, "rows": [{"mutant": "m", "kind": "mutant", "caught": 1}]}', "'caught'"),
    ],
)
def test_a_file_that_is_no_gate_is_refused(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "mutants.json"
    path.write_text(text, "utf-8")
    with pytest.raises(GateFileError, match=problem):
        gate.read(path)


def test_worker_processes_tell_the_gate_their_shrink_as_typed_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a worker tells reaches the caller's handler as the events it sent, named by
    mutant; the count of runs ended follows, and the news ends when the shrink does."""
    monkeypatch.setattr(gate, "SHRINK_NEWS_EVERY", 0.0)  # workers fork: they see it too
    mutant = CATALOGUE[0]
    runs = (gate.ReferenceRun("default", "ci"), gate.MutantRun(mutant, "ci"))
    heard: list[events.Event] = []
    table = gate.run_gate(runs, jobs=2, emit=heard.append)
    assert [row.kind for row in table.rows] == [Kind.REFERENCE, Kind.MUTANT]
    assert table.rows[1].shrunk_steps is not None
    steps = [e for e in heard if isinstance(e, events.ShrinkStep)]
    assert steps and {e.source for e in steps} == {mutant.name}
    assert steps[-1].describe().startswith(f"{mutant.name} shrinking: ")
    counts = [e.done for e in heard if isinstance(e, events.ExamplesRan)]
    assert counts == sorted(counts) and counts[-1] == 2
