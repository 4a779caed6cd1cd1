"""Where and how long to search, and the search itself.

Scenario profiles (``scenarios``, TOML files in ``strategies/``) say where;
settings profiles (``profiles``) say how long; ``machine`` is the Hypothesis
state machine over the actions of ``trace``; ``shrink`` reduces a finding.
"""
