"""Known findings (``--baseline FILE``), so a CI gate on upstream code fails only on new ones.

A finding is known when its invariant and the hash of its shrunk trace (the
short hash in its report's name) are listed. The file is JSON: an object with
a ``findings`` list of ``{"invariant": ..., "trace": ...}``, which is exactly
what a run's ``summary.json`` holds, so accepting today's findings is copying
that file.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs


class BaselineError(ValueError):
    """A baseline file that cannot be read; the message says how to fix it."""


@attrs.frozen
class Known:
    invariant: str
    trace: str


def load(path: Path) -> frozenset[Known]:
    """The known findings of a baseline file.

    >>> load(Path("no/such/baseline.json"))
    Traceback (most recent call last):
    ...
    peftlife.doors.baseline.BaselineError: cannot read baseline 'no/such/baseline.json': ...
    """
    try:
        data = json.loads(path.read_text("utf-8"))
    except OSError as err:
        raise BaselineError(
            f"cannot read baseline {str(path)!r}: {err.strerror}; give a summary.json "
            "written by an earlier run"
        ) from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BaselineError(f"baseline {str(path)!r} is not JSON ({err})") from err
    entries = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise BaselineError(
            f"baseline {str(path)!r} has no 'findings' list; give a summary.json written "
            'by an earlier run, or {"findings": [{"invariant": ..., "trace": ...}]}'
        )
    try:
        return frozenset(Known(str(e["invariant"]), str(e["trace"])) for e in entries)
    except (KeyError, TypeError) as err:
        raise BaselineError(
            f"baseline {str(path)!r}: each finding needs 'invariant' and 'trace' ({err})"
        ) from err
