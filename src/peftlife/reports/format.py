"""What every report says the same way: the world in words, the terminal, HTML text, JSON.

Both stacks of ``peftlife.reports``, a finding's (``reports.finding``) and a
divergence's (``reports.divergence``), describe the world with ``world_lines``
(``say_world`` in the terminal, whose text ``captured`` keeps), escape HTML
with ``escape`` and write their JSON with ``plain``, the one serializer of
every report file.
"""

from __future__ import annotations

import enum
import html
import io
from collections.abc import Callable
from typing import Any

import attrs
from rich.console import Console
from rich.text import Text

from peftlife.checker.invariants import Violation
from peftlife.checker.registry import BY_NAME, not_checked
from peftlife.world.config import EngineConfig
from peftlife.world.fields import is_quiet
from peftlife.world.ledger import Call, given
from peftlife.world.words import count

# ---- the world in words ----

# The invariant a world whose scheduler is told no in-flight ids checks only by opting in.
IN_FLIGHT = BY_NAME["in_flight_pin"].label


def world_lines(config: EngineConfig) -> list[str]:
    """The configuration in three short lines a scheduler engineer reads at a glance."""
    tier = f"{count(config.host_pages, 'host page')}" if config.host_pages else "no lower tier"
    draft = (
        "no draft pool"
        if config.draft_device_pages is None
        else f"draft pool {count(config.draft_device_pages, 'page')}"
    )
    adapters = ", ".join(f"adapter {t} = {count(p, 'page')}" for t, p in config.adapter_pages)
    chunking = f"chunks of {config.chunk_unit_size}" if config.enable_chunked_context else "off"
    lines = [
        f"KV: {count(config.device_pages, 'page')} x {config.tokens_per_block} tokens, "
        f"{tier}, {draft}",
        f"LoRA: device cache {count(config.lora_device_pages, 'page')}, host cache "
        f"{count(config.lora_host_pages, 'page')}; {adapters or 'no adapters'}",
        f"scheduler: budget {count(config.max_num_tokens, 'token')} / "
        f"{count(config.max_batch_size, 'request')}, chunking {chunking}, recompute pause "
        f"{'on' if config.enable_recompute_pause else 'off'}",
    ]
    if config.overlap:  # a simple-loop world keeps its three lines
        lines.append(executor_line(config))
    return lines


def executor_line(config: EngineConfig) -> str:
    """The overlap executor in one line, with what the scheduler is told of batch N.

    In ``inflight_ids = "empty"`` mode it is also the report's one mention of what
    the world does not check (``registry.not_checked``).
    """
    if config.in_flight_told:
        told = "the scheduler is told batch N"
    elif config.in_flight_checked:
        told = (
            f"the scheduler is told nothing in flight; {IN_FLIGHT} checked "
            "(opt-in: a fault only when device work not ordered after batch N reuses "
            "what was released)"
        )
    else:
        unchecked = ", ".join(i.label for i in not_checked(config))
        told = f"the scheduler is told nothing in flight: {unchecked} not checked"
    return f"executor: overlap (batch N+1 scheduled while batch N runs); {told}"


# The profile a case found by ``peftlife explore`` names: no seed, no randomness at all.
EXPLORED = "explore"
# The profile a case met replaying the example database names: no seed generated it.
REPLAYED = "replayed"
_NO_SEED = {
    EXPLORED: "none (exhaustive)",
    REPLAYED: "none (met replaying the example database)",
}


def seed_said(seed: int | None, profile: str) -> str:
    """The seed of a case in a word: the number, or why there is none.

    Only a derandomized search is said to be; an exhaustive one had nothing to draw,
    and a case met replaying the example database came from no seed.

    >>> seed_said(7, "dev"), seed_said(None, "ci"), seed_said(None, EXPLORED)
    ('7', 'derandomized', 'none (exhaustive)')
    >>> seed_said(None, REPLAYED)
    'none (met replaying the example database)'
    """
    if seed is not None:
        return str(seed)
    return _NO_SEED.get(profile, "derandomized")


def seed_words(seed: int | None, profile: str) -> str:
    """The search's seed and profile, as the terminal says them.

    >>> seed_words(None, ""), seed_words(7, "ci"), seed_words(None, EXPLORED)
    ('derandomized', '7 (ci profile)', 'none (exhaustive explore)')
    """
    if seed is None and profile == EXPLORED:
        return "none (exhaustive explore)"
    if seed is None and profile == REPLAYED:
        return seed_said(seed, profile)
    return seed_said(seed, profile) + (f" ({profile} profile)" if profile else "")


# ---- the terminal ----

Say = Callable[..., None]


def sayer(console: Console) -> Say:
    """A line at a time: text in a style, or a ``Text`` styled already; soft-wrapped."""

    def say(text: str | Text, style: str = "") -> None:
        console.print(Text(text, style=style) if isinstance(text, str) else text, soft_wrap=True)

    return say


def say_world(say: Say, config: EngineConfig, shrink_note: str | None) -> None:
    """The world's lines under a report's headline, and why its shrink stopped early."""
    for world in world_lines(config):
        say(f"  {world}", "dim")
    if shrink_note:
        say(f"  note: {shrink_note}", "yellow")


def captured(render: Callable[[Console], None], width: int) -> str:
    """What a rendering prints, as plain text (what a log or a golden test sees)."""
    buffer = io.StringIO()
    render(Console(file=buffer, width=width, color_system=None, force_terminal=False))
    return buffer.getvalue()


# ---- HTML ----


def escape(value: object) -> str:
    """Any value as HTML text, quotes included (it may stand in an attribute)."""
    return html.escape(str(value), quote=True)


# ---- JSON ----


def plain(value: Any) -> Any:
    """A report's value as JSON data: the one serializer of every report file.

    An attrs record is an object of its fields (a field quiet at its default is
    left out while it holds it); an enum is its name, a set a sorted list, a tuple
    a list. Two records are told as reports always told them: a call's ``args``
    and ``detail`` hold only what the call set, and a violation's subject is its
    words, followed by the ``requests`` and ``adapters`` it marks.

    >>> from peftlife.checker.invariants import Subject
    >>> plain(Violation("exclusive_ownership", Subject(adapters=(2,)), "one set", "both", 7))
    {'invariant': 'exclusive_ownership', 'subject': 'adapter 2', 'expected': 'one set', \
'found': 'both', 'iteration': 7, 'requests': [], 'adapters': [2]}
    """
    if not attrs.has(type(value)):
        return _value(None, None, value)
    data = attrs.asdict(
        value, filter=lambda field, v: not is_quiet(field, v), value_serializer=_value
    )
    if isinstance(value, Call):
        del data["facts"]
        data |= {"args": plain(given(value.args)), "detail": plain(given(value.facts))}
    if isinstance(value, Violation):
        subject = value.subject
        data |= {
            "subject": str(subject),
            "requests": list(subject.requests),
            "adapters": list(subject.adapters),
        }
    return data


def _value(record: Any, field: attrs.Attribute[Any] | None, value: Any) -> Any:
    """``attrs.asdict``'s hook: a field's value before asdict looks into it. Records
    in a collection go through ``plain`` too, so a call is a call wherever it stands."""
    if attrs.has(type(value)):
        return plain(value)
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, frozenset | set):
        return sorted(plain(v) for v in value)
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value
