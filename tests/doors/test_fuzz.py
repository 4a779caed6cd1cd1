"""Fuzzing campaigns: workers, one shared example database (a real Redis), and their faults.

The integration tests start a real ``redis-server`` (Debian's package, which
``.ci/run`` installs) on a free loopback port. A developer machine without it
skips them with the command that installs it; CI never skips them.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis.database import InMemoryExampleDatabase
from rich.console import Console

from peftlife.doors import fuzz
from peftlife.reports import Case, load_json, replay, to_json, write
from peftlife.search import events, scenarios
from peftlife.search.database import DatabaseError, ResilientDatabase, open_database
from peftlife.search.defect import Signature, signature
from peftlife.search.shrink import ShrinkProgress
from peftlife.search.trace import Action
from peftlife.world.config import EngineConfig

TESTS = Path(__file__).parents[1]
MUTANT = "mutant:no_release_on_suspend"


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    # A campaign appends to $GITHUB_STEP_SUMMARY: not the CI job's own, from a test.
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def _reports(directory: Path) -> list[Path]:
    """The JSON reports in a report directory, its summary.json left out."""
    return [p for p in directory.glob("*.json") if p.name != "summary.json"]


# ---- a real Redis ----


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One redis-server on a loopback port, with no persistence; stop and start it at will."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.2)
        for _ in range(100):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    binary = shutil.which("redis-server")
    if binary is None:
        message = "redis-server is not installed: apt-get install redis-server"
        if os.environ.get("CI"):
            pytest.fail(message + " (.ci/run installs it; CI must not skip this test)")
        pytest.skip(message)
    pytest.importorskip("redis", reason="the redis client: pip install 'peftlife[redis]'")
    server = RedisServer(binary, tmp_path)
    server.start()
    yield server
    server.stop()


def _peftlife(*args: str, cwd: Path, **env_vars: str) -> subprocess.CompletedProcess[str]:
    # The tests' helpers on the path, before whatever the run was given (a tree's sources).
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, **env_vars}
    return subprocess.run(
        [sys.executable, "-m", "peftlife.doors.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _fuzz(*args: str, cwd: Path) -> list[str]:
    return ["fuzz", "--profile", "ci", "--report-dir", str(cwd / "reports"), *args]


def _fuzz_command(*args: str, cwd: Path) -> list[str]:
    return [sys.executable, "-m", "peftlife.doors.cli", *_fuzz(*args, cwd=cwd)]


# ---- the shared database ----


def test_a_finding_saved_by_fuzz_is_replayed_first_by_a_fresh_check(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # Two campaigns at once against one Redis, each on its own machine's worth of directory.
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    # Ten examples find the mutant from either seed (each finding is shrunk: more cost more).
    common = ["--sut", MUTANT, "--scenario", "default", "--workers", "1", "--max-examples", "10"]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "peftlife.doors.cli",
                *_fuzz(*common, "--seed", str(seed), "--database", redis_server.url, cwd=cwd),
            ],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for seed, cwd in ((1, one), (2, two))
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [1, 1], outputs
    assert all("ownership_follows_residency" in out for out in outputs), outputs

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    check = _peftlife(
        "check", "--sut", MUTANT, "--scenario", "default", "--profile", "ci", "-q",
        "--database", redis_server.url, "--report-dir", str(fresh / "reports"), cwd=fresh,
    )  # fmt: skip
    assert check.returncode == 1, check.stdout + check.stderr
    examples = int(re.search(r"after (\d+) examples?", check.stdout).group(1))  # type: ignore[union-attr]
    assert examples <= 2, check.stdout


def test_one_defect_is_one_row_and_one_report(tmp_path: Path) -> None:
    result = _peftlife(
        *_fuzz("--sut", "mutant:draft_not_suspended", "--scenario", "chunked-prefill",
               "--workers", "2", "--seed", "6", "--max-examples", "60",
               # No time cap: on a loaded machine a capped shrink keeps a longer trace,
               # and the two workers' findings of one defect would group apart.
               "--shrink-timeout", "0", cwd=tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    findings, defects = map(
        int, re.findall(r"^(\d+) findings? of (\d+) defects?", result.stdout, re.M)[0]
    )
    announced = re.findall(r"^finding: .*", result.stdout, re.M)
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("  draft_")]
    # One row, one announcement and one report per defect: its shortest case's.
    assert len(rows) == len(announced) == defects < findings, result.stdout
    reports = _reports(tmp_path / "reports")
    assert len(reports) == defects, result.stdout
    assert re.search(rf"^{defects} reports?, one per defect, in", result.stdout, re.M)
    summary = _summary(tmp_path)
    assert sum(d["found"] for d in summary["defects"]) == findings
    assert sorted(d["report"] for d in summary["defects"]) == sorted(map(str, reports))
    assert any(d["workers"] in ([0, 1], [1, 0]) for d in summary["defects"]), result.stdout
    for d in summary["defects"]:
        assert d["first"]["worker"] in d["workers"] and d["first"]["seconds"] >= 0
        assert d["first"]["scenario"] == "chunked-prefill"


def test_quiet_keeps_only_the_summary(tmp_path: Path) -> None:
    result = _peftlife(
        *_fuzz("-q", "--sut", MUTANT, "--scenario", "default", "--workers", "1",
               "--max-examples", "10", "--seed", "1", cwd=tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith(f"fuzzed {MUTANT} in default"), result.stdout
    assert "finding: " not in result.stdout and "ownership_follows_residency" in result.stdout


def test_a_worker_still_shrinking_at_the_end_is_ended_and_its_finding_written_unshrunk(
    tmp_path: Path,
) -> None:
    duration = 6.0
    start = time.monotonic()
    result = _peftlife(
        *_fuzz("--sut", "slow_shrinker:factory", "--scenario", "default", "--workers", "1",
               "--duration", str(duration), "--seed", "1", cwd=tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    took = time.monotonic() - start
    assert result.returncode == 1, result.stdout + result.stderr
    # Its own clock: the duration and the grace, then the summary. The process adds
    # its start (imports, spawning the worker) on a loaded machine.
    seconds = float(re.search(r"examples in ([\d.]+) s", result.stdout).group(1))  # type: ignore[union-attr]
    # --duration is a clock by design; the margins only tell a stop from a campaign
    # that ran on (the slow shrinker would take minutes), so a busy machine passes.
    assert seconds < duration + fuzz.STOP_GRACE_S + 15, result.stdout
    assert took < duration + fuzz.STOP_GRACE_S + 60, result.stdout
    assert "worker 0 was still busy" in result.stdout, result.stdout
    [report] = _reports(tmp_path / "reports")
    assert json.loads(report.read_text())["shrunk"] is False
    assert "not shrunk" in report.with_suffix(".md").read_text()
    assert re.search(r"^finding: ownership_follows_residency .*unshrunk", result.stdout, re.M)


def test_unreachable_redis_at_start_is_exit_2_with_the_url_and_a_fix(tmp_path: Path) -> None:
    pytest.importorskip("redis", reason="the redis client: pip install 'peftlife[redis]'")
    url = f"redis://127.0.0.1:{_free_port()}/0"
    result = _peftlife(*_fuzz("--sut", MUTANT, "--database", url, cwd=tmp_path), cwd=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert url in line and "redis-server --port" in line and "directory" in line


def test_redis_lost_mid_run_keeps_every_finding(redis_server: RedisServer, tmp_path: Path) -> None:
    cmd = _fuzz_command(
        "--sut", MUTANT, "--scenario", "default", "--workers", "1", "--max-examples", "40",
        "--seed", "3", "--database", redis_server.url, cwd=tmp_path,
    )  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    # Lost mid-run: once the campaign has saved to it. Bounded by examples, not seconds,
    # the campaign still has examples to run then, however loaded the machine is.
    import redis

    client = redis.Redis.from_url(redis_server.url, socket_connect_timeout=0.2)
    deadline = time.monotonic() + 60
    while not client.dbsize() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None and client.dbsize(), "the campaign saved nothing while it ran"
    redis_server.stop()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    assert "warning: lost the example database" in out, out
    assert _reports(tmp_path / "reports"), out
    local = tmp_path / "reports" / "database"
    assert any(p.is_file() for p in local.rglob("*")), "the local mirror keeps the saves"


def test_a_scheduler_that_ends_its_process_is_a_finding_not_a_dead_worker(
    tmp_path: Path,
) -> None:
    result = _peftlife(
        *_fuzz("-q", "--sut", "bad_schedulers:EndsItsProcess", "--scenario", "default",
               "--workers", "1", "--max-examples", "10", "--seed", "1", cwd=tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert re.search(r"\b[1-9]\d* findings?\b", first), result.stdout
    assert "every example held" not in result.stdout
    assert "scheduler_protocol" in result.stdout
    report = min(p for p in (tmp_path / "reports").glob("*.json") if p.name != "summary.json")
    replayed = _peftlife("replay", str(report), cwd=tmp_path)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "ended the process with exit code 3" in replayed.stdout


def test_a_worker_that_dies_is_a_finding_and_the_campaign_goes_on(tmp_path: Path) -> None:
    # Without the outside watchdog the scheduler's exit takes the worker down with it.
    result = _peftlife(
        *_fuzz("--sut", "bad_schedulers:EndsItsProcess", "--scenario", "default",
               "--workers", "2", "--max-examples", "20", "--seed", "1", "--max-restarts", "1",
               "--junit-xml", "junit.xml", cwd=tmp_path),
        cwd=tmp_path,
        PEFTLIFE_SUPERVISE="0",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    crashes = [line for line in result.stdout.splitlines() if line.startswith("crash: ")]
    # Each worker is started again after it dies, up to its restarts, then retired.
    assert len(crashes) == 2 * (1 + 1), result.stdout
    assert all("exit code 3" in c and "--seed" in c for c in crashes)
    assert "fuzzed bad_schedulers:EndsItsProcess" in result.stdout
    # Each crash fails the run in CI too: a failed JUnit case, listed in summary.json.
    assert _summary(tmp_path)["crashes"] == [c.removeprefix("crash: ") for c in crashes]
    failed = [c.find("failure") for c in ET.parse(tmp_path / "junit.xml").iter("testcase")]
    messages = [f.get("message") for f in failed if f is not None]
    assert messages.count("crash") == len(crashes), messages


def test_ctrl_c_stops_the_workers_and_writes_what_was_found(tmp_path: Path) -> None:
    cmd = _fuzz_command(
        "--sut", MUTANT, "--scenario", "default", "--workers", "2", "--duration", "120",
        "--seed", "5", cwd=tmp_path,
    )  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, stdout=subprocess.PIPE, text=True,
        # A test run in the background inherits SIGINT ignored; a terminal's Ctrl-C is not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("finding: "):
            break
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    proc.wait(timeout=60)
    assert time.monotonic() - start < 30
    assert proc.returncode == 130, rest
    assert "(interrupted)" in rest and "Traceback" not in rest, rest
    assert list((tmp_path / "reports").glob("*.md"))


# ---- what a campaign leaves for CI ----


def _summary(cwd: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((cwd / "reports" / "summary.json").read_text("utf-8"))
    return data


def test_a_campaign_leaves_summary_json_junit_and_a_step_summary_each_defect_a_failure(
    tmp_path: Path,
) -> None:
    result = _peftlife(
        *_fuzz("-q", "--sut", MUTANT, "--scenario", "default", "--workers", "1",
               "--max-examples", "10", "--seed", "1", "--junit-xml", "out/junit.xml",
               "--summary", "step.md", cwd=tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith(f"fuzzed {MUTANT} in default"), result.stdout
    data = _summary(tmp_path)
    assert (data["command"], data["profile"], data["ok"]) == ("fuzz", "ci", False)
    assert (data["sut"], data["scenarios"], data["workers"], data["seed"]) == (
        MUTANT, ["default"], 1, 1
    )  # fmt: skip
    assert f"{data['examples']} examples in" in result.stdout
    assert data["rerun"].startswith(f"peftlife fuzz --sut {MUTANT} --scenario default")
    assert data["rerun"].endswith("--max-examples 10 --seed 1")
    defects = data["defects"]
    assert defects and sum(d["found"] for d in defects) == data["found"] >= 1
    assert f"{data['found']} finding" in result.stdout
    for defect in defects:
        assert defect["invariant"] in result.stdout
        assert defect["reports"][defect["trace"]] == defect["report"]
        assert Path(defect["report"]).is_file() and defect["trace"] in defect["report"]
    # Every trace of every defect is a finding, as a baseline lists them: every report.
    written = sorted(str(p) for p in _reports(tmp_path / "reports"))
    assert sorted(f["report"] for f in data["findings"]) == written
    assert {f["trace"] for f in data["findings"]} == {t for d in defects for t in d["reports"]}

    root = ET.parse(tmp_path / "out" / "junit.xml").getroot()
    (suite,) = root.iter("testsuite")
    assert suite.get("name") == "peftlife fuzz"
    assert suite.get("tests") == suite.get("failures") == str(len(defects))
    for case, defect in zip(root.iter("testcase"), defects, strict=True):
        assert case.get("classname") == MUTANT and defect["invariant"] in str(case.get("name"))
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert (props["peftlife_invariant"], props["peftlife_trace"]) == (
            defect["invariant"], defect["trace"]
        )  # fmt: skip
        assert props["peftlife_report"] == defect["report"]
        assert props["peftlife_found"] == str(defect["found"])
        # Its shortest finding's slice, searched again by check under that slice's seed
        # and budget (the campaign's ten examples, less those of the slices before it).
        rerun = f"peftlife check --sut {MUTANT} --scenario default --profile ci --max-examples "
        assert props["peftlife_rerun"] == defect["rerun"]
        budget, _, seed = defect["rerun"].removeprefix(rerun).partition(" --seed ")
        assert defect["rerun"].startswith(rerun) and 1 <= int(budget) <= 10
        assert seed == str(defect["seed"])
        assert props["peftlife_seed"] == str(defect["seed"])
        # ... and finds the same shortest case, in a directory of its own.
        again = tmp_path / f"again-{defect['trace']}"
        again.mkdir()
        argv = defect["rerun"].split()[1:]
        done = _peftlife(*argv, "-q", "--report-dir", "r", cwd=again)
        assert done.returncode == 1, done.stdout + done.stderr
        assert list(again.glob(f"r/*{defect['trace']}.json")), (defect, done.stdout)
        failure = case.find("failure")
        assert failure is not None
        assert (failure.text or "").startswith(f"peftlife counterexample: {defect['invariant']}")

    text = (tmp_path / "step.md").read_text("utf-8")
    assert text.startswith("### peftlife fuzz: FAILED (ci profile)")
    for defect in defects:
        assert f"| `{defect['invariant']}` |" in text and defect["report"] in text
    assert f"`{MUTANT}` in `default`: {data['examples']} examples" in text


def test_a_campaign_that_holds_is_one_passing_junit_case_in_the_github_step_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = tmp_path / "step-summary.md"
    step.write_text("earlier step\n", "utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    result = _peftlife(
        *_fuzz("--sut", "reference", "--scenario", "default", "--workers", "1",
               "--max-examples", "4", "--seed", "1", "--junit-xml", "junit.xml", cwd=tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no finding: every example held" in result.stdout
    data = _summary(tmp_path)
    assert data["ok"] is True
    assert (data["found"], data["defects"], data["crashes"], data["findings"]) == (0, [], [], [])
    assert 1 <= data["examples"] <= 4
    root = ET.parse(tmp_path / "junit.xml").getroot()
    (suite,) = root.iter("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("1", "0")
    (case,) = root.iter("testcase")
    assert (case.get("name"), case.get("classname")) == ("default", "reference")
    assert case.find("failure") is None
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert (props["peftlife_seed"], props["peftlife_rerun"]) == ("1", data["rerun"])
    text = step.read_text("utf-8")
    assert text.startswith("earlier step\n### peftlife fuzz: passed (ci profile)")
    assert "no finding, every example held" in text


# ---- units: the plan, the fingerprint, the resilient database ----


def test_slices_cover_every_scenario_and_never_repeat_a_seed() -> None:
    three = tuple(map(scenarios.load, ("default", "overlap", "kv-pressure")))
    plan = fuzz.Plan(MUTANT, three, 2, "ci", 10, Path("."))
    slices = [plan.slice_of(w, k) for w in range(2) for k in range(6)]
    assert len({seed for _, seed in slices}) == len(slices)
    assert {scenario for scenario, _ in slices} == set(three)
    assert [plan.worker_budget(w) for w in range(2)] == [None, None]
    seven = attrs.evolve(plan, max_examples=7)
    assert [seven.worker_budget(w) for w in range(2)] == [4, 3]


# A suspension the scheduler makes when growing a cache fails, in two scenarios'
# worlds. The second has more pages, a bigger token budget, another adapter id and a
# second request, and the defect breaks the invariant there for request 2 in the
# drain rather than for request 1 at a step.
TIGHT_LORA_CACHE = EngineConfig(
    device_pages=2, host_pages=2, tokens_per_block=2, lora_device_pages=1, lora_host_pages=1,
    adapter_pages=((3, 1),), max_num_tokens=3, max_batch_size=1, chunk_unit_size=1,
    enable_recompute_pause=False,
)  # fmt: skip
SUSPENDED_BY_A_FAULT = (
    Action("submit", lora_task_id=3, lora_weights=True, prompt_len=1, max_new_tokens=3),
    Action("step"),
    Action("fail_grow", pool="target"),
    Action("step"),
)
DEFAULT = EngineConfig(
    device_pages=2, host_pages=4, tokens_per_block=3, lora_device_pages=1, lora_host_pages=1,
    adapter_pages=((1, 1),), max_num_tokens=4, max_batch_size=2, chunk_unit_size=1,
    enable_recompute_pause=False,
)  # fmt: skip
TWO_REQUESTS_SHARING_ONE_ADAPTER = (
    Action("submit", lora_task_id=1, lora_weights=True, prompt_len=1, max_new_tokens=4),
    Action("submit", lora_task_id=1, prompt_len=1, max_new_tokens=4),
)


def _defect(sut: str, scenario: str, config: EngineConfig, actions: tuple[Action, ...]) -> Any:
    return signature(replay(Case(sut, scenario, config, actions)))


def test_one_defect_met_in_two_scenarios_is_one_group() -> None:
    in_tight_lora_cache = _defect(
        MUTANT, "tight-lora-cache", TIGHT_LORA_CACHE, SUSPENDED_BY_A_FAULT
    )
    in_default = _defect(MUTANT, "default", DEFAULT, TWO_REQUESTS_SHARING_ONE_ADAPTER)
    assert (
        in_tight_lora_cache
        == in_default
        == Signature(
            "ownership_follows_residency",
            ("suspend_request", "try_allocate_generation"),
        )
    )


def test_two_defects_breaking_one_invariant_are_two_groups() -> None:
    forgets_release = _defect(MUTANT, "tight-lora-cache", TIGHT_LORA_CACHE, SUSPENDED_BY_A_FAULT)
    forgets_register = _defect(
        "mutant:no_reregister_on_resume", "tight-lora-cache", TIGHT_LORA_CACHE, SUSPENDED_BY_A_FAULT
    )
    assert forgets_release.invariant == forgets_register.invariant == "ownership_follows_residency"
    assert forgets_release != forgets_register


def test_an_unshrunk_case_says_so_and_reads_back(tmp_path: Path) -> None:
    case = Case(MUTANT, "tight-lora-cache", TIGHT_LORA_CACHE, SUSPENDED_BY_A_FAULT, shrunk=False)
    paths = write(case, replay(case), tmp_path)
    assert load_json(paths["json"]).shrunk is False
    assert "**not shrunk (the run ended before its shrinker did):** 4 actions" in (
        paths["markdown"].read_text()
    )
    shrunk = attrs.evolve(case, shrunk=True)
    assert "shrunk" not in to_json(shrunk, replay(shrunk))  # shrunk reports read as before


class Flaky(InMemoryExampleDatabase):
    """A shared database that can be taken away and brought back."""

    def __init__(self) -> None:
        super().__init__()
        self.up = True

    def _check(self) -> None:
        if not self.up:
            raise ConnectionError("gone")

    def save(self, key: bytes, value: bytes) -> None:
        self._check()
        super().save(key, value)

    def fetch(self, key: bytes) -> Iterator[bytes]:
        self._check()
        yield from super().fetch(key)


def test_a_lost_shared_database_keeps_saves_locally_and_writes_them_through() -> None:
    shared, local, said = Flaky(), InMemoryExampleDatabase(), []
    now = [0.0]
    db = ResilientDatabase(
        shared, local, url="redis://x", lost=(ConnectionError,), warn=said.append,
        clock=lambda: now[0],
    )  # fmt: skip
    db.save(b"k", b"1")
    shared.up = False
    db.save(b"k", b"2")
    assert not db.available and db.pending == [(b"k", b"2")]
    assert sorted(db.fetch(b"k")) == [b"1", b"2"]  # from the mirror while it is gone
    assert "lost the example database at redis://x" in said[0]
    shared.up = True
    now[0] += 10  # past the retry interval
    db.save(b"k", b"3")
    assert db.available and db.pending == []
    assert sorted(shared.fetch(b"k")) == [b"1", b"2", b"3"]
    assert "wrote through 1 save" in said[1]


def test_a_directory_database_and_bad_values(tmp_path: Path) -> None:
    db = open_database(str(tmp_path / "db"))
    db.save(b"k", b"v")
    db.delete(b"k", b"v")  # a run that no longer fails it does not take it from the others
    assert list(db.fetch(b"k")) == [b"v"]
    (tmp_path / "file").write_text("")
    with pytest.raises(DatabaseError, match="is a file"):
        open_database(str(tmp_path / "file"))


ONE_EXAMPLE = """
from hypothesis import settings

