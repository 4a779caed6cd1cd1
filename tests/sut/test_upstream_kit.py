"""The kit both adapters load upstream files with, over tiny files of a made-up engine.

``enginex`` stands for an engine whose package cannot load here: its files are
written to a temporary folder, its modules are stand-ins, and nothing of it may
be left in ``sys.modules`` after a call.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import types
import zipfile
from pathlib import Path

import pytest

from peftlife.sut.adapters.upstream import (
    CheckoutError,
    Loader,
    MissingStandIn,
    StandInModule,
    as_package,
    find_package,
    installed,
    package_locations,
    release_files,
)
from peftlife.sut.adapters.upstream.release import COMPLETE, unpack


def _standins(misses: list[MissingStandIn]) -> dict[str, types.ModuleType]:
    """``enginex`` and ``enginex.bindings``, the latter holding only ``Block``."""
    return {
        "enginex": as_package(StandInModule("enginex", {}, misses)),
        "enginex.bindings": StandInModule("enginex.bindings", {"Block": int}, misses),
    }


def _file(folder: Path, name: str, source: str) -> Path:
    file = folder / name
    file.write_text(source, encoding="utf-8")
    return file


def _leftovers() -> list[str]:
    return [m for m in sys.modules if m.split(".")[0] == "enginex"]


def test_a_file_runs_under_its_real_name_over_the_stand_ins_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    loader = Loader(_standins, release="EngineX 1.2")
    source = "from enginex.bindings import Block\nSIZE = Block(16)\nNAME = __name__\n"
    module = loader.load(_file(tmp_path, "pool.py", source), "enginex.pool")
    assert (module.SIZE, module.NAME) == (16, "enginex.pool")
    assert loader.modules["enginex"].pool is module  # as Python's import sets it on the package
    assert _leftovers() == []
    with loader.installed():
        assert sys.modules["enginex.pool"] is module
    assert _leftovers() == []
    assert not (tmp_path / "__pycache__").exists()


def test_a_name_the_stand_ins_lack_is_one_line_naming_release_file_module_and_name(
    tmp_path: Path,
) -> None:
    loader = Loader(_standins, release="EngineX 1.2", advice="use an older release")
    file = _file(tmp_path, "pool.py", "from enginex.bindings import Block, Page\n")
    with pytest.raises(CheckoutError) as raised:
        loader.load(file, "enginex.pool")
    assert str(raised.value) == (
        f"EngineX 1.2: {file} needs 'Page' from 'enginex.bindings', which has no stand-in: "
        "use an older release"
    )
    assert _leftovers() == []


def test_a_module_neither_installed_nor_stood_in_is_named(tmp_path: Path) -> None:
    loader = Loader(_standins)
    file = _file(tmp_path, "pool.py", "import enginex_cuda_kernels\n")
    with pytest.raises(CheckoutError, match=r"imports module 'enginex_cuda_kernels', which is "):
        loader.load(file, "enginex.pool")


def test_a_raise_inside_a_loaded_file_is_wrapped_with_the_file_name(tmp_path: Path) -> None:
    loader = Loader(_standins, release="EngineX 1.2")
    file = _file(tmp_path, "pool.py", "import enginex.bindings\nraise RuntimeError('no GPU')\n")
    with pytest.raises(CheckoutError) as raised:
        loader.load(file, "enginex.pool")
    assert str(raised.value) == f"EngineX 1.2: importing {file} raised RuntimeError: no GPU"
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert _leftovers() == []


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(CheckoutError, match=r"^EngineX 1\.2: no pool\.py at "):
        Loader(_standins, release="EngineX 1.2").load(tmp_path / "pool.py", "enginex.pool")


def test_installed_restores_what_was_there_even_when_the_block_raises() -> None:
    real = types.ModuleType("enginex")
    sys.modules["enginex"] = real
    try:
        with pytest.raises(KeyError), installed(_standins([])):
            assert sys.modules["enginex"] is not real
            raise KeyError("inside the call")
        assert sys.modules["enginex"] is real
        assert "enginex.bindings" not in sys.modules
    finally:
        del sys.modules["enginex"]


def test_hide_takes_a_real_install_out_and_blocks_its_other_modules() -> None:
    real = types.ModuleType("enginex.real_only")
    sys.modules["enginex.real_only"] = real
    try:
        with installed(_standins([]), hide="enginex"):
            assert "enginex.real_only" not in sys.modules
            with pytest.raises(ModuleNotFoundError):
                __import__("enginex.elsewhere")
        assert sys.modules["enginex.real_only"] is real
    finally:
        del sys.modules["enginex.real_only"]
    assert _leftovers() == []


def test_a_package_is_found_in_a_checkout_or_as_itself(tmp_path: Path) -> None:
    package = tmp_path / "enginex"
    (package / "core").mkdir(parents=True)
    (package / "core" / "sched.py").write_text("", encoding="utf-8")
    assert find_package(tmp_path, "enginex", "core/sched.py", "EngineX") == package
    assert find_package(package, "enginex", "core/sched.py", "EngineX") == package
    with pytest.raises(CheckoutError, match=r"give the root of a EngineX checkout"):
        find_package(tmp_path, "enginex", "core/missing.py", "EngineX")


def test_an_installed_package_is_located_without_running_its_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "enginex"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert package_locations("enginex") == [package]
    assert _leftovers() == []


def _wheel(folder: Path, files: dict[str, bytes], recorded: dict[str, bytes]) -> Path:
    """A wheel of ``files`` whose RECORD lists the sha256 of each ``recorded`` content."""
    wheel = folder / "enginex-1.2-py3-none-any.whl"
    rows = []
    for name, data in recorded.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(data)}")
    with zipfile.ZipFile(wheel, "w") as out:
        for name, data in files.items():
            out.writestr(name, data)
        out.writestr("enginex-1.2.dist-info/RECORD", "\n".join(rows) + "\n")
    return wheel


def test_a_release_unpacks_only_its_python_sources_each_checked_against_record(
    tmp_path: Path,
) -> None:
    files = {"enginex/core/sched.py": b"X = 1\n", "enginex/_kernels.so": b"\x7fELF"}
    unpack(_wheel(tmp_path, files, files), "enginex", tmp_path / "out")
    unpacked = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*"))
    assert unpacked == [COMPLETE, "enginex", "enginex/core", "enginex/core/sched.py"]
    # A complete folder in the cache is the release: no download is attempted.
    cache = tmp_path / "cache"
    (cache / "enginex-1.2" / COMPLETE).parent.mkdir(parents=True)
    (cache / "enginex-1.2" / COMPLETE).touch()
    assert release_files("enginex", "1.2", cache, timeout=0) == cache / "enginex-1.2"


def test_a_source_that_differs_from_its_record_is_refused(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {"enginex/pool.py": b"changed"}, {"enginex/pool.py": b"as built"})
    with pytest.raises(CheckoutError, match=r"^enginex/pool\.py in enginex-1\.2-py3-none-any"):
        unpack(wheel, "enginex", tmp_path / "out")
    assert not (tmp_path / "out" / COMPLETE).exists()
