"""The facts a manager call records are a typed record, and every one is written.

A fact no writer sets reads as None on every call, which quietly turns off a
check that reads it. The world's writers (the KV pools and the PEFT manager)
build ``Facts`` and ``Args`` records; these tests read the source and show
that every field of both records is set by some writer in ``world/``, and that
every fact the harness reads (``call.facts.X``, ``call.args.X``) is one of them.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import attrs
import pytest
from tests.report_cases import CASE

from peftlife.reports.finding.case import replay, to_json
from peftlife.world.ledger import Args, Call, Facts, Method

SRC = Path(__file__).resolve().parents[2] / "src" / "peftlife"
RECORDS: dict[str, type[Args] | type[Facts]] = {"args": Args, "facts": Facts}


def _trees(folder: Path) -> Iterator[tuple[Path, ast.AST]]:
    for path in sorted(folder.rglob("*.py")):
        yield path, ast.parse(path.read_text("utf-8"), str(path))


def written() -> dict[str, set[str]]:
    """Per record, the fields some writer in ``world/`` sets: by keyword, building the
    record (``Facts(fault=...)``) or evolving one (``attrs.evolve(facts, before=...)``)."""
    found: dict[str, set[str]] = {kind: set() for kind in RECORDS}
    for _, tree in _trees(SRC / "world"):
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("Args", "Facts"):
                kind = func.id.lower()
            elif (
                isinstance(func, ast.Attribute)
                and func.attr == "evolve"
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in RECORDS
            ):
                kind = node.args[0].id
            else:
                continue
            found[kind] |= {k.arg for k in node.keywords if k.arg is not None}
    return found


def read() -> dict[str, set[tuple[str, str]]]:
    """Per record, every ``<something>.facts.X`` / ``.args.X`` the package reads, with where."""
    found: dict[str, set[tuple[str, str]]] = {kind: set() for kind in RECORDS}
    for path, tree in _trees(SRC):
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr in RECORDS
            ):
                where = f"{path.relative_to(SRC)}:{node.lineno}"
                found[node.value.attr].add((node.attr, where))
    return found


@pytest.mark.parametrize("kind", RECORDS)
def test_every_field_is_written_by_the_world(kind: str) -> None:
    fields = {f.name for f in attrs.fields(RECORDS[kind])}
    assert fields - written()[kind] == set(), "fields no writer in world/ sets"
    assert written()[kind] <= fields


@pytest.mark.parametrize("kind", RECORDS)
def test_every_fact_read_is_a_fact_written(kind: str) -> None:
    unwritten = sorted((name, where) for name, where in read()[kind] if name not in written()[kind])
    assert unwritten == []


def test_the_scan_sees_the_readers() -> None:
    """Not vacuous: it finds the reads the checker, the search and the reports depend on."""
    facts = {name for name, _ in read()["facts"]}
    assert {"was_active", "was_paused", "already_active", "registered_before"} <= facts
    assert {"before", "after", "started", "had_cache", "fault", "evicted"} <= facts
    assert {name for name, _ in read()["args"]} == {"task_id", "pause", "tasks"}
    readers = {where.split("/")[0] for _, where in read()["facts"]}
    assert {"world", "checker", "search", "reports"} <= readers


def test_a_misspelt_fact_is_an_error_not_a_none() -> None:
    call = Call(1, "scheduler", "peft", "mark_request_done", 1, facts=Facts(was_active=True))
    with pytest.raises(AttributeError):
        _ = call.facts.was_activ  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        Facts(was_activ=True)  # type: ignore[call-arg]


def test_a_call_in_the_report_json_keeps_its_shape() -> None:
    """A call is still ``args`` and ``detail`` objects holding only what the call set."""
    steps = to_json(CASE, replay(CASE))["steps"]
    calls = [c for s in steps for c in s["snapshot"]["step"]["calls"]]
    grow = next(c for c in calls if c["method"] == "try_allocate_generation")
    assert (grow["args"], grow["detail"]) == (
        {},
        {"before": "ACTIVE", "after": "ACTIVE", "fault": "failed_grow"},
    )
    registration = next(c for c in calls if c["method"] == "add_request_peft")
    assert registration["args"] == {"task_id": 1}
    assert registration["detail"] == {
        "started": False,
        "was_paused": False,
        "already_active": False,
        "registered_before": False,
    }
    assert json.loads(json.dumps(calls)) == calls


# ---- method names ----


def _strings(node: ast.AST) -> set[str]:
    """The string constants of a comparison's right side: one, or a tuple or set of them."""
    items = node.elts if isinstance(node, ast.Tuple | ast.Set | ast.List) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def compared_methods() -> set[tuple[str, str]]:
    """Every name the package compares a call's method with (``c.method == "..."``,
    ``call.method in (...)``), with where."""
    found: set[tuple[str, str]] = set()
    for path, tree in _trees(SRC):
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and (
                isinstance(node.left, ast.Attribute) and node.left.attr == "method"
            ):
                where = f"{path.relative_to(SRC)}:{node.lineno}"
                found |= {(name, where) for c in node.comparators for name in _strings(c)}
    return found


def test_every_method_compared_is_one_the_ledger_declares() -> None:
    declared = set(get_args(Method))
    compared = compared_methods()
    assert {name for name, _ in compared} >= {"add_request_peft", "ensure_batch"}  # not vacuous
    assert sorted((n, w) for n, w in compared if n not in declared) == []


def test_every_declared_method_is_recorded_by_the_world() -> None:
    said = {
        node.value
        for name in ("kv.py", "peft.py")
        for node in ast.walk(ast.parse((SRC / "world" / name).read_text("utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert set(get_args(Method)) <= said
