"""TensorRT-LLM's scheduler from a checkout, on peftlife's own fake checkouts.

``tests/fake_trtllm/checkout`` has upstream's module paths and import graph; its
``KVCacheV2Scheduler`` suspends without releasing the adapter (TensorRT-LLM
issue #18407) and its ``CorrectKVCacheV2Scheduler`` does not. The search must
find the first and let the second hold in every shipped scenario; every bad
input at the front door exits 2 with one line; loading leaves no
``tensorrt_llm`` module behind and never needs torch.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import hypothesis
import pytest

from peftlife import sut
from peftlife.checker import invariants
from peftlife.doors import cli
from peftlife.search import profiles, scenarios
from peftlife.search.hunt import hunt, search
from peftlife.search.trace import Action, checked_replay
from peftlife.sut.adapters.tensorrt_llm import facades, standins
from peftlife.sut.adapters.tensorrt_llm.adapter import TrtllmScheduler
from peftlife.sut.reference import ReferenceScheduler
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine

FAKES = Path(__file__).parents[1] / "fake_trtllm"
CHECKOUT = FAKES / "checkout"
RAISING = FAKES / "raising"
SCHEDULER_DIR = Path("tensorrt_llm", "_torch", "pyexecutor", "scheduler")
DEFECTIVE = f"trtllm:{CHECKOUT}"
CORRECT = f"trtllm:{CHECKOUT}:CorrectKVCacheV2Scheduler"
CI = profiles.get("ci")
# The correct variant is searched in every simple-loop scenario at the budget the
# reference's verdicts get (tests/search/test_machine.py); the defective fake fails each of
# those searches within five examples.
CI_ISH = hypothesis.settings(CI, max_examples=100)


def trtllm_modules() -> list[str]:
    return [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]


def one_request_world(spec: str) -> Engine:
    engine = Engine(EngineConfig(adapter_pages=((1, 2),)), sut.load(spec))
    engine.submit(lora_task_id=1, lora_weights=True, prompt_len=4, max_new_tokens=2)
    return engine


# ---- the loader ----


def test_loading_and_running_needs_no_torch_and_leaves_no_tensorrt_llm_module() -> None:
    """In a fresh interpreter: load the fake, run a request to completion; torch is
    never imported and no tensorrt_llm module is left in sys.modules."""
    code = f"""
import sys
from peftlife.sut import load
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine
engine = Engine(EngineConfig(adapter_pages=((1, 2),)), load({DEFECTIVE!r}))
rid = engine.submit(lora_task_id=1, lora_weights=True, prompt_len=4, max_new_tokens=2)
steps = [engine.step() for _ in range(3)]
assert not engine.is_live(rid), [s.step for s in steps]
assert "torch" not in sys.modules
assert "strenum" not in sys.modules or sys.modules["strenum"].__file__
left = [m for m in sys.modules if m.split(".")[0] == "tensorrt_llm"]
assert left == [], left
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_two_checkouts_in_one_process_keep_their_own_modules() -> None:
    """Two checkouts load side by side: distinct classes and modules, each run as its own."""
    before = trtllm_modules()
    first, second = sut.load(DEFECTIVE), sut.load(f"trtllm:{RAISING}")
    third = sut.load(DEFECTIVE)
    assert first.checkout.scheduler_class is not second.checkout.scheduler_class  # type: ignore[attr-defined]
    assert first.checkout.scheduler_class is not third.checkout.scheduler_class  # type: ignore[attr-defined]
    runs = {}
    for name, spec in (("defective", DEFECTIVE), ("raising", f"trtllm:{RAISING}")):
        engine = one_request_world(spec)
        runs[name] = engine.step().step
    assert runs["defective"].output is not None and runs["defective"].output.context == (1,)
    assert [e.kind for e in runs["raising"].errors] == ["scheduler_raised"]
    assert trtllm_modules() == before


