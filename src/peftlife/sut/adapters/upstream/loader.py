"""Execute an engine's upstream files, unmodified, under their real module names over stand-ins.

A ``Loader`` owns one set of modules: the stand-ins its ``build`` makes and
each upstream file it loads. The modules are kept by the loader, not in
``sys.modules``: ``installed()`` puts them back for each call into them, so
two checkouts (or two releases) live side by side in one process. A file
that asks a stand-in for a name it lacks, or imports a module that is
neither installed nor stood in, is one ``CheckoutError`` line naming the
release, the file, the module and the name.

``find_package`` and ``package_locations`` find an engine's files in a
checkout or an installed package without importing any of them.
"""

from __future__ import annotations

import importlib.util
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from peftlife.sut.adapters.upstream.standins import MissingStandIn, installed


class CheckoutError(ValueError):
    """A checkout peftlife cannot load; the message names what is missing and where."""


def find_package(path: Path, package: str, marker: str, engine: str) -> Path:
    """The ``package`` directory of a checkout at ``path``, or ``path`` itself if it is one:
    the first of the two that holds the file ``marker``.

    >>> try:
    ...     find_package(Path("/nowhere"), "vllm", "lora/worker_manager.py", "vLLM")
    ... except CheckoutError as err:
    ...     print(str(err).split(":")[0])
    no worker_manager.py at /nowhere/vllm/lora/worker_manager.py
    """
    for folder in (path / package, path):
        if (folder / marker).is_file():
            return folder
    raise CheckoutError(
        f"no {Path(marker).name} at {path / package / marker}: give the root of a {engine} "
        f"checkout or a {package} package directory"
    )


def package_locations(package: str) -> list[Path]:
    """The directories of the installed top-level ``package``, found without importing it.

    ``importlib.util.find_spec`` of a top-level name only asks the import
    system's finders where the package is: its ``__init__`` does not run, so
    neither torch nor CUDA is loaded. (Asking for a submodule would import
    its parents, which is why callers join their folder to these locations.)

    >>> package_locations("no_such_engine_here")
    []
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):  # ValueError: a module in sys.modules without a spec
        spec = None
    return [Path(p) for p in (spec.submodule_search_locations or ())] if spec else []


class Loader:
    """Upstream files executed over the stand-ins ``build(misses)`` makes, out of ``sys.modules``.

    ``release`` heads each error line (``"vLLM 0.34.0"``); ``advice`` ends the
    lines that name what a newer release needs; ``hide`` is the engine's
    top-level package, whose real modules are hidden while the stand-ins are
    installed.

    >>> Loader(lambda misses: {}, release="vLLM 0.34.0").read(Path("/nowhere/envs.py"))
    Traceback (most recent call last):
    ...
    peftlife.sut.adapters.upstream.loader.CheckoutError: vLLM 0.34.0: no envs.py at /nowhere/envs.py
    """

    def __init__(
        self,
        build: Callable[[list[MissingStandIn]], dict[str, types.ModuleType]],
        *,
        release: str | None = None,
        advice: str | None = None,
        hide: str | None = None,
    ) -> None:
        self.misses: list[MissingStandIn] = []
        self.modules = build(self.misses)
        self.release = release
        self.advice = advice
        self.hide = hide

    def error(self, message: str) -> CheckoutError:
        """A ``CheckoutError`` headed by the release, when there is one."""
        return CheckoutError(f"{self.release}: {message}" if self.release else message)

    def read(self, file: Path) -> str:
        """The source of an upstream file the chain needs; its absence is one line."""
        if not file.is_file():
            raise self.error(f"no {file.name} at {file}")
        return file.read_text(encoding="utf-8")

    @contextmanager
    def installed(self) -> Iterator[None]:
        """The modules in ``sys.modules`` for the block, and only then."""
        with installed(self.modules, self.hide):
            yield

    def load(self, file: Path, name: str, source: str | None = None) -> types.ModuleType:
        """``file`` (or ``source``, read from it) executed as module ``name``, which joins the
        modules and, as Python's import does, becomes an attribute of its package."""
        if source is None:
            source = self.read(file)
        spec = importlib.util.spec_from_file_location(name, file)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        self.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent in self.modules:  # `from vllm import envs` finds the module there
            self.modules[parent].__dict__[child] = module
        del self.misses[:]
        try:
            # Compiled here rather than by the module's loader, which would write a
            # __pycache__ into the checkout.
            code = compile(source, str(file), "exec")
            with self.installed():
                exec(code, module.__dict__)
        except Exception as err:  # an upstream file is untrusted code
            raise self._failed(file, err) from err
        return module

    def _failed(self, file: Path, err: Exception) -> CheckoutError:
        advice = f": {self.advice}" if self.advice else ""
        if isinstance(err, ImportError | AttributeError) and self.misses:
            miss = self.misses[0]
            return self.error(
                f"{file} needs {miss.name!r} from {miss.module!r}, which has no stand-in{advice}"
            )
        if isinstance(err, ModuleNotFoundError):
            return self.error(
                f"{file} imports module {err.name!r}, which is neither installed nor stood "
                f"in{advice}"
            )
        return self.error(f"importing {file} raised {type(err).__name__}: {err}")
