"""Writing a finding's report files side by side: JSON, Markdown, HTML and the regression test."""

from __future__ import annotations

import json
import os
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


def unwritable(directory: Path, option: str) -> str | None:
    """Why report files could not be written in ``directory`` (made if missing), as the
    one-line error for the front-door ``option`` that named it; None if they could.

    Checked before a search, so a finding is never lost to a bad directory.

    >>> unwritable(Path("."), "--report-dir")
    """
    existing = directory
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing.exists() else "does not exist"
        why = f"{str(existing)!r} {what}"
    elif not os.access(existing, os.W_OK | os.X_OK):
        why = f"{str(existing)!r} is not writable"
    else:
        return None
    return f"{option} {str(directory)!r} cannot be written: {why}; name a directory you can write"
