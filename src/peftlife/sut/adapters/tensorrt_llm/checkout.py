"""Load a TensorRT-LLM checkout's scheduler files, unmodified, over the stand-ins.

``Checkout.load(path)`` finds ``scheduler.py`` and ``scheduler_v2.py``, checks
that every ``tensorrt_llm`` name they import (at module level or inside a
method) is one the stand-ins provide, then executes both files under their
real module names with the stand-ins installed (``upstream.Loader``). The
loaded modules are kept by the ``Checkout`` object, not in ``sys.modules``:
``installed()`` puts them back for each call into the scheduler, with any
real ``tensorrt_llm`` hidden meanwhile. Two checkouts therefore live side by
side in one process.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import types
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from peftlife.sut.adapters.tensorrt_llm import standins
from peftlife.sut.adapters.tensorrt_llm.facades import KVCacheManagerV2
from peftlife.sut.adapters.upstream import CheckoutError, Loader, package_locations

DEFAULT_CLASS = "KVCacheV2Scheduler"
SCHEDULER_DIR = Path("tensorrt_llm", "_torch", "pyexecutor", "scheduler")
# The two upstream files, in load order, with their real module names.
FILES = (
    ("scheduler.py", f"{standins.SCHEDULER_PACKAGE}.scheduler"),
    ("scheduler_v2.py", f"{standins.SCHEDULER_PACKAGE}.scheduler_v2"),
)
NEWER = (
    "the checkout is newer than peftlife's TensorRT-LLM adapter "
    "(report it, or use an older checkout)"
)


def find_scheduler_dir(path: Path) -> Path:
    """The folder holding ``scheduler_v2.py`` in a checkout, a package or that folder itself.

    >>> try:
    ...     find_scheduler_dir(Path("/nowhere"))
    ... except CheckoutError as err:
    ...     print(str(err).split(":")[0])
    no scheduler_v2.py at /nowhere/tensorrt_llm/_torch/pyexecutor/scheduler/scheduler_v2.py
    """
    candidates = (path / SCHEDULER_DIR, path / Path(*SCHEDULER_DIR.parts[1:]), path)
    for folder in candidates:
        if (folder / "scheduler_v2.py").is_file():
            return folder
    raise CheckoutError(
        f"no scheduler_v2.py at {candidates[0] / 'scheduler_v2.py'}: give the root of a "
        "TensorRT-LLM checkout (or an installed tensorrt_llm package directory)"
    )


def installed_package() -> Path:
    """The directory of the installed ``tensorrt_llm`` package, found without importing it
    (``upstream.package_locations``), that holds the scheduler files."""
    locations = package_locations(standins.ROOT)
    for location in locations:
        if (location / Path(*SCHEDULER_DIR.parts[1:]) / "scheduler_v2.py").is_file():
            return location
    if not locations:
        raise CheckoutError(
            "no installed tensorrt_llm package was found on this Python's path: give a "
            "checkout's path instead, trtllm:PATH (e.g. trtllm:~/src/TensorRT-LLM)"
        )
    where = ", ".join(str(p) for p in locations)
    raise CheckoutError(
        f"the installed tensorrt_llm package ({where}) has no "
        f"{Path(*SCHEDULER_DIR.parts[1:]) / 'scheduler_v2.py'}: give a checkout's path instead, "
        "trtllm:PATH"
    )


def _absolute(module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    # Relative to the scheduler package, where both files live.
    package = standins.SCHEDULER_PACKAGE.rsplit(".", level - 1)[0]
    return f"{package}.{module}" if module else package


def _uncovered_imports(source: str, modules: dict[str, types.ModuleType]) -> Iterator[str]:
    """Each ``tensorrt_llm`` import of ``source`` the stand-ins (or the two files) lack."""
    own = {name for _, name in FILES}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = _absolute(node.module, node.level)
            if not module.startswith(standins.ROOT) or module in own:
                continue
            if module not in modules:
                yield f"module {module!r}"
                continue
            for alias in node.names:
                if alias.name != "*" and alias.name not in vars(modules[module]):
                    yield f"name {alias.name!r} from module {module!r}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(standins.ROOT) and alias.name not in modules:
                    yield f"module {alias.name!r}"


def _with_recompute_paused(output: Any) -> Any:
    """Upstream's ``SchedulerOutput`` with a ``recompute_paused_requests`` field.

    Older ``scheduler.py`` files (a namedtuple) lack it while ``scheduler_v2.py``
    passes it; the field is added with a None default when absent.
    """
    if isinstance(output, type) and dataclasses.is_dataclass(output):
        if "recompute_paused_requests" in {f.name for f in dataclasses.fields(output)}:
            return output
        return dataclasses.make_dataclass(
            output.__name__,
            [("recompute_paused_requests", Any, dataclasses.field(default=None))],
            bases=(output,),
            namespace={"__module__": output.__module__},
        )
    fields = getattr(output, "_fields", None)
    if fields is None or "recompute_paused_requests" in fields:
        return output
    defaults = [output._field_defaults[f] for f in fields if f in output._field_defaults]
    return collections.namedtuple(
        output.__name__,
        [*fields, "recompute_paused_requests"],
        defaults=[*defaults, None],
        module=output.__module__,
    )


class Checkout:
    """One loaded checkout: its modules (stand-ins included) and its scheduler class."""

    def __init__(self, path: Path, class_name: str | None = None) -> None:
        self.path = path
        self.class_name = class_name or DEFAULT_CLASS
        self.folder = find_scheduler_dir(path)
        self.loader = Loader(
            lambda misses: standins.build(KVCacheManagerV2, misses),
            advice=NEWER,
            hide=standins.ROOT,
        )
        self.modules = self.loader.modules
        for filename, name in FILES:
            self._load(self.folder / filename, name)
        cls = getattr(self.modules[FILES[1][1]], self.class_name, None)
        if not isinstance(cls, type) or not callable(getattr(cls, "schedule_request", None)):
            found = sorted(
                n
                for n, v in vars(self.modules[FILES[1][1]]).items()
                if isinstance(v, type) and callable(getattr(v, "schedule_request", None))
            )
            raise CheckoutError(
                f"{self.folder / 'scheduler_v2.py'} has no scheduler class {self.class_name!r}; "
                f"its schedulers: {', '.join(found) or 'none'} (use trtllm:PATH:ClassName)"
            )
        self.scheduler_class: type = cls

    def installed(self) -> AbstractContextManager[None]:
        """The checkout's modules in ``sys.modules`` for the block, and only then."""
        return self.loader.installed()

    def _load(self, file: Path, name: str) -> None:
        if not file.is_file():
            raise CheckoutError(f"no {file.name} at {file} (it sits beside scheduler_v2.py)")
        source = file.read_text(encoding="utf-8")
        try:
            uncovered = list(_uncovered_imports(source, self.modules))
        except SyntaxError as err:
            raise CheckoutError(f"{file} does not parse: {err}") from err
        if uncovered:
            raise CheckoutError(f"{file} imports {uncovered[0]}, which has no stand-in: {NEWER}")
        module = self.loader.load(file, name, source)
        if name == FILES[0][1] and hasattr(module, "SchedulerOutput"):
            setattr(module, "SchedulerOutput", _with_recompute_paused(module.SchedulerOutput))  # noqa: B010
