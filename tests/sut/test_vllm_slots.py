"""vLLM's worker-side LoRA slot managers, loaded unmodified from releases and driven step by step.

Each release's files come from the package registry once per machine (cached
under ``$PEFTLIFE_CACHE`` or ``~/.cache/peftlife``). Without network, set
``PEFTLIFE_OFFLINE=1`` to skip these tests.

The tests step the releases the vLLM tests fetch anyway (``FETCHED``: 0.22.0
is the oldest the driver steps) and the first release of each row of the slot
table (``slots.RELEASES``) that is already cached; the table's own tests run
on each row's first release, skipped (with how to fetch it) where it is not
cached, so CI downloads no more wheels. ``python -m bench.vllm_releases
--slots-only`` fetches and checks every release from 0.11.1.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import sys
from pathlib import Path

import attrs
import pytest

from peftlife.sut.adapters.vllm import CheckoutError
from peftlife.sut.adapters.vllm import slots as slot_table
from peftlife.sut.adapters.vllm.release import COMPLETE, cache_dir, release_files
from peftlife.sut.adapters.vllm.releases import parse
from peftlife.sut.adapters.vllm.slots import INPUT_BATCH, LORA_STATE, Release, Slots, SlotsRaised

NEWEST = "0.34.0"
FETCHED = ("0.11.1", "0.22.0", "0.33.0", NEWEST)  # 0.22.0 for test_vllm_releases.py
LOAD_INPLACE = (0, 15, 0)  # the first LoRARequest (vllm/lora/request.py) with load_inplace


def _first(row: Release) -> str:
    return ".".join(map(str, row.first))


def _cached(version: str) -> bool:
    return (cache_dir() / f"vllm-{version}" / COMPLETE).is_file()


# The releases the slot tests step: those fetched, and each row's first where cached.
RELEASES = tuple(sorted({*FETCHED, *filter(_cached, map(_first, slot_table.RELEASES))}, key=parse))


def _folder(version: str) -> Path:
    cache = cache_dir()
    if version not in FETCHED and not _cached(version):
        pytest.skip(
            f"vllm=={version} is not in {cache} and the tests fetch only {', '.join(FETCHED)}: "
            f"python -m bench.vllm_releases --slots-only --releases {version} fetches and checks it"
        )
    try:
        return release_files(version, cache)
    except CheckoutError:
        if os.environ.get("PEFTLIFE_OFFLINE"):
            pytest.skip(f"vllm=={version} could not be downloaded and PEFTLIFE_OFFLINE is set")
        raise


@pytest.fixture(scope="session", params=RELEASES)
def release(request: pytest.FixtureRequest) -> Path:
    return _folder(request.param)


def slots(folder: Path, max_loras: int, max_cpu_loras: int | None = None) -> Slots:
    return Slots(folder, max_loras=max_loras, max_cpu_loras=max_cpu_loras)


def step(s: Slots, *names: str) -> None:
    """A model-runner step whose requests use these adapters (a has id 1, b id 2, ...)."""
    s.apply_step([(s.lora_request(n, ord(n) - ord("a") + 1), 2) for n in names])


def test_the_classes_running_are_vllms_own(release: Path) -> None:
    s = slots(release, max_loras=1)
    package = release / "vllm"
    manager = s.worker._adapter_manager
    for obj, module in (
        (s.worker, "vllm.lora.worker_manager"),
        (manager, s.release.model_manager[1]),
        (manager._active_adapters, s.release.model_manager[1]),  # AdapterLRUCache
    ):
        assert type(obj).__module__ == module
        assert Path(str(s.modules[module].__file__)).is_relative_to(package)
        assert module not in sys.modules  # kept by the Slots object, not left installed
    assert type(s.worker).__name__ == "LRUCacheWorkerLoRAManager"
    assert type(manager).__name__ == "LRUCacheLoRAModelManager"
    cache_file = Path(str(s.modules["vllm.utils.cache"].__file__))
    assert cache_file == package / "utils" / "cache.py"
    for cache in (manager._registered_adapters, manager._active_adapters):
        assert isinstance(cache, s.modules["vllm.utils.cache"].LRUCache)
        assert type(cache).popitem.__code__.co_filename == str(cache_file)
    # vLLM's own LoRARequest checks its id (a msgspec Struct's __post_init__).
    with pytest.raises(SlotsRaised) as raised:
        s.lora_request("zero", 0)
    assert raised.value.error.file == "vllm/lora/request.py"


def test_lru_eviction_over_steps(release: Path) -> None:
    s = slots(release, max_loras=2, max_cpu_loras=3)
    step(s, "a")
    step(s, "b")
    step(s, "a")  # a used again: b is now the least recently used slot
    step(s, "c")
    state = s.state()
    assert state.slots == (1, 3) and state.gpu == (1, 3)  # c took b's slot
    assert state.cpu == (2, 1, 3)  # b stays in the CPU cache
    step(s, "d")  # a GPU slot (a's) and a CPU place (b's, the oldest there) freed
    state = s.state()
    assert state.slots == (4, 3) and state.cpu == (1, 3, 4)
    assert [load[1] for load in s.files.loads] == ["a", "b", "c", "d"]  # a's reuse read nothing
    step(s, "a")  # from the CPU cache into c's slot: no read
    step(s, "b")  # evicted from the CPU cache: read again
    assert [load[1] for load in s.files.loads] == ["a", "b", "c", "d", "b"]
    state = s.state()
    assert state.slots == (2, 1)
    assert state.kernel is not None and state.kernel.token_ids == (2, 2)


def test_pins_survive_eviction(release: Path) -> None:
    s = slots(release, max_loras=2, max_cpu_loras=2)
    assert s.add(s.lora_request("a", 1))
    assert s.pin(1)
    for name in "bcd":
        step(s, name)
        state = s.state()
        assert 1 in state.slots and 1 in state.cpu
    assert state.pinned_gpu == state.pinned_cpu == frozenset({1})
    assert state.slots == (1, 4) and state.cpu == (1, 4)


def test_remove_frees_the_slot_and_the_cpu_place(release: Path) -> None:
    s = slots(release, max_loras=2, max_cpu_loras=2)
    step(s, "a", "b")
    assert s.remove(1)
    state = s.state()
    assert 1 not in state.slots and state.cpu == (2,)
    assert not s.remove(1)  # vLLM reports that nothing was removed
    step(s, "a")
    assert [load[1] for load in s.files.loads].count("a") == 2


def test_an_in_place_reload_puts_the_new_weights_in_the_slot(release: Path) -> None:
    s = slots(release, max_loras=1, max_cpu_loras=2)
    if parse(s.version) < LOAD_INPLACE:
        with pytest.raises(CheckoutError, match=r"'s LoRARequest .* has no load_inplace"):
            s.reload("a", 1)
        return
    step(s, "a")
    s.files.write("a", "/adapters/a")  # new weights on disk, no reload asked
    step(s, "a")
    assert s.state().versions == {1: 1}  # vLLM keeps what it loaded
    assert s.reload("a", 1)
    assert s.state().versions == {1: 3}
    assert s.state().slots == (1,)
    assert [load[3] for load in s.files.loads] == [1, 3]


def test_an_exception_in_vllms_slot_code_names_its_file_and_line(release: Path) -> None:
    s = slots(release, max_loras=2, max_cpu_loras=3)
    for lora_id, name in ((1, "a"), (2, "b")):
        s.add(s.lora_request(name, lora_id))
        s.pin(lora_id)
    with pytest.raises(SlotsRaised) as raised:
        step(s, "c")  # both GPU slots pinned: vLLM's LRU has nothing to evict
    error = raised.value.error
    assert (error.file, error.function, error.exception) == (
        "vllm/utils/cache.py",
        "popitem",
        "RuntimeError",
    )
    assert "All items are pinned" in error.message and error.standin is None
    lines = (release / error.file).read_text(encoding="utf-8").splitlines()
    assert lines[error.line - 1].strip().startswith("raise RuntimeError(")
    with pytest.raises(SlotsRaised) as raised:
        s.apply({s.lora_request(n, i) for i, n in enumerate("cde", start=3)})
    assert raised.value.error.file == "vllm/lora/worker_manager.py"
    assert raised.value.error.function == "_apply_adapters"


def test_a_name_loaded_again_under_a_new_id_needs_both_slots(release: Path) -> None:
    """0.34.0's LoRARequest is equal by name and id, earlier ones by name alone."""
    s = slots(release, max_loras=2)
    old, new = s.lora_request("x", 1), s.lora_request("x", 2)
    if s.release.step_set == LORA_STATE:
        assert s.apply_step([(old, 3), (new, 1)]) == {old, new}
        kernel = s.state().kernel
        assert kernel is not None and kernel.slots == (1, 2) and kernel.token_ids == (1, 1, 1, 2)
        return
    # Before 0.34.0 the two are one element of the step's set: only one adapter
    # is activated, and mapping the other's tokens to a slot fails.
    with pytest.raises(SlotsRaised) as raised:
        s.apply_step([(old, 3), (new, 1)])
    assert raised.value.error.function == "_set_adapter_mapping"
    assert raised.value.error.standin == "update_metadata"
    assert len([i for i in s.state().slots if i is not None]) == 1


