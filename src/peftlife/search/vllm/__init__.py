"""vLLM's world for the search: its scenarios, its state machine and its search."""
