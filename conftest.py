"""The suite's own pytest configuration.

Hypothesis settings are peftlife's own profiles, applied by the plugin to
peftlife's machines only (``--peftlife-profile``); nothing here loads a profile.
"""

# The fake TensorRT-LLM checkouts are loaded by the adapter under stand-in modules,
# never imported by pytest (their relative imports reach into tensorrt_llm).
collect_ignore_glob = ["tests/fake_trtllm/*"]
