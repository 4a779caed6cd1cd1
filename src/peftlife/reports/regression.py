"""A standalone regression test that replays a case and fails while the defect is there."""

from __future__ import annotations

import hashlib
import json
import pprint
import re

from peftlife.reports.case import Case, to_json
from peftlife.search.trace import Outcome

# ---- the regression test ----

_TEST_TEMPLATE = '''"""Regression test kept from a peftlife counterexample.

{headline}

It replays the exact steps through the engine, with no search, and checks every
invariant after every iteration, then the drain. It fails while the defect is
there and passes once it is fixed. Replay it against another scheduler with
``pytest --peftlife-sut SPEC``.
"""

from peftlife.reports import Case, replay

CASE = {case}


def test_{name}(peftlife_sut: str | None) -> None:
    outcome = replay(Case.from_json(CASE), sut=peftlife_sut)
    assert outcome.held, "\\n".join(str(v) for v in outcome.violations)
'''


def case_name(case: Case, outcome: Outcome) -> str:
    """A file-system and Python friendly name for this case, unique to its trace."""
    invariant = outcome.violations[0].invariant if outcome.violations else "held"
    trace = json.dumps([to_json(case, outcome)[k] for k in ("config", "actions")])
    digest = hashlib.sha256(trace.encode()).hexdigest()[:8]
    raw = f"{case.sut}_{case.scenario}_{invariant}_{digest}"
    return re.sub(r"[^0-9a-zA-Z]+", "_", raw).strip("_").lower()


def render_regression_test(case: Case, outcome: Outcome) -> str:
    data = to_json(case, outcome)
    kept = {k: data[k] for k in ("schema_version", "sut", "scenario", "seed", "profile")}
    kept |= {"config": data["config"], "actions": data["actions"]}
    headline = (
        f"{outcome.violations[0]}" if outcome.violations else "Every invariant held."
    ).replace('"""', "'''")
    return _TEST_TEMPLATE.format(
        headline=headline,
        case=pprint.pformat(kept, width=96, sort_dicts=False),
        name=case_name(case, outcome),
    )
