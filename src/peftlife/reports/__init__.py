"""Counterexample reports: a shrunk failure a person reads in a minute and replays forever.

Two stacks share one module of words and JSON (``format``) and the report
folder (``folder``). A finding's (``finding``): from a ``Case`` and the
``Outcome`` of its replay, the terminal story (``terminal``), Markdown
(``markdown``), JSON (``case``), a standalone regression test (``regression``)
and an HTML timeline (``html``); ``write`` puts the files side by side in a
report directory, whose ``index.html`` (``write_index``) lists every finding
and the mutant gate. A divergence of two schedulers (``divergence``), side by
side in the same forms but the test. The names below are the finding's.
"""

from peftlife.reports.finding.case import (
    SCHEMA_VERSION,
    Case,
    Entry,
    Outcome,
    ReportError,
    load_json,
    replay,
    scenario_of,
    to_json,
    trace_hash,
)
from peftlife.reports.finding.files import write
from peftlife.reports.finding.html import render_html, render_index, write_index
from peftlife.reports.finding.markdown import render_markdown
from peftlife.reports.finding.regression import (
    KEPT_TEST_PREFIX,
    CaseFailed,
    case_name,
    check_case,
    is_kept_test,
    kept_test_name,
    render_regression_test,
)
from peftlife.reports.finding.story import Step, story, violation_subjects
from peftlife.reports.finding.terminal import print_report, render_terminal, terminal_text
from peftlife.reports.folder import report_folder, unwritable
from peftlife.reports.format import EXPLORED, REPLAYED, world_lines

__all__ = [
    "EXPLORED",
    "KEPT_TEST_PREFIX",
    "REPLAYED",
    "SCHEMA_VERSION",
    "Case",
    "CaseFailed",
    "Entry",
    "Outcome",
    "ReportError",
    "Step",
    "case_name",
    "check_case",
    "is_kept_test",
    "kept_test_name",
    "load_json",
    "print_report",
    "render_html",
    "render_index",
    "render_markdown",
    "render_regression_test",
    "render_terminal",
    "replay",
    "report_folder",
    "scenario_of",
    "story",
    "terminal_text",
    "to_json",
    "trace_hash",
    "unwritable",
    "violation_subjects",
    "world_lines",
    "write",
    "write_index",
]
