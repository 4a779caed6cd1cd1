"""Nothing lost: a report, a summary, a JUnit file or a database that cannot be written.

Each door tells every finding and writes what it can, with one line naming what
was not written and the OS's reason, and its exit code stays the verdict's. The
writes are made to fail as they would on a full disk or a folder gone mid-run
(a writer that raises ``OSError``, a directory that became a file), which no
permission check could have foreseen: root passes them all.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis.database import DirectoryBasedExampleDatabase

from peftlife.doors import cli
from peftlife.doors import fuzz as campaigns
from peftlife.doors.outputs import junit, summary_json
from peftlife.search import database

MUTANT = "mutant:no_release_on_suspend"
FULL = os.strerror(errno.ENOSPC)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def _full_disk(*args: Any, **kwargs: Any) -> Any:
    raise OSError(errno.ENOSPC, FULL, "reports")


# ---- fuzz ----


def test_a_report_that_fails_mid_campaign_loses_no_finding_and_no_other_output(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real, calls = campaigns.reports.write, []

    def second_fails(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) == 2:
            _full_disk()
        return real(*args, **kwargs)

    monkeypatch.setattr(campaigns.reports, "write", second_fails)
    argv = ["fuzz", "--sut", "mutant:draft_not_suspended", "--scenario", "chunked-prefill"]
    argv += ["--workers", "1", "--seed", "6", "--max-examples", "30", "--profile", "ci"]
    # No time cap: each shrink ends where it would on an idle machine, so which write is
    # the second one does not depend on the load.
    argv += ["--shrink-timeout", "0"]
    argv += ["--report-dir", "r", "--junit-xml", "j.xml", "--summary", "s.md"]
    assert cli.main(argv) == cli.EXIT_FOUND
    out = capsys.readouterr().out
    assert len(calls) >= 3, "the campaign stopped writing after the failure"
    [warning] = [line for line in out.splitlines() if "could not write the report" in line]
    assert f"to 'r' ({FULL}: reports); its story is in the summary" in warning
    data = json.loads(Path("r/summary.json").read_text("utf-8"))
    assert data["ok"] is False and warning.removeprefix("warning: ") in data["warnings"]
    unwritten = [d for d in data["defects"] if d["report"] is None]
    written = [d for d in data["defects"] if d["report"] is not None]
    assert written, "the other findings' reports were written"
    assert all(Path(d["report"]).is_file() for d in written)
    # The failed one (no shorter case of its defect came after it): its story is told.
    [defect] = unwritten
    assert defect["not_written"] == f"{FULL}: reports"
    told = out.split(f"its report not written ({FULL}: reports):")[1]
    assert told.lstrip().startswith(f"peftlife counterexample: {defect['invariant']}")
    cases = list(ET.parse("j.xml").getroot().iter("testcase"))
    assert len(cases) == len(data["defects"]) and all(c.find("failure") is not None for c in cases)
    assert "FAILED" in Path("s.md").read_text("utf-8")


def test_a_campaign_whose_ci_files_cannot_be_written_names_each_and_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(summary_json, "write", _full_disk)
    monkeypatch.setattr(junit, "write", _full_disk)
    argv = ["fuzz", "--sut", MUTANT, "--scenario", "default", "--workers", "1", "--seed", "1"]
    argv += ["--max-examples", "10", "--profile", "ci", "-q", "--report-dir", "r"]
    assert cli.main([*argv, "--junit-xml", "j.xml"]) == cli.EXIT_FOUND
    captured = capsys.readouterr()
    assert "ownership_follows_residency" in captured.out
    assert captured.err.splitlines() == [
        f"peftlife: could not write r/summary.json, the run's summary ({FULL}: reports); "
        "the run's verdict stands",
        f"peftlife: could not write j.xml, the JUnit XML ({FULL}: reports); "
        "the run's verdict stands",
    ]


# ---- check ----


def test_a_check_whose_ci_files_cannot_be_written_names_each_and_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(summary_json, "write", _full_disk)
    monkeypatch.setattr(junit, "write", _full_disk)
    argv = ["check", "--sut", MUTANT, "--profile", "ci", "-q", "--junit-xml", "j.xml"]
    assert cli.main(argv) == cli.EXIT_FOUND
    captured = capsys.readouterr()
    assert "counterexample found after" in captured.out
    assert [line.split(",")[0] for line in captured.err.splitlines()] == [
        "peftlife: could not write peftlife-reports/summary.json",
        "peftlife: could not write j.xml",
    ]
    assert list(Path("peftlife-reports").glob("*.json")), "the finding's report was written"


# ---- the example database ----


@pytest.mark.parametrize("command", ["check", "fuzz"])
def test_a_database_under_a_file_is_refused_before_the_run(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("afile").write_text("not a directory\n")
    argv = [command, "--sut", MUTANT, "--profile", "ci", "--database", "afile/db"]
    assert cli.main(argv) == cli.EXIT_BAD_INPUT
    [line] = capsys.readouterr().err.splitlines()
    assert "--database 'afile/db' cannot be written (Not a directory" in line
    assert line.endswith("give a directory you can write, or redis://host:port/db")


def test_a_database_that_stops_saving_mid_run_says_so_once(tmp_path: Path) -> None:
    said: list[str] = []
    where = tmp_path / "db"
    db = database.KeepingDatabase(DirectoryBasedExampleDatabase(str(where)), warn=said.append)
    db.save(b"k", b"1")
    assert said == [] and list(db.fetch(b"k")) == [b"1"]
    # The folder is replaced by a file mid-run: Hypothesis's save drops the value.
    for path in sorted(where.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    where.rmdir()
    where.write_text("")
    db.save(b"k", b"2")
    db.save(b"k", b"3")
    assert said == [
        f"could not save to the example database {str(where)!r} (File exists: {where}); the "
        "run goes on and its findings are reported, but are not kept for the next run"
    ]


def test_a_check_whose_database_stops_saving_tells_it_in_one_line_and_exits_1(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The database was writable when the run began (the check before it is passed by
    # hand), then became a file: what a full or unmounted disk does mid-run.
    monkeypatch.setattr(database, "unwritable", lambda path: None)
    Path("afile").write_text("")
    argv = ["check", "--sut", MUTANT, "--profile", "ci", "-q", "--database", "afile/db"]
    assert cli.main(argv) == cli.EXIT_FOUND
    captured = capfd.readouterr()
    assert "counterexample found after" in captured.out
    [line] = captured.err.splitlines()
    assert line.startswith("peftlife: could not save to the example database 'afile/db'")
    assert "Traceback" not in captured.out + captured.err
