"""The guide and the README say what is true: the skeleton passes, the example runs as written.

The README's example is extracted from the README itself and run in a fresh
directory, with the skeleton of ``docs/examples/skeleton.py`` as the author's
scheduler; its exit codes are the ones the README's comments promise.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import peftlife
from peftlife import reports
from peftlife.doors.outputs.story import warn_unreached
from peftlife.search import profiles
from peftlife.search.hunt import SearchResult, search
from peftlife.search.scenarios import load, shipped_names

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text("utf-8")
DOCS = sorted((ROOT / "docs").glob("*.md"))
SKELETON = ROOT / "docs" / "examples" / "skeleton.py"


def blocks(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks of a Markdown text: (language, body)."""
    return re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S)


# ---- the skeleton ----


def warning_of(result: SearchResult) -> str:
    """The warning ``check`` prints for a run that held, as one line."""
    console = Console(record=True, width=1000)
    warn_unreached(result, console)
    return console.export_text().strip()


# A hundred examples per scenario, the budget tests/search/test_machine.py holds the reference
# to (the ci profile's three hundred in eleven scenarios made this the suite's slowest
# test). It still tells: a skeleton that forgets the adapters in its admission budget
# fails in eight scenarios of eleven at this budget, the first after four examples.
SKELETON_EXAMPLES = 100


@pytest.mark.parametrize("scenario", shipped_names())
def test_the_skeleton_holds_in_every_shipped_scenario(scenario: str) -> None:
    settings = profiles.for_search(profiles.get("ci"), max_examples=SKELETON_EXAMPLES)
    result = search("docs.examples.skeleton:Skeleton", scenario, settings, shrink=False)
    assert result.held, str(result.failure)
    assert result.examples >= SKELETON_EXAMPLES
    # It really runs requests to completion (a scheduler that did nothing would fail the drain).
    assert result.coverage["rule: step"] > 0
    if scenario == "kv-pressure":  # the page's "Try it": it shows the warning check prints
        page = (ROOT / "docs" / "skeleton.md").read_text("utf-8")
        assert warning_of(result) in page


def test_the_readme_shows_the_warning_make_check_prints() -> None:
    result = search("reference", "default", profiles.get("ci"), shrink=False)
    assert result.held
    sample = next(body for _, body in blocks(README) if body.startswith("held: "))
    # The warning line, when the run leaves a path unreached; else the gate's table follows.
    assert sample.splitlines()[1] == (warning_of(result) or "peftlife mutant gate")


def test_every_type_the_protocol_names_is_importable_from_peftlife() -> None:
    page = (ROOT / "docs" / "protocol.md").read_text("utf-8")
    assert "Everything below is importable from `peftlife`." in page
    named = set(re.findall(r"`([A-Z][A-Za-z]+)`", page))
    named -= {"None", "True", "False", "SystemExit"}
    assert {"KVCacheManager", "PeftCacheManager", "Environment"} <= named
    for name in named:
        assert hasattr(peftlife, name), name


def test_no_page_installs_peftlife_from_an_index() -> None:
    """peftlife is on no package index: every install names a checkout."""
    for path in [ROOT / "README.md", *DOCS]:
        for line in path.read_text("utf-8").splitlines():
            command = line.partition("pip install")[2].partition("#")[0]
            for word in command.replace("`", " ").split():
                assert not word.strip("'\"").startswith("peftlife"), (path.name, line)


def test_the_reports_page_names_every_file_a_finding_writes(tmp_path: Path) -> None:
    from tests.report_cases import CASE

    page = (ROOT / "docs" / "reports.md").read_text("utf-8")
    outcome = reports.replay(CASE)
    paths = reports.write(CASE, outcome, tmp_path)
    name = reports.case_name(CASE, outcome)
    files = [p.name.replace(name, "<name>") for key, p in paths.items() if key != "index"]
    assert len(files) == 4 and "Each finding writes four files" in page
    for file in [*files, "index.html"]:
        assert f"`{file}`" in page, file


