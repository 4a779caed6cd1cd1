"""Untrusted code and bad input at every front door.

Each row is one bad input, the door it comes through, and what must be said:
exit 2 with one ``peftlife: error:`` line naming what is wrong and how to fix
it, before any search runs. A bug that was found is never turned into exit 2
and never lost, not even when its reports cannot be written.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peftlife import reports, sut
from peftlife.checker.drain import drain_premise_broken
from peftlife.doors import cli
from peftlife.doors.cli import check
from peftlife.search import gate, scenarios
from peftlife.search.hunt import lifecycle_machine
from peftlife.search.trace import Action
from peftlife.sut import wiring
from peftlife.world.config import EngineConfig

pytest_plugins = ["pytester"]

DEFAULT_TOML = (Path(scenarios.__file__).parent / "strategies" / "default.toml").read_text("utf-8")


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # main() puts the cwd on sys.path: each test gets its own directory and its own modules.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    for name in [m for m in sys.modules if m.startswith("bad_")]:
        monkeypatch.delitem(sys.modules, name)


def _main(capsys: pytest.CaptureFixture[str], argv: Sequence[str]) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except BaseException as err:  # whatever escapes main (SystemExit too) is the failure
        pytest.fail(f"peftlife {' '.join(argv)}: {type(err).__name__} escaped main: {err}")
    out, err = capsys.readouterr()
    return code, out, err


def _refused(capsys: pytest.CaptureFixture[str], argv: Sequence[str], *hints: str) -> str:
    """Exit 2, one 'peftlife: error:' line on stderr holding every hint, nothing on stdout."""
    code, out, err = _main(capsys, argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == cli.EXIT_BAD_INPUT, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("peftlife: error:"), err
    assert out == "", out
    for hint in hints:
        assert hint in lines[0], (hint, lines[0])
    return lines[0]


def _module(name: str, source: str) -> str:
    Path(f"{name}.py").write_text(source, "utf-8")
    importlib.invalidate_caches()
    return name


def _no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a search starts: bad input is refused before any example."""

    def search(*args: Any, **kwargs: Any) -> Any:
        pytest.fail("a search ran on bad input")

    monkeypatch.setattr(check, "search", search)


# ---- 1. a SUT module that fails while it is imported ----

IMPORT_FAILURES = [
    pytest.param(
        "raise RuntimeError('boom at import')\n", "RuntimeError: boom at import", 1, id="raises"
    ),
    pytest.param("def factory(env)\n    return 1\n", "SyntaxError", 1, id="syntax-error"),
    pytest.param("import sys\nsys.exit(3)\n", "SystemExit: 3", 2, id="sys-exit"),
    pytest.param("import no_such_dependency_xyz\n", "No module named", 1, id="missing-dependency"),
    pytest.param(
        "raise KeyboardInterrupt('at import')\n",
        "KeyboardInterrupt: at import",
        1,
        id="keyboard-interrupt",
    ),
    pytest.param(
        "def __getattr__(name):\n    raise SystemExit(4)\n",
        "SystemExit: 4",
        2,
        id="module-getattr-exits",
    ),
]


@pytest.mark.parametrize(("source", "error", "line"), IMPORT_FAILURES)
@pytest.mark.parametrize("door", ["check", "replay"])
def test_a_sut_module_that_fails_on_import_is_refused(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    error: str,
    line: int,
    door: str,
) -> None:
    _no_search(monkeypatch)
    module = _module("bad_import", source)
    argv = ["check", "--sut", f"{module}:factory"]
    if door == "replay":
        argv = ["replay", str(_report(Path("r.json"))), "--sut", f"{module}:factory"]
    where = f"{Path(f'{module}.py').resolve()}:{line}"
    _refused(capsys, argv, "'bad_import'", error, where, "fix the module", "-v")


def test_verbose_adds_the_traceback_before_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    module = _module("bad_verbose", "def helper():\n    raise KeyError('deep')\nhelper()\n")
    code, _, err = _main(capsys, ["check", "--sut", f"{module}:factory", "-v"])
    assert code == cli.EXIT_BAD_INPUT
    assert "Traceback (most recent call last)" in err
    assert 'bad_verbose.py", line 2, in helper' in err
    assert err.strip().splitlines()[-1].startswith("peftlife: error: importing SUT module")


