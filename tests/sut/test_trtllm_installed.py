"""``trtllm:`` with no path: the installed ``tensorrt_llm`` package's scheduler files.

An installed distribution is faked on a temporary ``sys.path`` entry: a
``tensorrt_llm`` package whose ``__init__`` raises if it ever runs (importing
the real one would load torch and CUDA), with the fake checkout's scheduler
files where an installed package keeps them.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import shutil
import sys
from pathlib import Path

import pytest

from peftlife import sut
from peftlife.doors import cli
from peftlife.world.config import EngineConfig
from peftlife.world.engine import Engine

CHECKOUT = Path(__file__).parents[1] / "fake_trtllm" / "checkout" / "tensorrt_llm"
SCHEDULER = Path("_torch", "pyexecutor", "scheduler")


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``tensorrt_llm`` distribution in a site directory put first on ``sys.path``."""
    package = tmp_path / "site-packages" / "tensorrt_llm"
    shutil.copytree(CHECKOUT / SCHEDULER, package / SCHEDULER)
    (package / "__init__.py").write_text(
        'raise RuntimeError("tensorrt_llm was imported: it loads torch and CUDA")\n', "utf-8"
    )
    monkeypatch.syspath_prepend(str(package.parent))
    importlib.invalidate_caches()
    return package


def test_the_installed_package_is_found_without_importing_it(installed: Path) -> None:
    factory = sut.load("trtllm:")
    assert factory.__name__ == "KVCacheV2Scheduler"
    assert sut.load("trtllm::CorrectKVCacheV2Scheduler").__name__ == "CorrectKVCacheV2Scheduler"
    engine = Engine(EngineConfig(adapter_pages=((1, 2),)), factory)
    rid = engine.submit(lora_task_id=1, lora_weights=True, prompt_len=4, max_new_tokens=2)
    for _ in range(3):
        engine.step()
    assert not engine.is_live(rid)
    # Its __init__ never ran, and nothing of it is left imported.
    assert not [m for m in sys.modules if m.split(".")[0] == "tensorrt_llm"]
    assert "torch" not in sys.modules


def test_check_runs_the_installed_package(installed: Path, tmp_path: Path) -> None:
    out = io.StringIO()
    argv = ["check", "--sut", "trtllm:", "--scenario", "chunked-prefill", "--profile", "ci"]
    argv += ["--report-dir", str(tmp_path / "reports"), "-q"]
    with contextlib.redirect_stdout(out):
        assert cli.main(argv) == 1  # the fake's default class has the defect of issue #18407


def test_without_the_package_the_door_asks_for_a_checkout_path(
    capsys: pytest.CaptureFixture[str],
) -> None:
    if importlib.util.find_spec("tensorrt_llm") is not None:
        pytest.skip("a tensorrt_llm package is installed here")
    assert cli.main(["check", "--sut", "trtllm:", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "no installed tensorrt_llm package" in err and "trtllm:PATH" in err
