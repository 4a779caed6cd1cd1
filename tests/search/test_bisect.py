"""``peftlife bisect``: the first commit whose scheduler fails, git's way, read only.

The repository (``tests/bisect_repo.py``) holds eight commits of the fake
TensorRT-LLM checkout: the defect of issue #18407 arrives at commit 5 and
commit 6 cannot be loaded. Each commit is probed from ``git show`` into a
folder of its own; the work tree, the index and HEAD stay as they were.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from tests import bisect_repo

from peftlife.doors import cli
from peftlife.search import bisect

SUBJECTS = bisect_repo.SUBJECTS


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A bisect without --report-dir writes ./peftlife-reports: never into the checkout.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    path = tmp_path_factory.mktemp("bisect") / "sched-repo"
    shas = bisect_repo.build(path)
    # Work in progress in the work tree and the index: bisect must leave both alone.
    (path / "README.md").write_text("A scheduler, being edited.\n", "utf-8")
    (path / "NOTES.md").write_text("staged\n", "utf-8")
    git(path, "add", "NOTES.md")
    return path, shas


@pytest.fixture(scope="module")
def case(repo: tuple[Path, list[str]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The nightly finding: a report of the work tree's (the bad commit's) failure."""
    reports = tmp_path_factory.mktemp("nightly")
    code, _ = run(
        *("check", "--sut", f"trtllm:{repo[0]}", "--scenario", "chunked-prefill"),
        *("--profile", "ci", "--report-dir", str(reports), "-q"),
    )
    assert code == 1
    (report,) = reports.glob("trtllm_*.json")
    return report


