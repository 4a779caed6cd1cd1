"""The world a scheduler runs in: requests, KV pools, the PEFT manager, and the executor loop.

It models the upstream managers by their upstream names, records every call
in a ledger, and shows itself to the checker as snapshots. It never imports
Hypothesis, the checker or any scheduler.
"""
