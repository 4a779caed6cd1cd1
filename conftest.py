"""The suite's own pytest configuration.

Hypothesis settings are peftlife's own profiles, applied by the plugin to
peftlife's machines only (``--peftlife-profile``); nothing here loads a profile.
"""

import pytest

# The fake TensorRT-LLM checkouts are loaded by the adapter under stand-in modules,
# never imported by pytest (their relative imports reach into tensorrt_llm).
collect_ignore_glob = ["tests/fake_trtllm/*"]
# A SUT module for the campaign deadline test: importing it swaps the shrinker for one
# that never ends, so only the campaign's own worker process may import it.
collect_ignore = ["tests/slow_shrinker.py"]


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands under test see no COLUMNS, as in a CI log.

    Off a terminal peftlife keeps its lines long unless COLUMNS asks otherwise, and
    the suite's runner may export one; tests that read output want the CI layout.
    """
    monkeypatch.delenv("COLUMNS", raising=False)