def test_a_real_installed_tensorrt_llm_is_never_shadowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tensorrt_llm the user imported keeps its modules, during and after a run."""
    package = tmp_path / "site" / "tensorrt_llm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("REAL = True\n")
    (package / "logger.py").write_text("logger = 'the real logger'\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in trtllm_modules():
        monkeypatch.delitem(sys.modules, name)
    import tensorrt_llm  # type: ignore[import-not-found]
    import tensorrt_llm.logger  # type: ignore[import-not-found]

    real = (sys.modules["tensorrt_llm"], sys.modules["tensorrt_llm.logger"])
    engine = one_request_world(DEFECTIVE)
    assert engine.step().step.errors == ()
    assert (sys.modules["tensorrt_llm"], sys.modules["tensorrt_llm.logger"]) == real
    assert tensorrt_llm.REAL and tensorrt_llm.logger.logger == "the real logger"
    for name in ("tensorrt_llm", "tensorrt_llm.logger"):
        del sys.modules[name]  # not through monkeypatch, which would put them back


def test_both_scheduler_output_shapes_are_read() -> None:
    """A namedtuple SchedulerOutput without recompute_paused_requests gains the field;
    a dataclass one that has it is left alone."""
    namedtuple_output = (
        sut.load(DEFECTIVE)
        .checkout.modules[  # type: ignore[attr-defined]
            f"{standins.SCHEDULER_PACKAGE}.scheduler"
        ]
        .SchedulerOutput
    )
    assert namedtuple_output._fields[-1] == "recompute_paused_requests"
    assert namedtuple_output._field_defaults["recompute_paused_requests"] is None
    dataclass_output = (
        sut.load(f"trtllm:{RAISING}")
        .checkout.modules[  # type: ignore[attr-defined]
            f"{standins.SCHEDULER_PACKAGE}.scheduler"
        ]
        .SchedulerOutput
    )
    assert "recompute_paused_requests" in dataclass_output.__dataclass_fields__


def test_the_fake_uses_every_name_of_the_facade_surface() -> None:
    """The fake's scheduler (with the stand-in helpers it calls) touches every attribute
    and method the façades serve, so the suite exercises the whole surface."""
    used: set[str] = set()
    sources = [
        (CHECKOUT / SCHEDULER_DIR / name).read_text("utf-8")
        for name in ("scheduler.py", "scheduler_v2.py")
    ]
    sources.append(Path(standins.__file__).read_text("utf-8"))
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                used.add(node.value)
    surface = {
        *facades.LlmRequestFacade.SURFACE,
        *facades.KVCacheManagerV2.SURFACE,
        *facades.PeftCacheManagerFacade.SURFACE,
    }
    assert surface - used == set()


def test_a_name_outside_the_facade_surface_is_an_attribute_error_naming_it() -> None:
    engine = one_request_world(DEFECTIVE)
    request = facades.LlmRequestFacade(engine.live_requests[0])
    with pytest.raises(AttributeError, match="is_dummy"):
        _ = request.is_dummy  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="probe_first_new_block_key"):
        facades.KVCacheManagerV2(engine.kv_cache_manager).probe_first_new_block_key  # type: ignore[attr-defined]  # noqa: B018


# ---- the search ----


def test_the_suspend_without_release_defect_is_found_by_search() -> None:
    """No steps named: the hunt over the shipped scenarios finds #18407's defect."""
    result = hunt(DEFECTIVE, CI)
    assert result.failure is not None, "the defective fake escaped every shipped scenario"
    assert result.failure.invariant in (
        "ownership_follows_residency",
        "no_scheduler_caused_fault",
        "device_pin_follows_ownership",
    ), result.failure


# The simple loop's scenarios. Under the overlap executor the overlap tests below replay
# the traces that matter instead.
@pytest.mark.parametrize(
    "scenario", [n for n in scenarios.shipped_names() if not scenarios.load(n).overlap]
)
def test_the_correct_variant_holds_in_every_simple_loop_scenario(scenario: str) -> None:
    # Its phase 2 keeps upstream's D5 (docs/upstream-findings.md): with a host tier it
    # never suspends or preempts a started prefill, so two can fill the device for good.
    # That is the drain's finding; every per-iteration invariant must hold.
    with invariants.excluding(["drain_completes"]):
        result = search(CORRECT, scenario, CI_ISH, shrink=False)
    assert result.held, result.failure
    assert result.examples >= 50