# ---- 2. the wiring check: the factory built once in a small world ----

WIRING = [
    pytest.param(
        "def factory(env):\n    raise RuntimeError('no pools for me')\n",
        ["raised RuntimeError: no pools for me", "bad_wiring.py:2", "fix the factory"],
        id="factory-raises",
    ),
    pytest.param(
        "def factory(env):\n    while True:\n        pass\n",
        ["did not return within 0.2 s", "a factory must build its scheduler and return"],
        id="factory-hangs",
    ),
    pytest.param(
        "def factory(env):\n    return None\n",
        ["returned None", "no schedule_request", "Environment -> Scheduler"],
        id="returns-None",
    ),
    pytest.param(
        "def factory(env):\n    return 'a scheduler'\n",
        ["returned a str", "no schedule_request"],
        id="returns-no-scheduler",
    ),
    pytest.param(
        "class S:\n    schedule_request = 3\n\ndef factory(env):\n    return S()\n",
        ["returned a S", "no schedule_request"],
        id="schedule_request-not-callable",
    ),
    pytest.param(
        "def factory():\n    return None\n",
        ["cannot be called with an Environment", "takes 0 positional arguments"],
        id="factory-takes-no-environment",
    ),
    pytest.param(
        "class S:\n    def __init__(self, env):\n        pass\n"
        "    def schedule_request(self, active_requests):\n        return None\n\n"
        "factory = S\n",
        ["cannot be called as schedule_request(active_requests, inflight_request_ids)"],
        id="schedule_request-wrong-signature",
    ),
    pytest.param(
        "from peftlife.sut.reference import ReferenceScheduler\n\n"
        "def factory(env):\n    return ReferenceScheduler\n",
        ["cannot be called as schedule_request", "missing 1 required positional argument"],
        id="returns-the-class",
    ),
]


@pytest.mark.parametrize(("source", "hints"), WIRING)
@pytest.mark.parametrize("door", ["check", "replay"])
def test_a_miswired_factory_is_refused_before_the_search(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    hints: list[str],
    door: str,
) -> None:
    monkeypatch.setattr(wiring, "DEADLINE", 0.2)
    _no_search(monkeypatch)
    spec = f"{_module('bad_wiring', source)}:factory"
    argv = (
        ["check", "--sut", spec] if door == "check" else ["replay", str(_report()), "--sut", spec]
    )
    _refused(capsys, argv, f"SUT {spec!r}", *hints)


def test_the_pytest_door_refuses_a_miswired_machine() -> None:
    module = _module("bad_machine", "def factory(env):\n    return None\n")
    spec = f"{module}:factory"
    with pytest.raises(sut.WiringError, match="returned None"):
        lifecycle_machine(spec, "default")


def test_a_factory_that_raises_only_in_other_worlds_stays_a_finding() -> None:
    # The small world is one world: a factory failing elsewhere is the search's finding.
    source = (
        "from peftlife.sut.reference import ReferenceScheduler\n\n"
        "def factory(env):\n"
        "    if env.draft_kv_cache_manager is not None:\n"
        "        raise RuntimeError('no draft support')\n"
        "    return ReferenceScheduler(env)\n"
    )
    factory = sut.wired(f"{_module('bad_draft', source)}:factory")
    assert factory.__name__ == "factory"


@pytest.mark.parametrize(
    ("returned", "said"),
    [
        pytest.param(
            "{'context_requests': []}", "returned a dict, not a SchedulerOutput", id="dict"
        ),
        pytest.param("None", "returned None, not a SchedulerOutput", id="None"),
    ],
)
def test_malformed_output_stays_a_finding_that_says_what_came_back(
    capsys: pytest.CaptureFixture[str], returned: str, said: str
) -> None:
    source = (
        "class S:\n    def __init__(self, env):\n        pass\n"
        "    def schedule_request(self, active_requests, inflight_request_ids):\n"
        f"        return {returned}\n"
    )
    spec = f"{_module('bad_output', source)}:S"
    code, out, err = _main(capsys, ["check", "--sut", spec, "--profile", "ci", "--report-dir", "r"])
    assert code == cli.EXIT_FOUND, (out, err)
    assert said in out
    assert "no context_requests attribute" in out


