"""The shrunk cases of docs/upstream-findings.md: each loads, is listed, and replays.

They were found on TensorRT-LLM's own scheduler files, which are not in this
repository, so here each replays against peftlife's reference scheduler on the
same world and trace. A finding the page calls the scheduler's must hold under a
correct scheduler (else the trace, not the scheduler, is what fails); one it
calls the executor's is flagged there too, on the invariant the page names.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from peftlife import reports as report

DOCS = Path(__file__).parents[2] / "docs"
PAGE = DOCS / "upstream-findings.md"
FINDINGS = DOCS / "findings"
# A row of the page's summary table:
# | id | finding | configuration | [case](findings/NAME.json) | whose | invariant | trees |
ROW = re.compile(
    r"^\|\s*(?P<id>D\d+)\s*\|[^|]*\|[^|]*\|\s*\[[^\]]*\]\(findings/(?P<case>[\w.-]+\.json)\)\s*"
    r"\|\s*(?P<whose>scheduler|executor)\s*\|\s*`(?P<invariant>\w+)`\s*\|",
    re.MULTILINE,
)


def listed() -> dict[str, tuple[str, str, str]]:
    """Each case the page's table lists: file name -> (id, whose, invariant)."""
    rows = ROW.finditer(PAGE.read_text(encoding="utf-8"))
    return {m["case"]: (m["id"], m["whose"], m["invariant"]) for m in rows}


def test_every_case_on_disk_is_listed_and_every_listed_case_is_on_disk() -> None:
    on_disk = {p.name for p in FINDINGS.glob("*.json")}
    assert on_disk, "docs/findings/ holds no case"
    assert set(listed()) == on_disk


@pytest.mark.parametrize("name", sorted(p.name for p in FINDINGS.glob("*.json")))
def test_a_case_replays_as_the_page_says(name: str) -> None:
    finding, whose, invariant = listed()[name]
    case = report.load_json(FINDINGS / name)
    assert case.sut.startswith("trtllm:"), f"{finding}: found on a TensorRT-LLM checkout"
    outcome = report.replay(case, sut="reference")
    flagged = {v.invariant for v in outcome.violations}
    if whose == "scheduler":
        assert outcome.held, f"{finding}: the reference fails the trace too: {flagged}"
    else:
        assert invariant in flagged, f"{finding}: the executor's fault did not show: {flagged}"
