"""The benchmarks of ``make bench``, kept out of the package; each module runs as
``python -m bench.NAME`` from the repository's root.

``search`` (speed and shrink goals) writes ``docs/benchmarks.md``; ``fuzz``
(campaigns scaling with workers) and ``soak`` (every mutant through check and
fuzz, under a watchdog) each put their own section in it (``write_section``),
and a later ``search`` keeps those.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def cpu() -> float:
    """CPU seconds of this process and of its waited-for children: a search runs in
    a supervised child (``peftlife.world.supervisor``), which ``process_time`` misses."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def write_section(path: Path, heading: str, text: str) -> None:
    """Put ``text`` in ``path``: in place of an earlier section whose heading starts
    with ``heading``, else at the end."""
    old = path.read_text("utf-8") if path.exists() else ""
    start = re.search(rf"^{re.escape(heading)}\b.*$", old, flags=re.MULTILINE)
    if start is None:
        new = old.rstrip("\n") + ("\n\n" if old.strip() else "") + text + "\n"
    else:
        following = re.search(r"^## ", old[start.end() :], flags=re.MULTILINE)
        end = len(old) if following is None else start.end() + following.start()
        rest = old[end:]
        new = old[: start.start()] + text + "\n" + ("\n" + rest if rest else "")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new, "utf-8")
