"""The structure of a timeline page, read back with the standard library's HTML parser.

The golden test and the browser tests compare this, not pixels: the grid's
rows, its columns, the actions on each column and the cells that are marked.
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any


class _Grid(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[str] = []
        self.columns: list[dict[str, Any]] = []
        self.acts: dict[str, list[str]] = {}
        self.cells: list[dict[str, str]] = []
        self.notes: dict[str, str] = {}
        self.details: list[str] = []
        self.external: list[str] = []
        self._act_column: str | None = None
        self._in_act = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        for key in ("src", "href"):
            if key in a and "://" in a[key]:
                self.external.append(a[key])
        if tag == "link":
            self.external.append(a.get("href", ""))
        if tag == "tr" and "data-row" in a:
            self.rows.append(a["data-row"])
        elif tag == "th" and "col" in classes:
            group = "drain" if "drain" in classes else "fold" if "fold" in classes else "step"
            self.columns.append({"iteration": int(a["data-iteration"]), "group": group})
        elif tag == "td" and "acts" in classes:
            self._act_column = a["data-iteration"] + ("/fold" if "fold" in classes else "")
        elif tag == "span" and "act" in classes and self._act_column is not None:
            self._in_act = True
        elif tag == "td" and "cell" in classes:
            cell = {k.removeprefix("data-"): v for k, v in a.items() if k.startswith("data-")}
            cell["group"] = (
                "drain" if "drain" in classes else "fold" if "fold" in classes else "step"
            )
            if "violating" in classes:
                cell["violating"] = "yes"
            self.cells.append(cell)
        elif tag == "td" and "note" in classes and "data-invariant" in a:
            self.notes[self.rows[-1]] = a["data-invariant"]
        elif tag == "section" and "detail" in classes:
            self.details.append(a["data-iteration"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self._in_act = False
        elif tag == "td":
            self._act_column = None

    def handle_data(self, data: str) -> None:
        if self._in_act and self._act_column is not None:
            self.acts.setdefault(self._act_column, []).append(data)


def grid_structure(page: str) -> dict[str, Any]:
    """Rows, columns, actions per column, every cell's data and the marked cells."""
    parser = _Grid()
    parser.feed(page)
    return {
        "rows": parser.rows,
        "columns": parser.columns,
        "acts": parser.acts,
        "cells": parser.cells,
        "marked": [c for c in parser.cells if c.get("violating")],
        "notes": parser.notes,
        "details": parser.details,
        "external": parser.external,
    }
