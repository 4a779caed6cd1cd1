"""Hypothesis settings profiles for this repository's suite.

``dev`` by default, ``ci`` when the CI variable is set; any registered profile
with ``--hypothesis-profile NAME``. The profiles live in ``peftlife.search.profiles``
so the command line and the pytest plugin have them outside this repository.
"""

from hypothesis import settings

from peftlife.search import profiles

profiles.register()
settings.load_profile(profiles.default_name())

# The fake TensorRT-LLM checkouts are loaded by the adapter under stand-in modules,
# never imported by pytest (their relative imports reach into tensorrt_llm).
collect_ignore_glob = ["tests/fake_trtllm/*"]
