"""A scheduler with two defects of the mutant catalogue, for a check that keeps going.

Its suspend never releases the adapter (``no_release_on_suspend``) and its pass
schedules past ``max_num_tokens`` (``token_budget_ignored``): two defects that
break two invariants by different moves, which a search must find apart.
"""

from __future__ import annotations

from peftlife.sut.mutants import NoReleaseOnSuspend, TokenBudgetIgnored


class TwoDefects(NoReleaseOnSuspend, TokenBudgetIgnored):
    pass
