"""The pytest plugin, as a project that installs peftlife meets it: no conftest of its own.

Each test that runs a machine runs its inner pytest session in a subprocess, so
the plugin loads through its ``pytest11`` entry point exactly as it would
elsewhere. The usage errors end before any machine runs (an option refused at
configure, a machine refused at collection), so theirs run in this process.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from peftlife import reports as report
from peftlife.sut import mutants

pytest_plugins = ["pytester"]

MUTANT = "draft_not_suspended"
SCENARIO = "draft-pool"

# Small enough to stay quick (shrinking included), large enough to find the mutant.
MACHINE_TEST = f"""
from hypothesis import Phase, settings

from peftlife import lifecycle_machine

TestBad = lifecycle_machine("mutant:{MUTANT}", "{SCENARIO}").TestCase
TestBad.settings = settings(
    max_examples=20,
    stateful_step_count=10,
    derandomize=True,
    database=None,
    deadline=None,
    phases={{phases}},
)


def test_plain_failure():
    assert 1 == 2


def test_passes():
    pass
"""

SHRINKING = MACHINE_TEST.format(phases="list(Phase)")
NOT_SHRINKING = MACHINE_TEST.format(phases="[Phase.explicit, Phase.reuse, Phase.generate]")

# A project's own profile, named for peftlife's machines with --peftlife-profile.
TINY_PROFILE = """
from hypothesis import Phase, settings

