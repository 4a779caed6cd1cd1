"""The layers and what importing them costs, pinned.

Data flows downhill through six layers, ``world`` < ``sut`` < ``checker`` <
``search`` < ``reports`` < ``doors``: a layer imports only those below it,
read from the sources' import statements (every one, those inside functions
and under ``TYPE_CHECKING`` included). No module imports itself back through
others. And the top-level package loads its names lazily, so the world alone
loads neither Hypothesis nor rich.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import peftlife

LAYERS = ("world", "sut", "checker", "search", "reports", "doors")
PACKAGE = Path(peftlife.__file__).parent


def _imported(tree: ast.Module) -> Iterator[str]:
    """Every module an import statement names; ``from peftlife import X`` names X's home."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "peftlife imports by absolute name"
            module = node.module or ""
            if module == "peftlife":
                for alias in node.names:
                    yield peftlife._HOMES.get(alias.name, f"peftlife.{alias.name}")
            else:
                yield module


def _layer(module: str) -> str | None:
    """The layer a module name belongs to; ``peftlife`` itself is every layer at once."""
    parts = module.split(".")
    if parts[0] != "peftlife":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "peftlife"


def _imports_by_layer() -> dict[str, dict[str, set[str]]]:
    """For each layer, the modules it imports and the files that import each."""
    found: dict[str, dict[str, set[str]]] = {layer: {} for layer in LAYERS}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] not in LAYERS:
            continue
        for module in _imported(ast.parse(path.read_text("utf-8"))):
            found[relative.parts[0]].setdefault(module, set()).add(str(relative))
    return found


IMPORTS = _imports_by_layer()


def _layers_imported(layer: str) -> dict[str, set[str]]:
    """The other layers ``layer`` imports (``peftlife`` for the package itself), with files."""
    layers: dict[str, set[str]] = {}
    for module, files in IMPORTS[layer].items():
        other = _layer(module)
        if other is not None and other != layer:
            layers.setdefault(other, set()).update(files)
    return layers


def test_every_layer_has_sources() -> None:
    assert all(IMPORTS[layer] for layer in LAYERS)


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imports_only_the_layers_below_it(layer: str) -> None:
    below = set(LAYERS[: LAYERS.index(layer)])
    # The package itself re-exports every layer: only the top layer may import it.
    allowed = below | {"peftlife"} if layer == "doors" else below
    upward = {other: sorted(files) for other, files in _layers_imported(layer).items()}
    assert {o: f for o, f in upward.items() if o not in allowed} == {}


def test_the_world_imports_no_other_layer() -> None:
    assert _layers_imported("world") == {}


def test_the_checker_imports_only_the_world() -> None:
    assert set(_layers_imported("checker")) == {"world"}


def _reports_stack_imports(stack: str) -> set[str]:
    """The modules of ``peftlife.reports`` that the files of one stack import."""
    return {
        module
        for module, files in IMPORTS["reports"].items()
        if module.startswith("peftlife.reports.")
        and any(f.startswith(f"reports/{stack}/") for f in files)
    }


def test_the_report_stacks_share_only_the_common_modules() -> None:
    """A finding's reports know nothing of divergences; a divergence's reuse a finding's
    case (A's side of it) and otherwise only what both share."""
    shared = {"peftlife.reports.format", "peftlife.reports.folder"}
    finding = _reports_stack_imports("finding")
    divergence = _reports_stack_imports("divergence")
    assert not {m for m in finding if m.startswith("peftlife.reports.divergence")}
    outside = {m for m in divergence if not m.startswith("peftlife.reports.divergence.")}
    assert outside == shared | {"peftlife.reports.finding.case"}
    assert shared <= finding


def test_the_world_imports_neither_hypothesis_nor_rich() -> None:
    third_party = {module.split(".")[0] for module in IMPORTS["world"]}
    assert not third_party & {"hypothesis", "rich"}


# ---- no import circle among modules ----


def _module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def _module_graph() -> dict[str, set[str]]:
    """Each peftlife module and the peftlife modules its import statements name:
    ``from package import name`` names the submodule when there is one."""
    paths = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        named: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module != "peftlife":
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    named.add(submodule if submodule in paths else node.module or "")
            elif isinstance(node, ast.Import | ast.ImportFrom):
                named.update(_imported(ast.Module(body=[node], type_ignores=[])))
        graph[module] = {m for m in named if m in paths and m != module}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each module that can reach itself, found by walking the graph
    depth first (bounded: each module is entered once)."""
    done: set[str] = set()
    path: list[str] = []
    circles: list[list[str]] = []

    def walk(module: str) -> None:
        path.append(module)
        for nxt in sorted(graph[module]):
            if nxt in path:
                circles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in done:
                walk(nxt)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            walk(module)
    return circles


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c", "a"]]


def test_the_graph_reads_imports_of_submodules() -> None:
    assert "peftlife.world.loops" in _module_graph()["peftlife.world.engine"]


def test_no_module_imports_itself_through_others() -> None:
    assert _circles(_module_graph()) == []


# ---- the lazy top-level package ----


def test_importing_the_world_loads_neither_hypothesis_nor_rich() -> None:
    code = (
        "import sys, peftlife.world.kv\n"
        "print(sorted(m for m in ('hypothesis', 'rich') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_every_top_level_name_loads_on_first_use() -> None:
    code = (
        "import peftlife\n"
        "names = [getattr(peftlife, n) for n in peftlife.__all__]\n"
        "print(peftlife.__version__, set(peftlife.__all__) <= set(dir(peftlife)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == [peftlife.__version__, "True"]
    assert "__version__" in dir(peftlife)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        peftlife.nothing_here  # noqa: B018
