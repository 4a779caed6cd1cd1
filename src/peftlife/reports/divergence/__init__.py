"""A divergence of two schedulers, side by side: terminal, Markdown, JSON and HTML.

``case`` is the report file's format and the replay on both schedulers;
``story`` what every rendering tells; ``terminal``, ``markdown`` and ``html``
render it; ``files`` writes them side by side.
"""

from peftlife.reports.divergence.case import (
    SCHEMA_VERSION,
    DiffCase,
    from_json,
    load_json,
    name,
    replay,
    to_json,
)
from peftlife.reports.divergence.files import write
from peftlife.reports.divergence.html import render_html
from peftlife.reports.divergence.markdown import render_markdown
from peftlife.reports.divergence.story import story
from peftlife.reports.divergence.terminal import render_terminal, terminal_text

__all__ = [
    "SCHEMA_VERSION",
    "DiffCase",
    "from_json",
    "load_json",
    "name",
    "render_html",
    "render_markdown",
    "render_terminal",
    "replay",
    "story",
    "terminal_text",
    "to_json",
    "write",
]