# ---- 3. scenario files ----


def _scenario(old: str, new: str) -> str:
    assert old in DEFAULT_TOML, old
    Path("s.toml").write_text(DEFAULT_TOML.replace(old, new), "utf-8")
    return "s.toml"


def _toml_line(key: str) -> str:
    match = re.search(rf"^{key} = .*?(?=\s*#|$)", DEFAULT_TOML, re.MULTILINE)
    assert match, key
    return match.group(0)


@pytest.mark.parametrize("key", sorted(scenarios.LIMITS))
def test_every_scenario_number_has_an_upper_limit(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    _no_search(monkeypatch)
    limit = scenarios.LIMITS[key]
    old = _toml_line(key)
    low = re.findall(r"\d+", old)[0]

    def value(high: int) -> str:
        return f"{key} = {high}" if key == "max_requests" else f"{key} = [{low}, {high}]"

    _refused(capsys, ["check", "--scenario", _scenario(old, value(limit + 1))], key, str(limit))
    # The limit itself is allowed (with chunking off, any chunk unit fits the budget).
    text = DEFAULT_TOML.replace(old, value(limit)).replace(
        'chunking = "either"', 'chunking = "off"'
    )
    assert scenarios.parse(text, "at-the-limit").name == "at-the-limit"


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_chunk_unit_above_the_token_budget_is_clamped_to_it(data: st.DataObject) -> None:
    """The former false alarm: no chunk would ever fit. Like every drain premise, the
    world strategy meets it by clamping, so even this user scenario drains."""
    path = _scenario("chunk_unit_size = [1, 4]", "chunk_unit_size = [9, 9]")
    s = scenarios.load(path)
    config = data.draw(s.worlds())
    assert config.chunk_unit_size <= config.max_num_tokens
    assert drain_premise_broken(config, [(None, s.prompt_len.hi, s.max_new_tokens.hi)]) is None


@pytest.mark.parametrize("name", scenarios.shipped_names())
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_world_a_shipped_scenario_generates_can_drain(name: str, data: st.DataObject) -> None:
    s = scenarios.load(name)
    config = data.draw(s.worlds())
    longest = [(None, s.prompt_len.hi, s.max_new_tokens.hi)] * s.max_requests
    assert drain_premise_broken(config, longest) is None


def _directory() -> str:
    Path("d.toml").mkdir()
    return "d.toml"


def _file(text: str) -> Callable[[], str]:
    def write() -> str:
        Path("f.toml").write_text(text, "utf-8")
        return "f.toml"

    return write


@pytest.mark.parametrize(
    ("setup", "hints"),
    [
        pytest.param(_directory, ["'d.toml' is a directory", "give a path to a .toml"], id="dir"),
        pytest.param(_file(""), ["needs a top-level description"], id="empty"),
        pytest.param(_file("[world\n"), ["not valid TOML", "line 1"], id="toml-syntax"),
        pytest.param(_file('description = "x"\n'), ["needs a [world] table"], id="no-tables"),
        pytest.param(_file("#" * 2**21), ["larger than 1024 KiB"], id="huge"),
    ],
)
def test_a_scenario_path_that_is_not_a_profile(
    capsys: pytest.CaptureFixture[str], setup: Callable[[], str], hints: list[str]
) -> None:
    _refused(capsys, ["check", "--scenario", setup()], *hints)


# ---- 4. replay files, validated in full before anything runs ----

CONFIG = EngineConfig(
    device_pages=6,
    host_pages=8,
    tokens_per_block=2,
    lora_device_pages=2,
    adapter_pages=((1, 1), (2, 2)),
    max_num_tokens=16,
)
ACTIONS = (
    Action("submit", lora_task_id=1, lora_weights=True, prompt_len=3, max_new_tokens=2),
    Action("step"),
    Action("submit", lora_task_id=2, prompt_len=2, max_new_tokens=1),
    Action("cancel", request_id=2),
    Action("fail_grow"),
    Action("step"),
)


def _report(
    path: Path = Path("r.json"), change: Callable[[dict[str, Any]], Any] | None = None
) -> Path:
    """A valid report of the reference, changed by ``change``, written to ``path``."""
    case = reports.Case("reference", "default", CONFIG, ACTIONS, seed=3, profile="ci")
    data = json.loads(json.dumps(reports.to_json(case, reports.replay(case))))
    if change is not None:
        change(data)
    path.write_text(json.dumps(data), "utf-8")
    return path


def _set(*path: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def _append_action(action: dict[str, Any], times: int = 1) -> Callable[[dict[str, Any]], None]:
    return lambda data: data["actions"].extend([action] * times)


def _update(**config: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: data["config"].update(config)


REPLAY_FILES = [
    pytest.param(
        _set("config", "lora_device_pages", value=-3),
        "config.lora_device_pages",
        "at least 1, not -3",
        id="negative-pages",
    ),
    pytest.param(
        _set("config", "enable_chunked_context", value="no"),
        "config.enable_chunked_context",
        "true or false, not 'no'",
        id="string-as-bool",
    ),
    pytest.param(
        _set("config", "device_pages", value=True),
        "config.device_pages",
        "not True",
        id="bool-as-int",
    ),
    pytest.param(
        _set("config", "draft_device_pages", value=0),
        "config.draft_device_pages",
        "at least 1 or null",
        id="zero-draft",
    ),
    pytest.param(
        _set("config", "host_pages", value=2.5), "config.host_pages", "not 2.5", id="float"
    ),
    pytest.param(
        _set("config", "colour", value="red"),
        "config.colour",
        "not a field",
        id="unknown-config-key",
    ),
    pytest.param(
        _set("config", "adapter_pages", value=[[1, 1], [1, 2]]),
        "config.adapter_pages",
        "distinct",
        id="duplicate-adapter",
    ),
    pytest.param(
        _set("config", "device_pages", value=10**9),
        "config.device_pages",
        "limit of 100000",
        id="huge-pages",
    ),
    pytest.param(
        _set("config", "adapter_pages", value=[[t, 1] for t in range(1, 100)]),
        "len(config.adapter_pages)",
        "limit of 64",
        id="too-many-adapters",
    ),
    pytest.param(
        _set("actions", 3, "request_id", value=7),
        "actions[3].request_id",
        "submit 2",
        id="cancel-of-no-request",
    ),
    pytest.param(
        _set("actions", 3, "request_id", value="2"),
        "actions[3].request_id",
        "whole number",
        id="string-request",
    ),
    pytest.param(
        _set("actions", 0, "lora_task_id", value=9),
        "actions[0].lora_task_id",
        "adapter_pages lists [1, 2]",
        id="unknown-adapter",
    ),
    pytest.param(
        _set("actions", 0, "lora_weights", value="yes"),
        "actions[0].lora_weights",
        "true or false",
        id="string-weights",
    ),
    pytest.param(
        _set("actions", 0, "prompt_len", value=0),
        "actions[0].prompt_len",
        "at least 1, not 0",
        id="empty-prompt",
    ),
    pytest.param(
        _set("actions", 0, "prompt_len", value=10**9),
        "actions[0].prompt_len",
        "limit of 256",
        id="huge-prompt",
    ),
    pytest.param(
        _set("actions", 4, "pool", value="draft"),
        "actions[4].pool",
        "no draft pool",
        id="fault-on-no-draft",
    ),
    pytest.param(
        _set("actions", 4, "pool", value="host"),
        "actions[4].pool",
        "target, draft",
        id="unknown-pool",
    ),
    pytest.param(
        _set("actions", 1, "kind", value="preempt"),
        "actions[1].kind",
        "'preempt'",
        id="unknown-kind",
    ),
    pytest.param(
        _set("actions", 1, value=["step"]),
        "actions[1]",
        "must be an object",
        id="action-not-object",
    ),
    pytest.param(
        _append_action({"kind": "cancel"}),
        "actions[6].request_id",
        "required by a cancel",
        id="cancel-without-id",
    ),
    pytest.param(
        _append_action({"kind": "step"}, times=10_001),
        "len(actions)",
        "limit of 10000",
        id="too-many-actions",
    ),
    pytest.param(
        _set("actions", value={"kind": "step"}), "actions", "must be a list", id="actions-not-list"
    ),
    pytest.param(_set("config", value=[8]), "config", "must be an object", id="config-not-object"),
    pytest.param(_set("seed", value="3"), "seed", "whole number or null", id="string-seed"),
    pytest.param(_set("sut", value=3), "sut", "must be a string", id="sut-not-string"),
    pytest.param(_set("extra", value=1), "extra", "not a field", id="unknown-top-level-key"),
    pytest.param(
        _set("config", "lora_device_pages", value=1),
        "config",
        "adapter 2 needs 2 pages",
        id="adapter-above-lora-cache",
    ),
    pytest.param(
        _update(enable_chunked_context=True, chunk_unit_size=17),
        "config",
        "chunk_unit_size (17) exceeds max_num_tokens (16)",
        id="chunk-above-budget",
    ),
    pytest.param(
        _set("config", "device_pages", value=2),
        "config",
        "more than device_pages (2)",
        id="request-above-pool",
    ),
    pytest.param(
        _set("config", "max_num_tokens", value=3),
        "config",
        "exceeds max_num_tokens (3)",
        id="context-above-budget",
    ),
    pytest.param(
        _update(enable_recompute_pause=False, host_pages=1),
        "config",
        "host_pages is 1",
        id="lower-tier-too-small",
    ),
]


@pytest.mark.parametrize(("change", "path", "problem"), REPLAY_FILES)
def test_a_bad_replay_file_is_refused_with_the_json_path(
    capsys: pytest.CaptureFixture[str],
    change: Callable[[dict[str, Any]], None],
    path: str,
    problem: str,
) -> None:
    report = _report(change=change)
    line = _refused(capsys, ["replay", str(report)], f"'{report}': {path}", problem)
    assert "fix the field or regenerate the report" in line


def test_the_unchanged_report_replays(capsys: pytest.CaptureFixture[str]) -> None:
    # The rows above fail for their change alone: the base report is valid and holds.
    code, out, err = _main(capsys, ["replay", str(_report()), "-q"])
    assert (code, out, err) == (cli.EXIT_HELD, "", "")


@pytest.mark.parametrize(
    ("content", "hints"),
    [
        pytest.param(None, ["cannot read report", "Is a directory", ".json file"], id="directory"),
        pytest.param(b"[]", ["JSON object"], id="list"),
        pytest.param(b"", ["is not JSON"], id="empty"),
        pytest.param(b"[" * 100_000, ["is not JSON"], id="deeply-nested"),
    ],
)
def test_a_replay_path_that_is_not_a_report(
    capsys: pytest.CaptureFixture[str], content: bytes | None, hints: list[str]
) -> None:
    path = Path("r.json")
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    _refused(capsys, ["replay", str(path)], *hints)


def test_a_replay_whose_sut_no_longer_imports(capsys: pytest.CaptureFixture[str]) -> None:
    _module("bad_gone", "raise ImportError('renamed in 2.0')\n")
    report = _report(change=_set("sut", value="bad_gone:factory"))
    _refused(capsys, ["replay", str(report)], "'bad_gone'", "ImportError: renamed in 2.0")


def test_a_case_built_in_code_is_validated_too() -> None:
    # The value classes check types and ranges, so every door benefits.
    with pytest.raises(ValueError, match="lora_device_pages must be a whole number"):
        attrs.evolve(CONFIG, lora_device_pages=-3)
    with pytest.raises(ValueError, match="enable_recompute_pause must be true or false"):
        attrs.evolve(CONFIG, enable_recompute_pause="no")
    with pytest.raises(ValueError, match="prompt_len of a submit must be at least 1"):
        Action("submit", max_new_tokens=1)


# ---- 5. the report directory ----


def test_an_unwritable_report_dir_is_refused_before_the_search(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_search(monkeypatch)
    Path("afile").write_text("not a directory\n")
    _refused(
        capsys,
        ["check", "--report-dir", "afile/reports"],
        "--report-dir 'afile/reports'",
        "'afile' is a file",
        "name a directory you can write",
    )
    _refused(capsys, ["check", "--report-dir", "afile"], "'afile' is a file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_read_only_report_dir_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_search(monkeypatch)
    Path("ro").mkdir(mode=0o555)
    _refused(capsys, ["check", "--report-dir", "ro/reports"], "'ro' is not writable")


@pytest.mark.parametrize("quiet", [False, True], ids=["story", "quiet"])
def test_a_finding_whose_reports_cannot_be_written_is_printed_and_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, quiet: bool
) -> None:
    def write(*args: Any) -> Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(reports, "write", write)
    argv = ["check", "--sut", "tests.bad_schedulers:Raising", "--profile", "ci"]
    code, out, err = _main(capsys, [*argv, "--report-dir", "r", *(["-q"] if quiet else [])])
    assert code == cli.EXIT_FOUND, (out, err)
    assert "peftlife counterexample: scheduler_protocol" in out
    assert "scheduler bug" in out
    assert err.strip() == (
        f"peftlife: could not write reports to 'r' ({os.strerror(errno.ENOSPC)}); "
        "the counterexample above is the whole finding"
    )


@pytest.mark.parametrize(
    ("option", "path", "hint"),
    [
        ("--junit-xml", "afile/junit.xml", "'afile' is a file"),
        ("--summary", "afile/summary.md", "'afile' is a file"),
        ("--summary", "adir", "'adir' is a directory"),
    ],
)
@pytest.mark.parametrize("command", ["check", "explore", "diff", "mutants"])
def test_an_unwritable_ci_output_is_refused_before_the_run(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    option: str,
    path: str,
    hint: str,
) -> None:
    """As a report directory is: after the run it would turn a found bug's 1 into a 2."""
    _no_search(monkeypatch)
    monkeypatch.setattr(gate, "run_gate", lambda *a, **k: pytest.fail("the gate ran"))
    monkeypatch.setattr(cli.explore, "explore", lambda *a, **k: pytest.fail("explore ran"))
    monkeypatch.setattr(cli.diff.diff, "find", lambda *a, **k: pytest.fail("diff searched"))
    Path("afile").write_text("not a directory\n")
    Path("adir").mkdir()
    argv = {"diff": ["diff", "reference", "reference"]}.get(command, [command])
    _refused(capsys, [*argv, option, path], f"{option} {path!r}", hint)


def test_a_step_summary_from_the_environment_is_checked_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_search(monkeypatch)
    Path("adir").mkdir()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", "adir")
    _refused(capsys, ["check"], "$GITHUB_STEP_SUMMARY 'adir'", "'adir' is a directory")


def test_explore_refuses_an_unwritable_report_dir_before_exploring(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli.explore, "explore", lambda *a, **k: pytest.fail("explore ran"))
    Path("afile").write_text("")
    _refused(capsys, ["explore", "--report-dir", "afile/r"], "--report-dir 'afile/r'")


def test_a_finding_whose_junit_cannot_be_written_after_the_search_still_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The path passed the check before the search, then went away: the verdict stands.
    argv = ["check", "--sut", "tests.bad_schedulers:Raising", "--profile", "ci", "-q"]
    real = check.search

    def search_then_block(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        Path("gone").write_text("now a file\n")
        return result

    monkeypatch.setattr(check, "search", search_then_block)
    code, out, err = _main(capsys, [*argv, "--report-dir", "r", "--junit-xml", "gone/j.xml"])
    assert code == cli.EXIT_FOUND, (out, err)
    assert err.strip().startswith("peftlife: could not write gone"), err
    assert (Path("r") / "summary.json").is_file()


def test_an_unwritable_mutants_json_is_refused_before_the_gate(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gate, "run_gate", lambda *a, **k: pytest.fail("the gate ran on bad input"))
    Path("afile").write_text("")
    _refused(capsys, ["mutants", "--json", "afile/gate.json"], "'afile' is a file")


def test_a_gate_whose_json_cannot_be_written_keeps_its_verdict(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The directory passed the check, then could not be made: the table stands, exit 0.
    row = gate.GateRow(
        gate.Kind.REFERENCE, "reference @ default", False, "default", "-", True, 1, None, 0.0
    )
    monkeypatch.setattr(gate, "CATALOGUE", ())
    monkeypatch.setattr(gate.ReferenceRun, "run", lambda self, emit: row)
    monkeypatch.setattr(scenarios, "shipped_names", lambda: ["default"])
    monkeypatch.setattr(reports, "unwritable", lambda *a: None)
    Path("afile").write_text("")
    code, out, err = _main(capsys, ["mutants", "--jobs", "1", "--json", "afile/gate.json"])
    assert code == cli.EXIT_HELD, (out, err)
    assert "the reference held" in out
    assert err.startswith("peftlife: could not write --json 'afile/gate.json'"), err


# ---- 6. the pytest door ----


@pytest.mark.parametrize(
    ("option", "value", "setup", "hints"),
    [
        pytest.param(
            "--peftlife-report-dir",
            "afile/reports",
            lambda p: (p / "afile").write_text(""),
            ["--peftlife-report-dir 'afile/reports'", "'afile' is a file"],
            id="report-dir",
        ),
        pytest.param(
            "--peftlife-sut",
            "bad_plugin_sut:factory",
            lambda p: (p / "bad_plugin_sut.py").write_text("raise RuntimeError('at import')\n"),
            ["importing SUT module 'bad_plugin_sut'", "RuntimeError: at import"],
            id="sut-raises-on-import",
        ),
        pytest.param(
            "--peftlife-sut",
            "bad_plugin_sut:factory",
            lambda p: (p / "bad_plugin_sut.py").write_text("def factory(env):\n    return None\n"),
            ["returned None", "no schedule_request"],
            id="factory-returns-None",
        ),
    ],
)
def test_the_plugin_refuses_bad_input_as_a_usage_error(
    pytester: pytest.Pytester,
    option: str,
    value: str,
    setup: Callable[[Path], Any],
    hints: list[str],
) -> None:
    setup(pytester.path)
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    result = pytester.runpytest_subprocess(option, value)
    output = [line for line in [*result.stdout.lines, *result.stderr.lines] if line.strip()]
    assert result.ret == pytest.ExitCode.USAGE_ERROR, "\n".join(output)
    assert len(output) == 1, "\n".join(output)
    assert output[0].startswith("ERROR: peftlife: error:"), output[0]
    for hint in hints:
        assert hint in output[0], (hint, output[0])


def test_the_plugin_shows_the_import_traceback_under_verbose(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(bad_verbose_sut="def helper():\n    raise KeyError('deep')\nhelper()\n")
    result = pytester.runpytest_subprocess("-v", "--peftlife-sut", "bad_verbose_sut:factory")
    output = "\n".join([*result.stdout.lines, *result.stderr.lines]).strip()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    assert "Traceback (most recent call last)" in output
    assert 'bad_verbose_sut.py", line 2, in helper' in output
    assert output.splitlines()[-1].startswith("peftlife: error: importing SUT module")


PLUGIN_WRITE_FAILS = """
import errno

from hypothesis import Phase, settings

from peftlife import lifecycle_machine, reports


def write(*args):
    raise OSError(errno.ENOSPC, "No space left on device")


reports.write = write  # the disk fills up after the plugin checked the directory

TestBad = lifecycle_machine("bad_sched:Raising", "default").TestCase
TestBad.settings = settings(
    max_examples=20,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
"""


def test_a_plugin_finding_whose_reports_cannot_be_written_still_fails(
    pytester: pytest.Pytester,
) -> None:
    bad_schedulers = Path(__file__).parents[1].joinpath("bad_schedulers.py").read_text("utf-8")
    pytester.makepyfile(test_bad=PLUGIN_WRITE_FAILS, bad_sched=bad_schedulers)
    result = pytester.runpytest_subprocess("--peftlife-report-dir", "reports", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    assert "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*could not write reports to 'reports' (No space left on device)*"]
    )
    result.stdout.fnmatch_lines(["*scheduler bug*"])