def test_a_folder_without_the_slot_code_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckoutError, match=r"no worker_manager\.py at"):
        Slots(tmp_path, max_loras=1)


def test_an_import_the_stand_ins_lack_is_one_line(tmp_path: Path) -> None:
    package = tmp_path / "vllm"
    (package / "lora").mkdir(parents=True)
    (package / "utils").mkdir()
    (package / "_version.py").write_text("__version__ = version = '0.34.0'\n", encoding="utf-8")
    (package / "lora" / "worker_manager.py").write_text("", encoding="utf-8")
    (package / "lora" / "request.py").write_text(
        "from vllm.lora.utils import not_stood_in\n", encoding="utf-8"
    )
    with pytest.raises(CheckoutError) as raised:
        Slots(tmp_path, max_loras=1)
    assert str(raised.value) == (
        f"vLLM 0.34.0: {package / 'lora' / 'request.py'} needs 'not_stood_in' from "
        "'vllm.lora.utils', which has no stand-in"
    )


# ---- the slot table: each row as its first release's own code has it ----


def test_each_row_starts_after_the_one_before_and_changes_something() -> None:
    rows = slot_table.RELEASES
    assert _first(rows[0]) == "0.11.1"
    for before, row in itertools.pairwise(rows):
        assert before.first < row.first
        assert attrs.evolve(row, first=before.first) != before, f"{_first(row)} repeats its row"
    assert {row.step_set for row in rows} == {INPUT_BATCH, LORA_STATE}


