"""The suite's own pytest configuration.

Hypothesis settings are peftlife's own profiles, applied by the plugin to
peftlife's machines only (``--peftlife-profile``); nothing here loads a profile.
"""

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis.configuration import set_hypothesis_home_dir

# The fake TensorRT-LLM checkouts are loaded by the adapter under stand-in modules,
# never imported by pytest (their relative imports reach into tensorrt_llm).
collect_ignore_glob = ["tests/fake_trtllm/*"]
# A SUT module for the campaign deadline test: importing it swaps the shrinker for one
# that never ends, so only the campaign's own worker process may import it.
collect_ignore = ["tests/slow_shrinker.py"]


_HYPOTHESIS_HOME = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Hypothesis keeps its example database and caches (written while collecting, too) in
    ``.hypothesis/`` of the working directory: for this suite, a temporary directory, so a
    run leaves the checkout as it found it. Tests that run commands do so in their own."""
    home = Path(tempfile.mkdtemp(prefix="peftlife-suite-hypothesis-"))
    config.stash[_HYPOTHESIS_HOME] = home
    set_hypothesis_home_dir(home)


def pytest_unconfigure(config: pytest.Config) -> None:
    if (home := config.stash.get(_HYPOTHESIS_HOME, None)) is not None:
        set_hypothesis_home_dir(None)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands under test see no COLUMNS, as in a CI log.

    Off a terminal peftlife keeps its lines long unless COLUMNS asks otherwise, and
    the suite's runner may export one; tests that read output want the CI layout.
    """
    monkeypatch.delenv("COLUMNS", raising=False)
