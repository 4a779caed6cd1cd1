"""Writing a divergence's report files side by side: JSON, Markdown and HTML."""

from __future__ import annotations

import json
from pathlib import Path

from peftlife.reports.divergence.case import DiffCase, name, to_json
from peftlife.reports.divergence.html import render_html
from peftlife.reports.divergence.markdown import render_markdown
from peftlife.reports.folder import report_folder
from peftlife.search.diff import PairOutcome


def write(dcase: DiffCase, outcome: PairOutcome, directory: Path) -> dict[str, Path]:
    """Write the JSON, the Markdown and the HTML page side by side; return their paths."""
    report_folder(directory)
    stem = name(dcase)
    paths = {
        "json": directory / f"{stem}.json",
        "markdown": directory / f"{stem}.md",
        "html": directory / f"{stem}.html",
    }
    paths["json"].write_text(json.dumps(to_json(dcase, outcome), indent=1) + "\n", "utf-8")
    files = {"json": paths["json"].name, "html": paths["html"].name}
    paths["markdown"].write_text(render_markdown(dcase, outcome, files), "utf-8")
    paths["html"].write_text(render_html(dcase, outcome, files), "utf-8")
    return paths