@pytest.mark.parametrize("row", slot_table.RELEASES, ids=_first)
def test_a_row_builds_the_managers_as_its_first_releases_model_runner_does(row: Release) -> None:
    package = _folder(_first(row)) / "vllm"
    assert Slots(package, max_loras=1).release == row
    # v1/worker/lora_model_runner_mixin.py load_lora_model: the worker and its manager.
    mixin = (package / "v1" / "worker" / "lora_model_runner_mixin.py").read_text(encoding="utf-8")
    assert ("model.embedding_padding_modules" in mixin) == row.padding_modules
    assert ("create_lora_manager(model, vllm_config)" in mixin) == row.manager_takes_config
    assert (package / row.model_manager[0]).is_file()
    # The step's set is InputBatch's while the V1 model runner is there.
    v1_runner = (package / "v1" / "worker" / "gpu_model_runner.py").is_file()
    assert (row.step_set == INPUT_BATCH) == v1_runner


@pytest.mark.parametrize("row", slot_table.RELEASES, ids=_first)
def test_each_stand_in_a_row_declares_is_one_its_first_release_imports(
    row: Release, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _folder(_first(row)) / "vllm"
    for module in row.standins:
        fewer = attrs.evolve(row, standins=tuple(m for m in row.standins if m != module))
        monkeypatch.setattr(slot_table, "RELEASES", (fewer,))
        if importlib.util.find_spec(module.partition(".")[0]) is not None:
            continue  # installed here (regex, safetensors): the real module would load
        with pytest.raises(CheckoutError, match=re.escape(f"'{module}'")):
            Slots(package, max_loras=1)