settings.register_profile(
    "tiny",
    max_examples=15,
    stateful_step_count=10,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
"""


def junit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Each test case's properties by test name."""
    cases = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        props = [(p.get("name", ""), p.get("value", "")) for p in case.iter("property")]
        cases[case.get("name", "")] = props
    return cases


def peftlife_properties(props: list[tuple[str, str]]) -> dict[str, str]:
    found = [(k, v) for k, v in props if k.startswith("peftlife_")]
    keys = [k for k, _ in found]
    assert len(keys) == len(set(keys)), f"a property written twice: {found}"
    return dict(found)


def files_in(directory: Path) -> set[str]:
    """The files under ``directory``, leaving out tool caches (.hypothesis, .pytest_cache)."""
    paths = (p.relative_to(directory) for p in directory.rglob("*") if p.is_file())
    return {p.as_posix() for p in paths if not p.parts[0].startswith(".")}


def test_a_failing_machine_writes_reports_and_junit_properties(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad=SHRINKING)
    reports = pytester.path / "reports"
    xml = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(
        "--peftlife-report-dir", str(reports), "--junitxml", str(xml)
    )
    result.assert_outcomes(failed=2, passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED

    cases = junit(xml)
    assert peftlife_properties(cases["test_plain_failure"]) == {}
    assert peftlife_properties(cases["test_passes"]) == {}
    props = peftlife_properties(cases["runTest"])
    assert set(props) == {"peftlife_invariant", "peftlife_report"}
    invariant = props["peftlife_invariant"]
    assert invariant in mutants.BY_NAME[MUTANT].acceptable

    # The report path names the JSON, written with the Markdown, the HTML page and the
    # test beside it, and the directory's index.
    json_path = Path(props["peftlife_report"])
    assert json_path.is_file()
    assert json_path.parent == reports
    name = json_path.stem
    assert invariant in name
    assert files_in(reports) == {
        f"{name}.json",
        f"{name}.md",
        f"{name}.html",
        "index.html",
        f"test_peftlife_{name}.py",
    }
    assert f"`{invariant}` violated" in (reports / f"{name}.md").read_text("utf-8")
    compile((reports / f"test_peftlife_{name}.py").read_text("utf-8"), "kept.py", "exec")

    # The JSON is the shrunk finding: it replays to the same violation.
    case = report.load_json(json_path)
    assert (case.sut, case.scenario) == (f"mutant:{MUTANT}", SCENARIO)
    assert 0 < len(case.actions) <= 6
    outcome = report.replay(case)
    assert outcome.violations
    assert outcome.violations[0].invariant == invariant
    assert report.replay(case, sut="reference").held


def test_reports_go_to_the_default_dir_or_the_ini_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad=NOT_SHRINKING)
    xml = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess("--junitxml", str(xml))
    result.assert_outcomes(failed=2, passed=1)
    props = peftlife_properties(junit(xml)["runTest"])
    assert props["peftlife_invariant"] in mutants.BY_NAME[MUTANT].acceptable
    default = Path(props["peftlife_report"])
    assert (pytester.path / default).parent == pytester.path / "peftlife-reports"

    # The default directory is left out of collection; another one would not be.
    shutil.rmtree(pytester.path / "peftlife-reports")
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\npeftlife_report_dir = "out/kept"\n')
    result = pytester.runpytest_subprocess("--junitxml", str(xml))
    result.assert_outcomes(failed=2, passed=1)
    moved = Path(peftlife_properties(junit(xml)["runTest"])["peftlife_report"])
    assert moved.parent == pytester.path / "out" / "kept"
    assert moved.is_file()


def test_a_failing_machine_fails_once_with_the_story(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad=SHRINKING)
    result = pytester.runpytest_subprocess("--peftlife-report-dir", "reports")
    result.assert_outcomes(failed=2, passed=1)
    out = result.stdout.str()
    (json_path,) = (pytester.path / "reports").glob("*.json")
    case = report.load_json(json_path)
    # The failure message is the terminal story of the shrunk case, line for line.
    for line in report.terminal_text(case, report.replay(case), width=100).splitlines():
        assert line.rstrip() in out
    assert "peftlife counterexample:" in out
    # One failure, no Hypothesis shrink report, no reprs.
    for noise in ("ExceptionGroup", "distinct failures", "EngineConfig(", "Falsifying"):
        assert noise not in out, noise


HEARTBEAT_EVERY_REPLAY = """
import peftlife.doors.plugin


def pytest_configure(config):
    peftlife.doors.plugin.SHRINK_HEARTBEAT = 0.0
"""


def test_a_shrink_tells_the_terminal_how_far_it_got_and_its_cap_reaches_the_report(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_bad=NOT_SHRINKING)
    pytester.makeconftest(HEARTBEAT_EVERY_REPLAY)
    told = pytester.runpytest_subprocess("--peftlife-report-dir", "reports")
    told.assert_outcomes(failed=2, passed=1)
    shutil.rmtree(pytester.path / "reports")
    assert re.search(
        r"^peftlife: shrinking: \d+ replays?, best \d+ actions?, \d+ s$", told.stdout.str(), re.M
    )
    result = pytester.runpytest_subprocess(
        "--peftlife-report-dir", "reports", "--peftlife-shrink-timeout", "0.000001"
    )
    result.assert_outcomes(failed=2, passed=1)
    out = result.stdout.str()
    (json_path,) = (pytester.path / "reports").glob("*.json")
    note = report.load_json(json_path).shrink_note
    assert note is not None and "time cap" in note
    assert "time cap" in out


RETARGETED = """
from peftlife import lifecycle_machine

TestReference = lifecycle_machine("reference", "default").TestCase
"""


def test_the_options_retarget_collected_machines(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_machine=RETARGETED)
    held = pytester.runpytest_subprocess("--peftlife-profile", "dev")
    held.assert_outcomes(passed=1)
    xml = pytester.path / "junit.xml"
    found = pytester.runpytest_subprocess(
        "--peftlife-sut",
        f"mutant:{MUTANT}",
        "--peftlife-scenario",
        SCENARIO,
        "--peftlife-profile",
        "ci",
        "--junitxml",
        str(xml),
    )
    found.assert_outcomes(failed=1)
    assert f"SUT mutant:{MUTANT} · scenario {SCENARIO}" in found.stdout.str()
    props = peftlife_properties(junit(xml)["runTest"])
    assert props["peftlife_invariant"] in mutants.BY_NAME[MUTANT].acceptable


PROFILE_PROBE = """
import json, sys
from hypothesis import settings

def test_probe():
    ci = settings.get_profile("ci")
    default = settings.get_profile("default")
    with open("probe.json", "w") as f:
        json.dump({"ci": repr(ci), "default": repr(default), "loaded": repr(settings())}, f)
"""


def test_hypothesis_profiles_are_left_alone(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_probe=PROFILE_PROBE)
    seen = {}
    for plugin in ("no:peftlife", "peftlife"):
        args = ("-p", plugin) if plugin.startswith("no:") else ()
        pytester.runpytest_subprocess(*args).assert_outcomes(passed=1)
        seen[plugin] = (pytester.path / "probe.json").read_text("utf-8")
    assert seen["no:peftlife"] == seen["peftlife"]


@pytest.mark.parametrize(
    ("option", "value", "fix"),
    [
        ("--peftlife-sut", "bogus", "'trtllm:PATH[:ClassName]' or 'package.module:attr'"),
        ("--peftlife-sut", "mutant:no_such_defect", "no_release_on_suspend"),
        ("--peftlife-sut", "no_such_module_xyz:factory", "sys.path"),
        ("--peftlife-scenario", "no-such-scenario", "no-such-scenario"),
        ("--peftlife-profile", "weekly", "peftlife-ci"),
        ("--peftlife-shrink-timeout", "soon", "0 for no cap"),
    ],
)
def test_bad_input_is_a_usage_error_with_one_line(
    pytester: pytest.Pytester, option: str, value: str, fix: str
) -> None:
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    result = pytester.runpytest_inprocess(option, value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = [*result.stdout.lines, *result.stderr.lines]
    mentions = [line for line in output if "peftlife: error:" in line]
    assert len(mentions) == 1, "\n".join(output)
    assert fix in mentions[0]
    assert not any("Traceback" in line for line in output), "\n".join(output)
    assert not any("passed" in line for line in output)


@pytest.mark.parametrize(
    ("sut_spec", "scenario", "fix"),
    [
        ("nosuch.mod:X", "kv-pressure", "sys.path"),
        ("reference", "no-such-scenario", "no-such-scenario"),
    ],
)
def test_a_machine_naming_bad_input_is_a_usage_error_with_one_line(
    pytester: pytest.Pytester, sut_spec: str, scenario: str, fix: str
) -> None:
    pytester.makepyfile(
        test_mine="from peftlife import lifecycle_machine\n\n"
        f"TestMine = lifecycle_machine({sut_spec!r}, {scenario!r}).TestCase\n",
        test_ok="def test_ok():\n    pass\n",
    )
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = [*result.stdout.lines, *result.stderr.lines]
    (line,) = [line for line in output if "peftlife: error:" in line]
    assert "test_mine.py" in line and fix in line
    assert not any("Traceback" in line or "-v for the traceback" in line for line in output)


def test_under_xdist_a_machine_naming_bad_input_is_still_exit_4(
    pytester: pytest.Pytester,
) -> None:
    """A worker collects, so the one line is a collection error; the exit code stays 4."""
    pytester.makepyfile(
        test_mine="from peftlife import lifecycle_machine\n\n"
        "TestMine = lifecycle_machine('nosuch.mod:X').TestCase\n",
        test_ok="def test_ok():\n    pass\n",
    )
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    output = [*result.stdout.lines, *result.stderr.lines]
    assert any("peftlife: error: test_mine.py" in line for line in output), output
    assert not any("Traceback" in line for line in output)


FIXTURES_TEST = """
def test_fixture_values(peftlife_sut, peftlife_scenario):
    assert peftlife_sut == {sut!r}
    assert peftlife_scenario == {scenario!r}


def test_reference_holds(peftlife_search):
    result = peftlife_search("reference")
    assert result.held
    assert result.sut == "reference"
    assert result.scenario == {searched!r}
    assert result.examples >= 10
"""


def test_fixtures_default_to_none(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(TINY_PROFILE)
    pytester.makepyfile(test_fx=FIXTURES_TEST.format(sut=None, scenario=None, searched="default"))
    result = pytester.runpytest_subprocess("--peftlife-profile", "tiny")
    result.assert_outcomes(passed=2)


def test_fixtures_follow_the_options(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(TINY_PROFILE)
    sut = f"mutant:{MUTANT}"
    pytester.makepyfile(
        test_fx=FIXTURES_TEST.format(sut=sut, scenario=SCENARIO, searched=SCENARIO)
        + "\n\ndef test_option_sut_is_searched(peftlife_search):\n    peftlife_search()\n"
    )
    xml = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(
        "--peftlife-sut",
        sut,
        "--peftlife-scenario",
        SCENARIO,
        "--peftlife-profile",
        "tiny",
        "--junitxml",
        str(xml),
    )
    # The reference holds in the chosen scenario; the chosen mutant is found by the
    # fixture's default search, and the hook records what it broke.
    result.assert_outcomes(passed=2, failed=1)
    cases = junit(xml)
    assert peftlife_properties(cases["test_reference_holds"]) == {}
    props = peftlife_properties(cases["test_option_sut_is_searched"])
    assert set(props) == {"peftlife_invariant", "peftlife_report"}
    assert props["peftlife_invariant"] in mutants.BY_NAME[MUTANT].acceptable


class _Terminal:
    """What the heartbeat needs of pytest's config: a terminal reporter that keeps its lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.pluginmanager = self

    def get_plugin(self, name: str) -> object:
        return self if name == "terminalreporter" else None

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def test_the_shrink_heartbeat_times_each_shrink_from_its_first_step_heard() -> None:
    """Steps reach the heartbeat as the supervisor polls the search's child, so the first
    one heard may count dozens of replays: the time is still the shrink's, not the clock's."""
    from peftlife.doors import plugin
    from peftlife.search import shrink

    now = [9000.0]  # a machine up for hours: its monotonic clock is far from zero
    terminal = _Terminal()
    heartbeat = plugin._shrink_heartbeat(terminal, clock=lambda: now[0])  # type: ignore[arg-type]

    def step(replays: int, at: float) -> None:
        now[0] = at
        heartbeat(shrink.ShrinkProgress(replays, 4))

    step(58, 9000.0)  # the first step heard: a shrink begins, its line one period away
    step(59, 9000.5)
    assert terminal.lines == []
    step(70, 9000.0 + plugin.SHRINK_HEARTBEAT + 1)
    assert terminal.lines == ["peftlife: shrinking: 70 replays, best 4 actions, 6 s"]
    # The next shrink counts from one again, whatever it is first heard at.
    step(12, 9100.0)
    step(30, 9100.0 + plugin.SHRINK_HEARTBEAT + 2)
    assert terminal.lines[1:] == ["peftlife: shrinking: 30 replays, best 4 actions, 7 s"]


# The idiom of Hypothesis's docs: profiles registered and one loaded in conftest.py.
LOADING_CONFTEST = """
from hypothesis import settings

settings.register_profile("quick", max_examples=12, stateful_step_count=8, derandomize=True)
settings.register_profile("other", max_examples=4, stateful_step_count=8, derandomize=True)
settings.register_profile("mine", max_examples=5, stateful_step_count=8, derandomize=True)
settings.load_profile("quick")
"""
DECORATED = """
from hypothesis import settings

TestDecorated = lifecycle_machine("reference", "kv-pressure").TestCase
TestDecorated.settings = settings(max_examples=2, stateful_step_count=8, derandomize=True)
"""


def _searched(pytester: pytest.Pytester, *args: str) -> dict[str, int]:
    """Each machine test's examples, read from its one statistics block."""
    result = pytester.runpytest_subprocess("--hypothesis-show-statistics", *args)
    out = result.stdout.str()
    statistics = out[out.index("Hypothesis Statistics") :]
    counts = {}
    for name in re.findall(r"^test_machine\.py::(\w+)::runTest:$", statistics, re.M):
        block = statistics.split(f"::{name}::runTest:")[1].split("::runTest:")[0]
        # One block per test, however many slices its search ran in, stopped at its budget.
        assert statistics.count(f"::{name}::runTest:") == 1, statistics
        examples = re.search(r"peftlife: (\d+) examples?,", block)
        stopped = re.search(r"Stopped because settings\.max_examples=(\d+)", block)
        assert examples and stopped, block
        assert examples[1] == stopped[1], block
        counts[name] = int(examples[1])
    return counts


def test_a_profile_loaded_in_conftest_applies_as_hypothesis_applies_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(LOADING_CONFTEST)
    pytester.makepyfile(test_machine=RETARGETED + DECORATED)
    # Loaded in conftest.py: 12 examples, searched in two slices, told as one search.
    assert _searched(pytester) == {"TestReference": 12, "TestDecorated": 2}
    # --hypothesis-profile is loaded after the conftest, as Hypothesis loads it.
    assert _searched(pytester, "--hypothesis-profile", "other")["TestReference"] == 4
    # peftlife's own option comes first; settings set on a machine come before any profile.
    asked = _searched(pytester, "--peftlife-profile", "mine", "--hypothesis-profile", "other")
    assert asked == {"TestReference": 5, "TestDecorated": 2}
    # --hypothesis-verbosity loads a copy of the profile: still the same profile.
    assert _searched(pytester, "--hypothesis-verbosity", "verbose")["TestReference"] == 12


def test_without_a_loaded_profile_machines_keep_peftlifes_default(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)  # CI's default is peftlife-ci, not dev's 40
    pytester.makepyfile(test_machine=RETARGETED)
    result = pytester.runpytest_subprocess("--hypothesis-show-statistics", "-p", "no:randomly")
    assert re.search(r"peftlife: 40 examples,", result.stdout.str()), result.stdout.str()


def test_a_finding_met_replaying_the_database_says_so_not_a_seed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A random run, as on a developer's machine: CI's derandomized profile has a seed of
    # its own to tell, and a run with a seed is the first half of this test.
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(test_bad=NOT_SHRINKING)
    xml = pytester.path / "junit.xml"
    told = {}
    for run in ("fresh", "replayed"):
        shutil.rmtree(pytester.path / "reports", ignore_errors=True)
        result = pytester.runpytest_subprocess(
            "--peftlife-database", "db", "--junitxml", str(xml), "--peftlife-report-dir", "reports"
        )
        result.assert_outcomes(failed=2, passed=1)
        (header,) = [line for line in result.stdout.lines if line.startswith("SUT mutant:")]
        told[run] = (header, peftlife_properties(junit(xml)["runTest"]))
    header, props = told["fresh"]
    assert re.search(r"· seed \d+ \(", header), header
    assert "peftlife_seed" in props and "peftlife_replayed" not in props
    header, props = told["replayed"]
    assert header.endswith("· seed none (met replaying the example database)"), header
    assert "peftlife_seed" not in props, props
    assert "example database" in props["peftlife_replayed"]
    (json_path,) = (pytester.path / "reports").glob("*.json")
    assert report.load_json(json_path).seed is None


def test_a_bare_pytest_leaves_out_a_regression_test_still_beside_its_report(
    pytester: pytest.Pytester,
) -> None:
    """As after the README's ``peftlife check ... --report-dir reports``: the folder's
    regression test is a report until it is moved out, or its folder is named."""
    name = "mutant_x_default_ownership_follows_residency_0a1b2c3d"
    failing = "def test_still_fails():\n    assert False\n"
    pytester.makefile(".json", **{f"reports/{name}": "{}"})
    pytester.makepyfile(**{f"reports/test_peftlife_{name}": failing})
    pytester.makepyfile(**{"tests/test_peftlife_kept_0a1b2c3d": failing})  # moved: kept
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")

    def collected(*args: str) -> list[str]:
        result = pytester.runpytest_inprocess("--co", "-q", *args)
        return sorted(line.split("::")[0] for line in result.stdout.lines if "::" in line)

    kept = "tests/test_peftlife_kept_0a1b2c3d.py"
    assert collected() == ["test_ok.py", kept]
    assert collected("reports") == [f"reports/test_peftlife_{name}.py"]
    assert collected(f"reports/test_peftlife_{name}.py") == [f"reports/test_peftlife_{name}.py"]