from peftlife import lifecycle_machine

TestMutant = lifecycle_machine("mutant:no_release_on_suspend", "default").TestCase
TestMutant.settings = settings(max_examples=1, derandomize=True, stateful_step_count=40)
"""


def test_pytest_replays_first_what_a_campaign_saved(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    campaign = _peftlife(
        *_fuzz("--sut", MUTANT, "--scenario", "default", "--workers", "1", "--seed", "1",
               "--max-examples", "10", "--database", redis_server.url, cwd=tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    assert campaign.returncode == 1, campaign.stdout + campaign.stderr
    (tmp_path / "test_one.py").write_text(ONE_EXAMPLE)

    def pytest_run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_one.py", *extra],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )

    # One short example finds nothing by itself; with the database it replays the saved failure.
    assert pytest_run().returncode == 0
    found = pytest_run("--peftlife-database", redis_server.url)
    assert found.returncode == 1, found.stdout
    assert "peftlife counterexample: ownership_follows_residency" in found.stdout


class _Pipe:
    """A worker's end of the pipe, keeping what was sent."""

    def __init__(self) -> None:
        self.sent: list[events.Event] = []

    def send(self, message: events.Event) -> None:
        self.sent.append(message)


def test_a_worker_tells_how_its_shrink_goes_and_the_table_and_heartbeat_show_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = _Pipe()
    news = events.shrinking(pipe.send, 0, fuzz.SHRINK_NEWS_EVERY)
    news(ShrinkProgress(replays=3, best_actions=2))
    news(ShrinkProgress(replays=4, best_actions=2))  # too soon after the first: not sent
    assert pipe.sent == [events.ShrinkStep(3, 2, source=0)]
    assert pipe.sent[0].describe() == "shrinking: 3 replays, best 2 actions"

    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    plan = fuzz.Plan(MUTANT, (scenarios.load("default"),), 1, "ci", 1, tmp_path)
    campaign = fuzz.Campaign(plan, console)
    campaign.workers[0] = fuzz.WorkerState(process=None, reader=None)
    campaign._handle(pipe.sent[0])
    Console(file=out, width=200).print(campaign._progress_table())
    assert "shrinking: 3 replays, best 2 actions" in out.getvalue()
    monkeypatch.setattr(fuzz, "_HEARTBEAT_S", 0.0)
    with campaign._display() as beat:
        beat(events.ExamplesRan(campaign.examples))
    assert "worker 0 shrinking: 3 replays, best 2 actions" in out.getvalue().splitlines()[-1]
    campaign._handle(events.ExamplesRan(7, source=0))  # any other news: the shrink is over
    assert campaign.workers[0].shrinking is None
