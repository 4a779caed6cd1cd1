"""``make bench``'s table keeps its shape: a smoke run of ``bench/search.py``.

The benchmark runs for minutes and is not part of ``make test``; its smoke
sizes run every section on the least there is (one mutant, one seed, two
request counts) in about a second. Only the table's shape is checked (its
sections, headers, rows and columns), never a figure.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bench import search as bench

HEADERS = {
    "1.": ("ratio", "median", "spread", "peftlife steps/s", "bare steps/s", "goal"),
    "2.": (
        "mutant",
        "examples med",
        "worst",
        "seconds med",
        "worst",
        "shrink s med",
        "both med",
        "actions med",
        "caught in (seeds)",
    ),
    "3.": (
        "mutant",
        "caught in (seeds)",
        "shrunk actions",
        "at shortest",
        "longer (seed: by)",
        "longer than another invariant's shortest",
        "shrunk iterations",
        "shrink s med",
        "worst",
        "replays med",
        "states explored max",
    ),
    "4.": (
        "live requests",
        "µs / iteration",
        "µs / request",
        "scheduler",
        "snapshot",
        "checks",
        "engine",
    ),
    "5.": ("rate", "simple", "overlap", "overlap / simple", "spread", "goal"),
}


def test_every_section_has_its_headers_and_a_row_per_thing_measured() -> None:
    sections = list(bench.measure(bench.SMOKE))
    assert [s.title[:2] for s in sections] == list(HEADERS)
    assert [s.header for s in sections] == list(HEADERS.values())
    for section in sections:
        assert all(len(row) == len(section.header) for row in section.rows), section.title
        assert all(cell for row in section.rows for cell in row), section.title
    steps, first, shrunk, iteration, overlap = sections
    assert [row[0] for row in steps.rows] == ["peftlife / mirror", "peftlife / argless"]
    mutants = [m.name for m in bench.SMOKE.mutants]
    assert [row[0] for row in first.rows] == [row[0] for row in shrunk.rows] == mutants
    assert [row[0] for row in iteration.rows] == [str(n) for n in bench.SMOKE.live_requests]
    assert [row[0] for row in overlap.rows] == ["rule steps/s", "executor iterations/s"]
    # Each verdict is met or short against its goal.
    assert [len(s.verdicts) for s in sections] == [2, 2, 1, 1, 2]
    assert all(re.match(r"(met|SHORT): ", v) for s in sections for v in s.verdicts)


def test_the_smoke_run_writes_its_markdown_only_where_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "bench.md"
    # An earlier table, with the sections the fuzzing and soak scripts put after it.
    others = "## Fuzzing campaigns (bench/fuzz.py)\n\nkept\n\n## Soak (bench/soak.py)\n\nkept\n"
    out.write_text("# Benchmarks\n\n## 1. old\n\nreplaced\n\n" + others, "utf-8")
    assert bench.main(["--smoke", "--out", str(out)]) == 0
    assert not (tmp_path / "docs").exists()  # the full table in docs/ is never overwritten
    printed = capsys.readouterr().out
    assert [line[:2] for line in printed.splitlines() if line[:2] in HEADERS] == list(HEADERS)
    markdown = out.read_text("utf-8")
    assert "(--smoke)" in markdown
    assert "replaced" not in markdown and markdown.endswith("\n\n" + others)
    tables = re.findall(r"^## (.*)\n\n((?:\|.*\n)+)", markdown, flags=re.MULTILINE)
    assert [title[:2] for title, _ in tables] == list(HEADERS)
    for (_, table), header in zip(tables, HEADERS.values(), strict=True):
        head, rule, *rows = table.splitlines()
        assert head == "| " + " | ".join(header) + " |"
        assert rule == "|" + "---|" * len(header)
        assert rows and all(row.count(" | ") == len(header) - 1 for row in rows)
