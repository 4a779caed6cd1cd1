"""Writing a finding's report files side by side: JSON, Markdown, HTML and the regression test."""

from __future__ import annotations

import json
from pathlib import Path

from peftlife.reports.case import Case, to_json
from peftlife.reports.html import write_html
from peftlife.reports.markdown import render_markdown
from peftlife.reports.regression import case_name, render_regression_test
from peftlife.search.trace import Outcome

# ---- writing all of them ----


def write(case: Case, outcome: Outcome, directory: Path) -> dict[str, Path]:
    """Write the JSON, the Markdown, the regression test and the HTML page (refreshing
    the directory's index); return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    name = case_name(case, outcome)
    paths = {
        "json": directory / f"{name}.json",
        "markdown": directory / f"{name}.md",
        "test": directory / f"test_peftlife_{name}.py",
    }
    paths["json"].write_text(json.dumps(to_json(case, outcome), indent=1) + "\n", "utf-8")
    files = {
        "replay": f"peftlife replay {paths['json'].name}",
        "regression test": paths["test"].name,
    }
    paths["markdown"].write_text(render_markdown(case, outcome, files), "utf-8")
    paths["test"].write_text(render_regression_test(case, outcome), "utf-8")
    paths |= write_html(case, outcome, paths["json"], files)
    return paths
