"""A standalone regression test that replays a case and fails while the defect is there."""

from __future__ import annotations

import pprint
import re
import textwrap
from typing import Any

import attrs

from peftlife.reports.finding.case import Case, replay, to_json, trace_hash
from peftlife.reports.finding.terminal import terminal_text
from peftlife.search.trace import Outcome

# ---- the regression test ----

# How a kept test's file name begins, and the first line of its docstring: how the pytest
# plugin knows one.
KEPT_TEST_PREFIX = "test_peftlife_"
KEPT_TEST_HEADLINE = "Regression test kept from a peftlife counterexample."
_TEST_TEMPLATE = '''"""Regression test kept from a peftlife counterexample.

{headline}

It replays the exact steps through the engine, with no search, and checks every
invariant after every iteration, then the drain. It fails with the story while
the defect is there and passes once it is fixed. Replay it against another
scheduler with ``pytest --peftlife-sut SPEC``.
"""

from peftlife import check_case

CASE = {case}


def test_{function}(peftlife_sut: str | None) -> None:
    check_case(CASE, sut=peftlife_sut)
'''


def is_kept_test(docstring: str | None) -> bool:
    """Whether a module with this docstring is a regression test written here."""
    return (docstring or "").startswith(KEPT_TEST_HEADLINE)


class CaseFailed(AssertionError):
    """A kept case still fails; the message is its story, as the terminal tells it."""


def check_case(data: dict[str, Any], sut: str | None = None) -> None:
    """Replay a kept case (a report's JSON object) and raise ``CaseFailed`` with the story.

    ``sut`` replays it against another scheduler instead of the recorded one.

    >>> check_case({"schema_version": 0})
    Traceback (most recent call last):
    ...
    peftlife.reports.finding.case.ReportError: report schema_version is 0; ...
    """
    case = Case.from_json(data)
    outcome = replay(case, sut=sut)
    if not outcome.held:
        shown = case if sut is None else attrs.evolve(case, sut=sut)
        raise CaseFailed("\n" + terminal_text(shown, outcome, width=100))


def case_name(case: Case, outcome: Outcome) -> str:
    """A file-system and Python friendly name for this case, unique per shrunk trace."""
    invariant = outcome.violations[0].invariant if outcome.violations else "held"
    raw = f"{case.sut}_{case.scenario}_{invariant}_{trace_hash(case)}"
    return re.sub(r"[^0-9a-zA-Z]+", "_", raw).strip("_").lower()


def render_regression_test(case: Case, outcome: Outcome) -> str:
    data = to_json(case, outcome)
    kept = {k: data[k] for k in ("schema_version", "sut", "scenario", "seed", "profile")}
    kept |= {"config": data["config"], "actions": data["actions"]}
    headline = (
        f"{outcome.violations[0]}" if outcome.violations else "Every invariant held."
    ).replace('"""', "'''")
    return _TEST_TEMPLATE.format(
        headline=textwrap.fill(headline, width=88),
        case=pprint.pformat(kept, width=96, sort_dicts=False),
        function=kept_test_name(case, outcome),
    )


def kept_test_name(case: Case, outcome: Outcome) -> str:
    """The kept test's function name without ``test_``: the invariant and the trace hash."""
    invariant = outcome.violations[0].invariant if outcome.violations else "held"
    return f"{invariant}_{trace_hash(case)}"
