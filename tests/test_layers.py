"""What importing peftlife costs: the top-level package loads its names lazily,
so the world alone loads neither Hypothesis nor rich."""

from __future__ import annotations

import subprocess
import sys

import pytest

import peftlife


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
