"""A divergence of two schedulers, side by side: terminal, Markdown, JSON and HTML."""

from peftlife.reports.divergence.story import (
    SCHEMA_VERSION,
    DiffCase,
    from_json,
    load_json,
    name,
    render_html,
    render_markdown,
    render_terminal,
    replay,
    story,
    terminal_text,
    to_json,
    write,
)

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
