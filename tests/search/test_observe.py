"""Hypothesis observability records of peftlife runs, with peftlife's own features."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis.internal.observability import observability_enabled

from peftlife.search import observe, profiles
from peftlife.search.hunt import search
from peftlife.search.machine import COVERAGE_LABELS

MUTANT = "mutant:no_release_on_suspend"


def _settings(examples: int) -> hypothesis.settings:
    return hypothesis.settings(
        profiles.get("ci"),
        max_examples=examples,
        verbosity=hypothesis.Verbosity.quiet,
    )


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


@pytest.fixture
def observed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "obs" / "runs.jsonl"
    monkeypatch.setenv(observe.ENV, str(path))
    return path


def test_a_search_writes_one_record_per_test_case(observed: Path) -> None:
    result = search("reference", "default", _settings(15), shrink=False, seed=5)
    assert result.held
    records = _records(observed)
    assert all(r["type"] == "test_case" for r in records)
    assert {r["property"] for r in records} == {"peftlife reference @ default"}
    # Every example that built a world has its verdict; some gave up on a filter
    # after running (Hypothesis's own status) and were still drained and checked.
    ran = [r for r in records if "verdict" in r["features"]]
    assert len(ran) == result.examples
    assert {r["status"] for r in ran} <= {"passed", "gave_up"}
    for r in ran:
        features = r["features"]
        assert features["sut"] == "reference"
        assert features["scenario"] == "default"
        assert features["verdict"] == "held"
        assert isinstance(features["iterations checked"], int)
    assert max(r["features"]["iterations checked"] for r in ran) >= 1
    # The path labels the search reached are features too, as the coverage counter saw them.
    reached = {k for r in ran for k in r["features"] if k in COVERAGE_LABELS}
    assert reached == {k for k in COVERAGE_LABELS if result.coverage[k]}
    assert any(k.startswith("rule: ") for r in ran for k in r["features"])
    # The callback lives for the search only.
    assert not observability_enabled()


def test_a_finding_records_the_violated_invariant(observed: Path) -> None:
    result = search(MUTANT, "default", _settings(50), shrink=False)
    assert result.failure is not None
    failed = [r for r in _records(observed) if r["status"] == "failed"]
    assert failed
    assert {r["features"]["verdict"] for r in failed} == {result.failure.invariant}
    assert {r["property"] for r in failed} == {f"peftlife {MUTANT} @ default"}


def test_nothing_is_written_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(observe.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert observe.path_from_env() is None
    search("reference", "default", _settings(3), shrink=False, seed=5)
    assert list(tmp_path.iterdir()) == []
    assert not observability_enabled()


def test_recording_does_not_change_the_search(observed: Path) -> None:
    watched = search(MUTANT, "default", _settings(50), shrink=True)
    observed.unlink()
    with pytest.MonkeyPatch.context() as m:
        m.delenv(observe.ENV)
        plain = search(MUTANT, "default", _settings(50), shrink=True)
    assert watched.failure is not None and plain.failure is not None
    assert watched.failure.run == plain.failure.run
    assert watched.examples_to_find == plain.examples_to_find
