"""A finding as a case: everything a replay needs, its replay, and its JSON.

A ``Case`` (SUT, scenario, seed, the world's configuration and the actions)
is what every report is made from; ``replay`` runs it through the engine with
no search and returns an ``Outcome``; ``to_json`` and ``Case.from_json`` are
the report file's format, with a ``schema_version``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import attrs

from peftlife import sut as sut_module
from peftlife.checker.drain import drain_premise_broken
from peftlife.reports.format import plain
from peftlife.search import outside, scenarios
from peftlife.search.failure import LifecycleFailure
from peftlife.search.scenarios import LIMITS
from peftlife.search.trace import REQUEST_KINDS, Action, Entry, Outcome
from peftlife.world.config import EngineConfig
from peftlife.world.fields import InvalidField, is_whole

__all__ = [
    "SCHEMA_VERSION",
    "Case",
    "Entry",
    "Outcome",
    "ReportError",
    "load_json",
    "replay",
    "scenario_of",
    "to_json",
    "trace_hash",
]

SCHEMA_VERSION = 1


class ReportError(ValueError):
    """A report file that cannot be read; the message says how to fix it."""


# ---- the case and its replay ----


@attrs.frozen
class Case:
    """A finding, reduced to what a replay needs."""

    sut: str
    scenario: str
    config: EngineConfig
    actions: tuple[Action, ...]
    seed: int | None = None
    profile: str = ""
    # How many examples the search ran to meet the finding (None when not searched):
    # a fact about the search, not the case, so it takes no part in equality.
    examples: int | None = attrs.field(default=None, eq=False)
    # False when the run ended before the shrinker did (a fuzzing campaign's deadline):
    # the trace is as the search met it. Also a fact about the search, not the case.
    shrunk: bool = attrs.field(default=True, eq=False)
    # Why the shrink of this case stopped early (its time cap, say), else None:
    # like ``examples``, a fact about how it was found.
    shrink_note: str | None = attrs.field(default=None, eq=False)
    # The absolute path of the user's scenario file it was found in (``scenario`` is
    # then that file's stem); None for a shipped scenario, which its name loads.
    scenario_path: str | None = None

    @classmethod
    def from_failure(
        cls,
        failure: LifecycleFailure,
        *,
        seed: int | None = None,
        profile: str = "",
        examples: int | None = None,
        shrunk: bool | None = None,
    ) -> Case:
        """The case of a finding; ``shrunk`` defaults to whether the finding was."""
        run = failure.run
        note = failure.shrink.note if failure.shrink is not None else None
        if failure.died:
            note = _died_note(failure)
        shrunk = failure.shrunk if shrunk is None else shrunk
        s = run.scenario
        return cls(
            run.sut, s.name, run.config, run.actions, seed, profile, examples, shrunk, note, s.path
        )

    @classmethod
    def from_json(cls, data: Any) -> Case:
        """Read a case back from a report's JSON (a dict), validated in full.

        Types, ranges, sizes and references (a cancel's request, a submit's
        adapter, a fault's pool) are checked before anything runs, and the world
        must be one that can drain; a ``ReportError`` names the JSON path of the
        first bad field.
        """
        if not isinstance(data, dict):
            raise ReportError("a peftlife report is a JSON object; this file holds something else")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ReportError(
                f"report schema_version is {version!r}; this peftlife reads version "
                f"{SCHEMA_VERSION}: regenerate the report with this version"
            )
        _known_keys("", data, _TOP_LEVEL)
        config = _config(_required(data, "config", dict))
        actions = _actions(_required(data, "actions", list), config)
        seed, examples = data.get("seed"), data.get("examples")
        for key, value in (("seed", seed), ("examples", examples)):
            if value is not None and not is_whole(value):
                raise ReportError(f"{key} must be a whole number or null, not {value!r}")
        shrunk = data.get("shrunk", True)
        if not isinstance(shrunk, bool):
            raise ReportError(f"shrunk must be true or false, not {shrunk!r}")
        note = data.get("shrink_note")
        if note is not None and not isinstance(note, str):
            raise ReportError(f"shrink_note must be a string or null, not {note!r:.60}")
        path = data.get("scenario_path")
        if path is not None:
            _text(path, "scenario_path")
        return cls(
            sut=_text(_required(data, "sut", str), "sut"),
            scenario=_text(_required(data, "scenario", str), "scenario"),
            config=config,
            actions=actions,
            seed=seed,
            profile=_text(data.get("profile", ""), "profile", empty=True),
            examples=examples,
            shrunk=shrunk,
            shrink_note=note,
            scenario_path=path,
        )


def scenario_of(case: Case) -> scenarios.Scenario | None:
    """The scenario a case was found in, read again: a user's file from its path (a
    ``ScenarioError`` when it is gone), a shipped one by its name; None for a case
    written before cases recorded a file's path, which names the file by its stem.

    >>> scenario_of(Case("reference", "kv-pressure", EngineConfig(), ())).name
    'kv-pressure'
    """
    if (path := case.scenario_path) is not None:
        if not Path(path).is_file():
            raise scenarios.ScenarioError(
                f"its scenario file {path} does not exist: put the file back there, or set "
                "the report's scenario_path to where it is now"
            )
        return scenarios.load(path)
    try:
        return scenarios.load(case.scenario)
    except scenarios.ScenarioError:
        return None


# ---- reading a report's JSON ----

# What a case is replayed in besides its SUT and schema: a diff report carries them too.
CASE_KEYS: tuple[str, ...] = (
    "scenario",
    "scenario_path",
    "seed",
    "profile",
    "config",
    "actions",
    "examples",
    "shrink_note",
)
# Written by ``to_json``: what a replay reads, then the story it is not read back from.
_TOP_LEVEL = ("schema_version", "sut", *CASE_KEYS, "shrunk")
_TOP_LEVEL += ("during", "violation", "violations", "steps")
_ACTION_KEYS = tuple(f.name for f in attrs.fields(Action))
_CONFIG_KEYS = tuple(f.name for f in attrs.fields(EngineConfig))
# The most actions a report may hold; a search's examples stay far below it.
MAX_ACTIONS = 10_000
MAX_REPORT_BYTES = 256 * 2**20
_TYPE_NAMES: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}


def _required(data: dict[str, Any], key: str, kind: type) -> Any:
    if key not in data:
        raise ReportError(f"{key} is missing")
    if not isinstance(data[key], kind):
        raise ReportError(f"{key} must be {_TYPE_NAMES[kind]}, not {data[key]!r:.60}")
    return data[key]


def _text(value: Any, path: str, empty: bool = False) -> str:
    if not isinstance(value, str) or not (value or empty):
        raise ReportError(f"{path} must be a non-empty string, not {value!r}")
    return value


def _known_keys(path: str, data: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        raise ReportError(f"{where} is not a field peftlife knows; known: {', '.join(known)}")


def _limit(path: str, value: int, key: str) -> None:
    limit = MAX_ACTIONS if key == "actions" else LIMITS[key]
    if value > limit:
        raise ReportError(f"{path} is {value}, above peftlife's limit of {limit} for {key}")


def _config(data: dict[str, Any]) -> EngineConfig:
    _known_keys("config", data, _CONFIG_KEYS)
    fields = dict(data)
    if "adapter_pages" in fields:
        pairs = fields["adapter_pages"]
        if not isinstance(pairs, list) or not all(isinstance(p, list) for p in pairs):
            raise ReportError(
                f"config.adapter_pages must be a list of [task id, pages] pairs, not {pairs!r:.60}"
            )
        fields["adapter_pages"] = tuple(tuple(p) for p in pairs)
    try:
        config = EngineConfig(**fields)
    except InvalidField as err:
        raise ReportError(f"config.{err}") from err
    for key in ("device_pages", "host_pages", "draft_device_pages", "tokens_per_block"):
        if (value := getattr(config, key)) is not None:
            _limit(f"config.{key}", value, key)
    _limit("config.draft_host_pages", config.draft_host_pages, "host_pages")
    for key in ("lora_device_pages", "lora_host_pages", "max_num_tokens", "max_batch_size"):
        _limit(f"config.{key}", getattr(config, key), key)
    _limit("config.chunk_unit_size", config.chunk_unit_size, "chunk_unit_size")
    _limit("len(config.adapter_pages)", len(config.adapter_pages), "adapters")
    for index, (_, pages) in enumerate(config.adapter_pages):
        _limit(f"config.adapter_pages[{index}][1]", pages, "adapter_pages")
    return config


def _actions(data: list[Any], config: EngineConfig) -> tuple[Action, ...]:
    _limit("len(actions)", len(data), "actions")
    adapters = {task for task, _ in config.adapter_pages}
    actions: list[Action] = []
    requests: list[tuple[int | None, int, int]] = []
    for index, item in enumerate(data):
        path = f"actions[{index}]"
        if not isinstance(item, dict):
            raise ReportError(f"{path} must be an object, not {item!r:.60}")
        _known_keys(path, item, _ACTION_KEYS)
        if "kind" not in item:
            raise ReportError(f"{path}.kind is missing")
        try:
            action = Action(**item)
        except InvalidField as err:
            raise ReportError(f"{path}.{err}") from err
        if action.kind == "submit":
            if action.lora_task_id is not None and action.lora_task_id not in adapters:
                raise ReportError(
                    f"{path}.lora_task_id is {action.lora_task_id}, an adapter the world does "
                    f"not have; config.adapter_pages lists {sorted(adapters) or 'none'}"
                )
            _limit(f"{path}.prompt_len", action.prompt_len, "prompt_len")
            _limit(f"{path}.max_new_tokens", action.max_new_tokens, "max_new_tokens")
            requests.append((action.lora_task_id, action.prompt_len, action.max_new_tokens))
            _limit("the number of submits", len(requests), "max_requests")
        elif action.kind in REQUEST_KINDS and action.request_id is not None:
            if action.request_id > len(requests):
                raise ReportError(
                    f"{path}.request_id is {action.request_id}, but the actions before it "
                    f"submit {len(requests)} (request ids count submits from 1)"
                )
        elif action.pool == "draft" and config.draft_device_pages is None:
            raise ReportError(
                f"{path}.pool is 'draft', but the world has no draft pool "
                "(config.draft_device_pages is null): use 'target'"
            )
        actions.append(action)
    if rule := drain_premise_broken(config, requests):
        raise ReportError(f"config: the world cannot drain these requests: {rule}")
    return tuple(actions)


def _died_note(failure: LifecycleFailure) -> str:
    """Why a finding whose scheduler took its process down was not shrunk."""
    how = (
        "hung where its in-process alarm could not reach it"
        if failure.hung
        else "ended or crashed its process"
    )
    return (
        f"the scheduler {how}, as every smaller candidate would again: "
        "the example as the search met it"
    )


def trace_hash(case: Case) -> str:
    """A short hash of the shrunk trace (the world and the actions), stable across runs.

    Report names carry it, so a second finding never overwrites the first, and a
    baseline of known findings matches on it.
    """
    trace = {"config": plain(case.config), "actions": [a.to_json() for a in case.actions]}
    digest = hashlib.sha256(json.dumps(trace, sort_keys=True).encode("utf-8")).hexdigest()
    return digest[:8]


def replay(
    case: Case,
    sut: sut_module.Resolved | str | None = None,
    *,
    schedule_deadline: float | None = None,
) -> Outcome:
    """Replay a case against its SUT (or another one), as the machine ran it.

    Every iteration is checked; if all hold, the world is drained (invariant 12).
    ``sut`` as the front door resolved it is used as it is; a string is loaded.
    ``schedule_deadline`` replaces the engine's (a hung case replayed in a hurry).
    """
    subject = sut_module.loaded(sut or case.sut)
    spec, factory = subject.spec, subject.factory
    if schedule_deadline is None:
        return outside.replay(case.config, case.actions, factory, sut=spec)
    return outside.replay(
        case.config, case.actions, factory, sut=spec, schedule_deadline=schedule_deadline
    )


# ---- JSON ----


def to_json(case: Case, outcome: Outcome) -> dict[str, Any]:
    """The report as a JSON object; ``Case.from_json`` reads it back."""
    return {
        "schema_version": SCHEMA_VERSION,
        "sut": case.sut,
        "scenario": case.scenario,
        # Only a user's file says where it is: a shipped scenario's report reads as it has.
        **({"scenario_path": case.scenario_path} if case.scenario_path else {}),
        "seed": case.seed,
        "profile": case.profile,
        "examples": case.examples,
        # Only an unshrunk case says so: a shrunk report reads as it always has.
        **({} if case.shrunk else {"shrunk": False}),
        **({"shrink_note": case.shrink_note} if case.shrink_note else {}),
        "config": plain(case.config),
        "actions": [a.to_json() for a in case.actions],
        "during": outcome.during,
        "violation": plain(outcome.violations[0]) if outcome.violations else None,
        "violations": plain(outcome.violations),
        "steps": [
            {
                "action_index": e.action_index,
                "drain": e.action_index is None,
                "snapshot": plain(e.snapshot),
            }
            for e in outcome.entries
        ],
    }


def load_json(path: Path) -> Case:
    """Read and validate a report file; a ``ReportError`` names the file and the bad field."""
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            raise ReportError(
                f"report {str(path)!r} is larger than {MAX_REPORT_BYTES // 2**20} MiB; "
                "give a report peftlife wrote"
            )
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ReportError(
            f"cannot read report {str(path)!r}: {err.strerror}; give a report's .json file"
        ) from err
    except UnicodeDecodeError as err:
        raise ReportError(f"{str(path)!r} is not UTF-8 text; give a peftlife report") from err
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise ReportError(f"{str(path)!r} is not JSON ({err}); give a peftlife report") from err
    if other := _not_a_finding(data):
        raise ReportError(f"{str(path)!r} is {other}")
    try:
        return Case.from_json(data)
    except ReportError as err:
        raise ReportError(
            f"report {str(path)!r}: {err}; fix the field or regenerate the report"
        ) from err


def _not_a_finding(data: Any) -> str | None:
    """What else peftlife wrote this JSON as, in words that say what to do instead."""
    if not isinstance(data, dict) or "schema_version" in data:
        return None
    if "diff_schema_version" in data:
        return (
            f"a diff report ({data.get('sut_a')} against {data.get('sut_b')}), not a finding: "
            "its .html and .md show it side by side, and 'peftlife diff' compares again"
        )
    if isinstance(data.get("findings"), list) and "command" in data:
        listed = [f.get("report") for f in data["findings"] if isinstance(f, dict)]
        reports = ", ".join(str(r) for r in listed if r)
        hint = f"replay a finding it lists: {reports}" if reports else "it lists no finding"
        return f"a run summary (peftlife {data['command']}), not a finding; {hint}"
    if isinstance(data.get("rows"), list):
        return "the mutant gate's table (peftlife mutants --json), not a finding"
    return None