def test_a_scheduler_raising_inside_a_pass_is_a_finding() -> None:
    result = search(f"trtllm:{RAISING}", "default", CI, shrink=False)
    assert result.failure is not None
    assert result.failure.invariant == "scheduler_protocol"
    assert "RuntimeError" in str(result.failure)


# ---- bad input at the front door ----


def check_exit(spec: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["check", "--sut", spec, "--profile", "dev"])
    return code, err.getvalue()


def fake_copy(tmp_path: Path) -> Path:
    target = tmp_path / "checkout"
    shutil.copytree(CHECKOUT, target)
    return target


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # main() prepends the cwd to sys.path: run in a scratch directory, path restored.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_a_path_without_scheduler_v2_exits_2_naming_the_path_looked_for(tmp_path: Path) -> None:
    code, err = check_exit(f"trtllm:{tmp_path}")
    looked_for = tmp_path / SCHEDULER_DIR / "scheduler_v2.py"
    assert code == cli.EXIT_BAD_INPUT
    assert err.count("\n") == 1 and str(looked_for) in err, err


def test_a_tilde_path_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copytree(CHECKOUT, tmp_path / "trt")
    assert sut.load("trtllm:~/trt").checkout.path == tmp_path / "trt"  # type: ignore[attr-defined]
    with pytest.raises(sut.SUTError, match=str(tmp_path / "nothing")):
        sut.load("trtllm:~/nothing")


@pytest.mark.parametrize(
    ("file", "line", "module", "name"),
    [
        (
            "scheduler_v2.py",
            "from tensorrt_llm.logger import severity_map",
            "tensorrt_llm.logger",
            "severity_map",
        ),
        (
            "scheduler_v2.py",
            "def later():\n    from ..kv_cache.kv_cache_manager_v2 import KVCacheManagerV3",
            "tensorrt_llm._torch.pyexecutor.kv_cache.kv_cache_manager_v2",
            "KVCacheManagerV3",
        ),
        (
            "scheduler.py",
            "Summary = tb_internal.batch_manager.PrefixReuseSummaryV2",
            "tensorrt_llm.bindings.internal.batch_manager",
            "PrefixReuseSummaryV2",
        ),
        ("scheduler.py", "from tensorrt_llm.runtime import Session", "tensorrt_llm.runtime", None),
    ],
)
def test_an_import_the_stand_ins_lack_exits_2_naming_module_and_name(
    tmp_path: Path, file: str, line: str, module: str, name: str | None
) -> None:
    checkout = fake_copy(tmp_path)
    path = checkout / SCHEDULER_DIR / file
    path.write_text(path.read_text("utf-8") + "\n\n" + line + "\n", "utf-8")
    code, err = check_exit(f"trtllm:{checkout}")
    assert code == cli.EXIT_BAD_INPUT
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert module in err and "newer" in err and str(path) in err, err
    if name is not None:
        assert name in err, err


def test_an_unknown_scheduler_class_exits_2_listing_the_classes() -> None:
    code, err = check_exit(f"trtllm:{CHECKOUT}:NoSuchScheduler")
    assert code == cli.EXIT_BAD_INPUT
    assert "NoSuchScheduler" in err and "CorrectKVCacheV2Scheduler" in err, err


def test_a_scratch_checkout_is_never_written(tmp_path: Path) -> None:
    """Loading compiles nothing into the checkout (no __pycache__ left there)."""
    checkout = fake_copy(tmp_path)
    before = sorted(p.relative_to(checkout) for p in checkout.rglob("*"))
    sut.load(f"trtllm:{checkout}")
    assert sorted(p.relative_to(checkout) for p in checkout.rglob("*")) == before
    assert os.listdir(checkout / SCHEDULER_DIR) == os.listdir(CHECKOUT / SCHEDULER_DIR)


# ---- the world options a scenario profile may set ----


def _profile(extra: str) -> str:
    shipped = (Path(scenarios.__file__).parent / "strategies" / "no-lower-tier.toml").read_text()
    return shipped.replace("[world]\n", f"[world]\n{extra}\n")