def test_the_skeleton_page_says_it_holds_under_the_overlap_executor() -> None:
    """Its section names every shipped overlap scenario, each searched by the test above."""
    page = (ROOT / "docs" / "skeleton.md").read_text("utf-8")
    section = page.split("## Under the overlap executor", 1)[1]
    overlap = [n for n in shipped_names() if load(n).overlap]
    assert overlap
    for name in overlap:
        assert f"`{name}`" in section, name


def test_the_skeleton_page_shows_the_tested_file_and_it_is_short() -> None:
    page = (ROOT / "docs" / "skeleton.md").read_text("utf-8")
    source = SKELETON.read_text("utf-8")
    assert ("python", source) in blocks(page)
    code = [line for line in source.splitlines() if line.strip() and not line.startswith('"""')]
    assert len(code) <= 60, len(code)
    assert max(len(line) for line in source.splitlines()) <= 100


# ---- links and where they point ----


@pytest.mark.parametrize("path", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_links_stay_inside_the_repository_and_resolve(path: Path) -> None:
    text = path.read_text("utf-8")
    assert "../shared" not in text and "/work/shared" not in text
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if target.startswith(("http://", "https://")):
            continue
        assert (path.parent / target).resolve().is_file(), f"{path.name}: {target}"


def test_the_readme_links_to_every_guide_page() -> None:
    for page in DOCS:
        assert f"docs/{page.name}" in README, page.name


def test_the_readme_report_is_the_golden_file() -> None:
    golden = (ROOT / "tests" / "golden" / "terminal.txt").read_text("utf-8")
    assert any(body == golden for _, body in blocks(README))


# ---- the README's example, as written ----


def readme_example() -> tuple[str, list[str]]:
    """The test file and the command lines of the README's 'Test your scheduler'."""
    found = blocks(README)
    (test_file,) = [body for lang, body in found if body.startswith("# test_scheduler.py")]
    (commands,) = [body for _, body in found if body.startswith("pytest -q test_scheduler.py")]
    return test_file, [line for line in commands.splitlines() if line.strip()]


def expected_exit(line: str) -> int:
    promised = re.search(r"exit (\d)", line.partition("#")[2])
    return int(promised[1]) if promised else 0


def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    test_file, commands = readme_example()
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "sched.py").write_text(SKELETON.read_text("utf-8"), "utf-8")
    (tmp_path / "test_scheduler.py").write_text(test_file, "utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    # As a user runs it on their machine: the random dev profile, a fresh directory.
    env.pop("CI", None)
    # Last, a bare pytest where the block left reports/ (a regression test beside each
    # JSON report): it runs the user's test, not the reports.
    for line in [*commands, "pytest -q -p no:cacheprovider"]:
        run = subprocess.run(
            ["bash", "-c", line],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert run.returncode == expected_exit(line), f"{line}\n{run.stdout}\n{run.stderr}"
        if line.startswith("pytest"):
            assert "1 passed" in run.stdout, run.stdout
        if "replay" in line:
            held = "every invariant held" in run.stdout
            assert held == (expected_exit(line) == 0), run.stdout
    assert list((tmp_path / "reports").glob("test_peftlife_*.py"))


def test_the_invariants_page_has_the_registrys_table_of_sources() -> None:
    """docs/invariants.md's table is ``peftlife invariants --sources``, row for row."""
    from peftlife.checker.registry import REGISTRY
    from peftlife.doors.cli.invariants import sources_table

    page = (ROOT / "docs" / "invariants.md").read_text("utf-8")
    assert sources_table() in page
    # Every numbered rule the page explains is a record, under its name.
    explained = re.findall(r"^\*\*(\d+b?)\. `(\w+)`\*\*", page, flags=re.M)
    assert set(explained) == {(i.number, i.name) for i in REGISTRY if i.number}
