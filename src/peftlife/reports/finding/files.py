"""Writing a finding's report files side by side: JSON, Markdown, HTML and the regression test."""

from __future__ import annotations

import json
from pathlib import Path

from peftlife.reports.finding.case import Case, to_json
from peftlife.reports.finding.html import write_html
from peftlife.reports.finding.markdown import render_markdown
from peftlife.reports.finding.regression import KEPT_TEST_PREFIX, case_name, render_regression_test
from peftlife.reports.folder import report_folder
from peftlife.search.trace import Outcome


def write(case: Case, outcome: Outcome, directory: Path) -> dict[str, Path]:
    """Write the JSON, the Markdown, the regression test and the HTML page (refreshing
    the directory's index); return their paths."""
    report_folder(directory)
    name = case_name(case, outcome)
    paths = {
        "json": directory / f"{name}.json",
        "markdown": directory / f"{name}.md",
        "test": directory / f"{KEPT_TEST_PREFIX}{name}.py",
    }
    paths["json"].write_text(json.dumps(to_json(case, outcome), indent=1) + "\n", "utf-8")
    # As the command that wrote them was given the folder: relative to where it ran, so
    # the line runs as written from there (absolute when the folder was named so).
    files = {
        "replay": f"peftlife replay {paths['json']}",
        "regression test": str(paths["test"]),
    }
    paths["markdown"].write_text(render_markdown(case, outcome, files), "utf-8")
    paths["test"].write_text(render_regression_test(case, outcome), "utf-8")
    paths |= write_html(case, outcome, paths["json"], files)
    return paths