def test_a_profile_may_choose_the_chunking_policy_and_the_teardown() -> None:
    s = scenarios.parse(
        _profile('recompute_teardown = "scheduler_only"\nchunking_policy = "either"'), "x"
    )
    assert (s.recompute_teardown, s.chunking_policy) == ("scheduler_only", "either")
    worlds = hypothesis.find(
        s.worlds(), lambda c: c.context_chunking_policy == "EQUAL_PROGRESS", settings=CI
    )
    assert worlds.recompute_teardown == "scheduler_only"
    default = scenarios.load("no-lower-tier")
    assert (default.recompute_teardown, default.chunking_policy) == (
        "executor_frees",
        "FIRST_COME_FIRST_SERVED",
    )
    # A profile written with the old names reads with the meaning it had.
    for old, new in (("spec", "scheduler_only"), ("upstream", "executor_frees")):
        old_profile = scenarios.parse(_profile(f'recompute_teardown = "{old}"'), "x")
        assert old_profile.recompute_teardown == new
    with pytest.raises(scenarios.ScenarioError, match="recompute_teardown must be one of"):
        scenarios.parse(_profile('recompute_teardown = "sometimes"'), "x")


# No lower tier, one chunk of 4 tokens per pass, 2 tokens per page, 4 pages; a host
# LoRA cache for one adapter of two (tests/checker/test_mutant_triggers.py, _PREEMPT_WORLD).
_STRANDING = EngineConfig(
    device_pages=4,
    tokens_per_block=2,
    lora_device_pages=1,
    lora_host_pages=1,
    adapter_pages=((1, 1), (2, 1)),
    max_num_tokens=4,
    enable_chunked_context=True,
    chunk_unit_size=4,
)


def _stranding_trace(path: bool) -> list[Action]:
    """Request 2 (adapter 1, weights) is preempted while ACTIVE in iteration 3, request 3
    (adapter 2, weights) takes the host cache while it waits, then it prefills again."""
    return [
        Action("fail_grow"),
        Action("submit", prompt_len=5, max_new_tokens=3),
        Action("submit", None, 1, True, 6, 1, lora_path=path),
        *[Action("step")] * 3,
        Action("submit", None, 2, True, 2, 1),
        *[Action("step")] * 3,
    ]


def test_upstreams_teardown_strands_a_request_without_a_lora_path() -> None:
    """TensorRT-LLM's executor terminates a recompute-paused request's adapter, which
    unpins its host copy: a request sent with weights only, whose adapter the host cache
    evicts while it waits, cannot come back ("not found in cache"), whatever the
    scheduler. With a LoRA path (the LLM API's PyTorch backend) it is reloaded."""
    stranded = checked_replay(_STRANDING, _stranding_trace(False), ReferenceScheduler)
    (first,) = stranded.violations[:1]
    assert first.invariant == "no_scheduler_caused_fault"
    assert "registered before" in first.found
    reloaded = checked_replay(_STRANDING, _stranding_trace(True), ReferenceScheduler)
    assert reloaded.violations == ()
    assert any(c.facts.reloaded for e in reloaded.snapshots if e.step for c in e.step.calls)
    # Where the scheduler owns the teardown and pauses, the host copy stays pinned.
    paused = attrs.evolve(_STRANDING, recompute_teardown="scheduler_only")
    assert checked_replay(paused, _stranding_trace(False), ReferenceScheduler).violations == ()


# ---- the overlap executor ----

OVERLAP = EngineConfig(
    device_pages=2,
    tokens_per_block=1,
    lora_device_pages=1,
    lora_host_pages=2,
    adapter_pages=((1, 1), (2, 1)),
    max_num_tokens=1,
    max_batch_size=1,
    executor="overlap",
)


def submit(task: int, prompt: int, outputs: int, weights: bool = True) -> Action:
    return Action(
        "submit", lora_task_id=task, lora_weights=weights, prompt_len=prompt, max_new_tokens=outputs
    )


