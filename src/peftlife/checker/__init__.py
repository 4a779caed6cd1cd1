"""The checker: the invariants as pure functions of a snapshot, and the end-of-run drain."""