def git(path: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(path), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def state(path: Path) -> tuple[str, bytes, str]:
    """HEAD, the index file itself, and the status of the work tree and index."""
    index = (path / ".git" / "index").read_bytes()
    return git(path, "rev-parse", "HEAD"), index, git(path, "status", "--porcelain")


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


def test_bisect_a_saved_case_names_commit_5(
    repo: tuple[Path, list[str]], case: Path, tmp_path: Path
) -> None:
    path, shas = repo
    before = state(path)
    code, out = run(
        *("bisect", "--repo", str(path), "--good", "v1", "--bad", "main"),
        *("--case", str(case), "--report-dir", str(tmp_path)),
    )
    assert code == 0, out
    assert f"first bad commit: {shas[4]} {SUBJECTS[4]}" in out
    # The unloadable commit was probed, skipped, and said why.
    skipped = next(line for line in out.splitlines() if " skip " in line)
    assert shas[5][:10] in skipped and "log_once" in skipped and "/tmp/" not in skipped
    assert f"last good commit: {shas[3][:10]} {SUBJECTS[3]}: the case replays" in out
    assert "peftlife counterexample: ownership_follows_residency" in out
    # The report of the first bad commit replays from the folder kept beside it.
    (report,) = tmp_path.glob("trtllm_*.json")
    assert run("replay", str(report), "-q")[0] == 1
    assert state(path) == before


def test_bisect_a_bounded_search_names_commit_5(
    repo: tuple[Path, list[str]], tmp_path: Path
) -> None:
    path, shas = repo
    before = state(path)
    code, out = run(
        *("bisect", "--repo", str(path), "--good", shas[0], "--bad", shas[7]),
        *("--scenario", "chunked-prefill", "--max-examples", "20"),
        *("--report-dir", str(tmp_path), "-q"),
    )
    assert code == 0, out
    assert f"first bad commit: {shas[4]} {SUBJECTS[4]}" in out
    assert "every invariant holds" in out
    assert state(path) == before


def test_bisect_leaves_the_ci_outputs_check_does(
    repo: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """summary.json, the step summary and JUnit: a case per commit probed, the first bad
    one failed with its story, each with the seed every commit was searched with."""
    path, shas = repo
    code, out = run(
        *("bisect", "--repo", str(path), "--good", shas[0], "--bad", shas[7]),
        *("--scenario", "chunked-prefill", "--max-examples", "20", "--seed", "3"),
        *("--report-dir", "r", "-q", "--junit-xml", "j.xml", "--summary", "s.md"),
    )
    assert code == 0, out
    data = json.loads((tmp_path / "r" / "summary.json").read_text("utf-8"))
    assert data["command"] == "bisect" and data["ok"] is True
    assert data["first_bad"] == {"sha": shas[4], "subject": SUBJECTS[4]}
    assert data["seed"] == 3 and data["rerun"].endswith("--max-examples 20 --seed 3")
    assert "derandomized" not in data
    (finding,) = data["findings"]  # a baseline of the bisection
    assert finding["invariant"] == "ownership_follows_residency"
    assert {p["verdict"] for p in data["probes"]} == {"good", "bad", "skip"}
    root = ET.parse(tmp_path / "j.xml").getroot()
    cases = {c.get("name", "").split()[0]: c for c in root.iter("testcase")}
    assert set(cases) == {p["commit"][:12] for p in data["probes"]}
    first = cases[shas[4][:12]]
    failure = first.find("failure")
    assert failure is not None and (failure.text or "").startswith("peftlife counterexample:")
    props = {p.get("name"): p.get("value") for p in first.iter("property")}
    assert props["peftlife_seed"] == "3" and props["peftlife_rerun"] == data["rerun"]
    assert cases[shas[5][:12]].find("skipped") is not None
    assert cases[shas[0][:12]].find("failure") is None
    text = (tmp_path / "s.md").read_text("utf-8")
    assert f"peftlife bisect: first bad commit {shas[4][:12]}" in text
    assert "violated" in text  # the finding's Markdown report follows


def test_sut_prefix_names_the_scheduler_to_load(
    repo: tuple[Path, list[str]], case: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = repo
    code = cli.main(
        [
            *("bisect", "--repo", str(path), "--good", "v1", "--bad", "main"),
            *("--case", str(case), "--sut-prefix", "trtllm:{}:CorrectKVCacheV2Scheduler"),
        ]
    )
    assert code == 2
    assert "does not fail a replay: nothing to bisect" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("good", "bad", "says"),
    [
        ("main", "v1", "is not an ancestor of --bad"),
        ("v1", "nosuchrev", "--bad 'nosuchrev' names no commit"),
        ("main~3", "main", "fails already (ownership_follows_residency)"),
        ("v1", "main~4", "does not fail a replay: nothing to bisect"),
        ("v1", "main~2", "cannot be loaded"),
    ],
)
def test_bisect_bad_input_exits_2(
    repo: tuple[Path, list[str]],
    case: Path,
    good: str,
    bad: str,
    says: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, _ = repo
    code = cli.main(
        [*("bisect", "--repo", str(path), "--good", good, "--bad", bad, "--case", str(case), "-q")]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and says in err, err


def test_a_range_of_one_commit_names_it(
    repo: tuple[Path, list[str]], case: Path, tmp_path: Path
) -> None:
    path, shas = repo
    code, out = run(
        "bisect", "--repo", str(path), "--good", "main~4", "--bad", "main~3", "--case", str(case)
    )
    assert code == 0, out
    assert f"first bad commit: {shas[4]}" in out
    # Its reports went to the default folder, in the working directory, which git ignores.
    assert (tmp_path / "peftlife-reports" / ".gitignore").is_file()
    assert list((tmp_path / "peftlife-reports").glob("bisect-*"))


def test_bisect_refuses_what_is_not_a_repository(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bisect", "--repo", str(tmp_path), "--good", "a", "--bad", "b", "--scenario", "default"]
    assert cli.main(argv) == 2
    assert "is not a git repository" in capsys.readouterr().err


# ---- the bisection alone ----


def commits(n: int) -> list[bisect.Commit]:
    return [bisect.Commit(f"{i:040d}", f"commit {i}") for i in range(2, n + 1)]


def probe_with(
    first_bad: int, skipped: set[int]
) -> tuple[list[int], Callable[[bisect.Commit], bisect.Probe]]:
    probed: list[int] = []

    def probe(commit: bisect.Commit) -> bisect.Probe:
        number = int(commit.sha)
        probed.append(number)
        if number in skipped:
            return bisect.Probe(commit, "skip", "cannot be loaded")
        return bisect.Probe(commit, "bad" if number >= first_bad else "good")

    return probed, probe


@pytest.mark.parametrize("first_bad", range(2, 17))
def test_bisection_finds_the_first_bad_commit_in_log_steps(first_bad: int) -> None:
    probed, probe = probe_with(first_bad, set())
    result = bisect.bisect(commits(16), probe)
    assert int(result.first_bad.commit.sha) == first_bad
    assert result.candidates == ()
    assert len(probed) - 1 <= bisect.steps(15)


def test_only_skipped_commits_left_lists_every_candidate() -> None:
    _, probe = probe_with(5, {3, 4})
    result = bisect.bisect(commits(8), probe)
    assert [int(c.sha) for c in result.candidates] == [3, 4, 5]
    assert result.last_good is not None and int(result.last_good.commit.sha) == 2


def test_every_probed_commit_is_searched_with_one_seed(
    repo: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe's folder is temporary, and a derandomized search's seed follows the
    machine's name, which holds it: without one seed of its own, each run would differ."""
    from peftlife.doors.cli import bisect as bisect_command

    seeds: list[int | None] = []
    real = bisect_command.search

    def recording(*args: object, seed: int | None = None, **kwargs: object) -> object:
        seeds.append(seed)
        return real(*args, seed=seed, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bisect_command, "search", recording)
    path, shas = repo
    code, out = run(
        *("bisect", "--repo", str(path), "--good", shas[0], "--bad", shas[7]),
        *("--scenario", "chunked-prefill", "--max-examples", "20"),
        *("--report-dir", str(tmp_path), "-q"),
    )
    assert code == 0, out
    assert len(seeds) >= 3 and len(set(seeds)) == 1 and seeds[0] is not None, seeds


# ---- a scheduler written to the protocol ----

PROTOCOL_VERSIONS = (
    ("A suspender", "from peftlife.sut.reference import ReferenceScheduler as Suspender\n"),
    ("Suspend: a comment", "# Suspends the last started request.\n"),
    (
        "Suspend: keep the adapter",
        'from peftlife.sut.mutants import BY_NAME\n\nSuspender = BY_NAME["no_release_on_suspend"]'
        ".scheduler\n",
    ),
    ("Suspend: another comment", "# Still suspends the last started request.\n"),
)


def test_bisect_a_protocol_scheduler_imports_each_commit_from_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--sut-prefix mypkg.sched:Suspender``: each commit's ``mypkg`` is imported afresh."""
    from tests.report_cases import CASE

    from peftlife import reports

    repo = tmp_path / "project"
    (repo / "mypkg").mkdir(parents=True)
    bisect_repo._git(repo, "init", "-q", "-b", "main")
    (repo / "mypkg" / "__init__.py").write_text("")
    source = ""
    for when, (subject, text) in enumerate(PROTOCOL_VERSIONS):
        source = text if "import" in text else source + text
        (repo / "mypkg" / "sched.py").write_text(source, "utf-8")
        bisect_repo._git(repo, "add", "-A")
        bisect_repo._git(repo, "commit", "-q", "-m", subject, when=when)
    shas = bisect_repo._git(repo, "rev-list", "--reverse", "main").split()
    case = reports.write(CASE, reports.replay(CASE), tmp_path / "nightly")["json"]
    code, out = run(
        *("bisect", "--repo", str(repo), "--good", shas[0], "--bad", "main"),
        *("--case", str(case), "--sut-prefix", "mypkg.sched:Suspender", "--path", "mypkg"),
        *("--report-dir", str(tmp_path / "reports")),
    )
    assert code == 0, out
    assert f"first bad commit: {shas[2]} Suspend: keep the adapter" in out
    assert "the case replays and every invariant holds" in out
    assert "mypkg" not in sys.modules  # each commit's package was imported and let go
    (report,) = (tmp_path / "reports").glob("mypkg_*.json")
    spec = json.loads(report.read_text("utf-8"))["sut"]
    assert spec.startswith("mypkg.sched:Suspender@") and spec.endswith(f"bisect-{shas[2][:10]}")
    assert run("replay", str(report), "-q")[0] == 1  # from the folder kept beside it
