"""An engine release's Python files, from the package registry, without installing it.

``release_files("vllm", "0.33.0", cache)`` runs ``pip download --no-deps`` for
that release's wheel (once: a later call finds the files in ``cache``), checks
each of its Python sources against the wheel's ``RECORD`` (so what runs is the
release's file, byte for byte), and unpacks them, and only them, to
``cache/vllm-VERSION/vllm/...``; the wheel and its compiled extensions are not
kept. Every source, not only those loaded today: which files a part of an
engine needs changes from release to release, and a cached release must serve
them all. Nothing is installed and none of the engine's dependencies are
fetched.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from peftlife.sut.adapters.upstream.loader import CheckoutError

DOWNLOAD_SECONDS = 600  # vLLM's wheel is some 340 MB
# Written last, so a folder without it is a half-unpacked one to unpack again.
COMPLETE = ".unpacked"


def _record_digests(wheel: zipfile.ZipFile) -> dict[str, str]:
    record = next(n for n in wheel.namelist() if n.endswith(".dist-info/RECORD"))
    rows = csv.reader(io.StringIO(wheel.read(record).decode("utf-8")))
    return {row[0]: row[1] for row in rows if len(row) >= 2 and row[1]}


def _digest(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def unpack(wheel_path: Path, package: str, target: Path) -> None:
    """The Python sources of ``wheel_path`` under ``target/package``, each checked against RECORD.

    For example ``unpack(Path("vllm-0.34.0-cp38-abi3-manylinux1_x86_64.whl"), "vllm",
    cache / "vllm-0.34.0")`` writes ``cache/vllm-0.34.0/vllm/v1/request.py`` and the rest.
    """
    with zipfile.ZipFile(wheel_path) as wheel:
        digests = _record_digests(wheel)
        sources = [n for n in wheel.namelist() if n.startswith(f"{package}/") and n.endswith(".py")]
        for member in sources:
            data = wheel.read(member)
            if digests.get(member) != _digest(data):
                raise CheckoutError(f"{member} in {wheel_path.name} does not match its RECORD")
            out = target / member
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
    (target / COMPLETE).touch()


def _complete(target: Path) -> bool:
    return (target / COMPLETE).is_file()


def release_files(
    package: str, version: str, cache: Path, timeout: float = DOWNLOAD_SECONDS
) -> Path:
    """The folder holding release ``version``'s ``package`` files, downloaded once into ``cache``.

    Each call works in its own temporary folder and moves the result into
    place at the end, so two test runs sharing a cache never see each
    other's half-unpacked files; the wheel goes with the temporary folder.
    """
    target = cache / f"{package}-{version}"
    if _complete(target):
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=f".{package}-{version}-") as work:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
        command += ["--disable-pip-version-check", "-q", "-d", work, f"{package}=={version}"]
        try:
            subprocess.run(command, check=True, timeout=timeout, capture_output=True)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
            raise CheckoutError(f"pip download of {package}=={version} failed: {err}") from err
        found = sorted(Path(work).glob(f"{package}-{version}-*.whl"))
        if not found:
            raise CheckoutError(f"pip download of {package}=={version} left no wheel in {work}")
        unpacked = Path(work) / "release"
        unpack(found[0], package, unpacked)
        if not _complete(target):
            shutil.rmtree(target, ignore_errors=True)  # a stale, incomplete folder
            try:
                unpacked.rename(target)
            except OSError:
                if not _complete(target):  # not another run's complete copy: a real failure
                    raise
    return target