def test_the_facades_serve_a_retiring_request_as_upstream_s_request() -> None:
    engine = Engine(OVERLAP, sut.load(CORRECT))
    rid = engine.submit(lora_task_id=1, lora_weights=True, prompt_len=1, max_new_tokens=1)
    engine.step()  # its only token is on the device: it retires
    request = facades.LlmRequestFacade(engine.live_requests[0])
    assert request.py_request_id == rid
    assert request.state is standins.LlmRequestState.GENERATION_TO_COMPLETE
    assert request.state_value == 14
    assert request.is_generation_to_complete_state
    # Upstream's C++ request counts a retiring request as in progress too (its scheduler's
    # "started" requests include it); the world's own request does not.
    assert request.is_generation_in_progress_state
    assert not engine.live_requests[0].is_generation_in_progress_state
    assert not request.is_context_init_state


@pytest.mark.parametrize(("mode", "told"), [("batch", [set(), {1}]), ("empty", [set(), set()])])
def test_upstream_is_told_the_in_flight_ids_as_the_mode_says(
    mode: str, told: list[set[int]]
) -> None:
    engine = Engine(attrs.evolve(OVERLAP, inflight_ids=mode), sut.load(CORRECT))
    scheduler = engine.scheduler
    assert isinstance(scheduler, TrtllmScheduler)
    upstream = scheduler.upstream.schedule_request
    seen: list[set[int]] = []

    def spy(active: Any, inflight_request_ids: Any) -> Any:
        seen.append(set(inflight_request_ids))
        return upstream(active, inflight_request_ids)

    scheduler.upstream.schedule_request = spy
    engine.submit(lora_task_id=1, lora_weights=True, prompt_len=1, max_new_tokens=3)
    engine.step()
    engine.step()
    assert seen == told


def test_the_correct_variant_pre_claims_a_retiring_request_s_adapter() -> None:
    """Request 1 retires on adapter 2, which fills the device LoRA cache until it is freed
    after the next ensure_batch: request 2 (adapter 1) must wait, as upstream's pre-claim
    of GENERATION_TO_COMPLETE requests makes it."""
    actions = (submit(2, 1, 1), submit(1, 1, 1))
    for spec in (CORRECT, DEFECTIVE):  # the pre-claim is upstream's, in both variants
        outcome = checked_replay(OVERLAP, actions, sut.load(spec))
        assert outcome.held, (spec, outcome.violations)
        assert outcome.entries[0].snapshot.step.overlap.retiring == ()  # type: ignore[union-attr]
        assert outcome.entries[1].snapshot.step.overlap.retiring == (1,)  # type: ignore[union-attr]


def test_only_the_correct_variant_spares_a_retiring_request_told_nothing_in_flight() -> None:
    """Upstream's victims are "started" requests not in flight, and started includes
    GENERATION_TO_COMPLETE: told nothing in flight, the defective variant suspends request 2
    during its last step; the correct one takes no retiring victim."""
    config = EngineConfig(
        device_pages=3,
        host_pages=6,
        tokens_per_block=1,
        lora_device_pages=1,
        lora_host_pages=1,
        adapter_pages=((1, 1),),
        max_num_tokens=3,
        max_batch_size=2,
        enable_recompute_pause=False,
        executor="overlap",
        inflight_ids="empty",
    )
    actions = (submit(1, 1, 2), submit(1, 2, 1, weights=False))
    assert checked_replay(config, actions, sut.load(CORRECT)).held
    caught = checked_replay(config, actions, sut.load(DEFECTIVE))
    assert "retiring_keeps_its_place" in {v.invariant for v in caught.violations}


def test_a_held_first_chunk_leaves_no_registered_owner_behind() -> None:
    """Held in iteration 1, request 2's first chunk is not registered on adapter 3 (two
    pages, the whole device cache): like upstream's loop, the world prepares only a batch it
    can queue. A scheduler that, like upstream's, pre-claims only started and retiring
    requests' adapters then admits request 1 on adapter 1, and ensure_batch can load it."""
    config = attrs.evolve(
        OVERLAP, lora_device_pages=2, lora_host_pages=3, adapter_pages=((1, 1), (3, 2))
    )
    actions = (
        Action("fail_grow", pool="target"),
        Action("hold_batch"),
        submit(1, 1, 1),
        submit(3, 1, 1),
        Action("step"),
    )
    assert checked_replay(config, actions, sut.load("reference")).held
    outcome = checked_replay(config, actions, sut.load(CORRECT))
    assert outcome.held, outcome.violations
