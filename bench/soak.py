"""Soak: every catalogue mutant through ``peftlife check`` and ``peftlife fuzz``, under a watchdog.

    python -m bench.soak [--quick] [--seeds 20] [--seed BASE] [--out docs/benchmarks.md]

Each mutant of the catalogue is checked under each profile (dev, ci, nightly)
with many seeds, as ``peftlife check --sut mutant:NAME --scenario all
--profile P --seed S`` checks it: the hunt over every shipped scenario, then
the shrink (``hunt`` then ``minimized``, with the command's own settings). Each
run is a process of its own, forked into a fresh empty directory, so the dev
and nightly profiles meet the empty ``.hypothesis/`` example database a user
meets there. Two runs go at a time, and a watchdog ends a run that outlives
its bound: the run counts as a hang and the soak goes on. Then each mutant
gets a short two-worker ``peftlife fuzz`` campaign, in a process group of its
own under a watchdog of its own.

The table gives, per mutant: the runs, the runs that hung and the runs that
raised, the findings, the slowest shrink (seconds and replays, with the
profile and seed of its run), the shrinks that stopped at a bound, and the
campaign's wall time and whether it ended on its own. It is printed and
written as its own section of ``--out``, replacing the section an earlier
soak wrote there. The exit code is 1 when a run hung or raised or a campaign
had to be ended, else 0.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Literal

import hypothesis
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.database import DirectoryBasedExampleDatabase

from bench import write_section
from peftlife.doors.cli.common import settings as check_settings
from peftlife.search.failure import minimized
from peftlife.search.hunt import hunt
from peftlife.sut.mutants import CATALOGUE
from peftlife.world import words

PROFILES = ("dev", "ci", "nightly")
SEEDS, QUICK_SEEDS = 20, 4
# Runs at a time: the machine this was written for has two cores.
PARALLEL = 2
# Wall seconds one check run may take before it counts as a hang: far above the
# slowest run seen (a hunt of a second or two, a shrink capped at 30 s).
WATCHDOG_S = 120.0
# Each mutant's campaign: examples in all, over two workers, and its watchdog.
FUZZ_WORKERS = 2
FUZZ_EXAMPLES, QUICK_FUZZ_EXAMPLES = 200, 100
FUZZ_WATCHDOG_S = 120.0

# The section's heading; an earlier section under it is replaced.
HEADING = "## Soak"
HEADER = (
    "mutant",
    "runs",
    "hangs",
    "errors",
    "findings",
    "slowest shrink",
    "at a bound",
    "fuzz wall",
    "fuzz ended",
)

# Numbers to the right in the Markdown table.
ALIGN = {
    column: "---:"
    if column in ("runs", "hangs", "errors", "findings", "at a bound", "fuzz wall")
    else "---"
    for column in HEADER
}

Outcome = Literal["found", "held", "hang", "error"]


@dataclass(frozen=True)
class Run:
    """One check run: a mutant, a profile and a seed."""

    mutant: str
    profile: str
    seed: int

    @property
    def command(self) -> str:
        return (
            f"peftlife check --sut mutant:{self.mutant} --scenario all "
            f"--profile {self.profile} --seed {self.seed}"
        )


@dataclass(frozen=True)
class Checked:
    """How one check run ended, and what its shrink cost."""

    run: Run
    outcome: Outcome
    # Wall seconds of the whole run, hunt and shrink, as the watchdog saw them.
    seconds: float
    scenario: str = ""
    invariant: str = ""
    examples: int = 0
    shrink_seconds: float = 0.0
    replays: int = 0
    actions: int = 0
    # The bound the shrink stopped at (``Shrunk.stopped``), None when it ran its course.
    stopped: str | None = None
    # Where the run's example database was ("none" for none).
    database: str = ""
    # What the run raised, for an error.
    detail: str = ""


@dataclass(frozen=True)
class Campaign:
    """How one ``peftlife fuzz`` campaign ended."""

    mutant: str
    seconds: float
    # False when the watchdog had to end it.
    ended: bool
    exit_code: int | None
    examples: int | None
    findings: int


@dataclass(frozen=True)
class Soak:
    checks: tuple[Checked, ...]
    campaigns: tuple[Campaign, ...] = ()
    seconds: float = 0.0
    mutants: tuple[str, ...] = field(default_factory=tuple)

    @property
    def hangs(self) -> int:
        return sum(c.outcome == "hang" for c in self.checks)

    @property
    def errors(self) -> int:
        return sum(c.outcome == "error" for c in self.checks)

    @property
    def ok(self) -> bool:
        return not self.hangs and not self.errors and all(c.ended for c in self.campaigns)


# ---- one check run, in its own process ----


def fresh_settings(profile: str, home: Path) -> hypothesis.settings:
    """The settings of ``peftlife check --profile PROFILE`` run in the empty directory ``home``.

    The dev and nightly profiles leave the example database to Hypothesis,
    whose default is ``.hypothesis/examples`` in the current directory. A
    process that resolved it before it was forked (Hypothesis caches it on the
    profile) gets the directory a fresh process in ``home`` would have.
    """
    os.chdir(home)
    set_hypothesis_home_dir(home / ".hypothesis")
    settings = check_settings(profile)  # as check builds them
    db = settings.database
    if isinstance(db, DirectoryBasedExampleDatabase) and not Path(db.path).is_relative_to(home):
        fresh = DirectoryBasedExampleDatabase(home / ".hypothesis" / "examples")
        settings = hypothesis.settings(settings, database=fresh)
    return settings


def check_once(run: Run, home: Path) -> Checked:
    """``peftlife check --scenario all`` for one run, in ``home``: the hunt, then the shrink.

    It changes the process's directory: ``run_checks`` calls it in a forked process.
    """
    start = time.perf_counter()
    settings = fresh_settings(run.profile, home)
    db = settings.database
    where = "none" if db is None else str(getattr(db, "path", db))
    found = hunt(f"mutant:{run.mutant}", settings, seed=run.seed)
    if found.failure is None:
        return Checked(
            run, "held", time.perf_counter() - start, examples=found.examples, database=where
        )
    failure = minimized(found.failure)
    shrunk = failure.shrink
    return Checked(
        run,
        "found",
        time.perf_counter() - start,
        scenario=found.scenario,
        invariant=failure.invariant,
        examples=found.examples_to_find,
        shrink_seconds=0.0 if shrunk is None else shrunk.seconds,
        replays=0 if shrunk is None else shrunk.replays,
        actions=len(failure.run.actions),
        stopped=None if shrunk is None else shrunk.stopped,
        database=where,
    )


CheckFn = Callable[[Run, Path], Checked]


def _child(check: CheckFn, run: Run, home: Path, out: Connection) -> None:
    start = time.perf_counter()
    try:
        result = check(run, home)
    except BaseException:  # a harness bug: counted and told, and the soak goes on
        result = Checked(
            run, "error", time.perf_counter() - start, detail=traceback.format_exc(limit=-3)
        )
    out.send(result)
    out.close()


@dataclass
class _Running:
    process: BaseProcess
    reader: Connection
    run: Run
    home: Path
    started: float


def run_checks(
    runs: Iterable[Run],
    *,
    parallel: int = PARALLEL,
    watchdog: float = WATCHDOG_S,
    check: CheckFn = check_once,
    progress: Callable[[list[Checked]], None] | None = None,
) -> list[Checked]:
    """Every run in a forked process of its own, ``parallel`` at a time, each in a fresh
    directory and under ``watchdog`` wall seconds; a run past its bound is killed and
    counted as a hang. ``progress`` is told the results so far after each run."""
    context = multiprocessing.get_context("fork")
    waiting = list(runs)
    running: list[_Running] = []
    results: list[Checked] = []
    while waiting or running:
        while waiting and len(running) < parallel:
            run = waiting.pop(0)
            home = Path(tempfile.mkdtemp(prefix="peftlife-soak-"))
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(check, run, home, writer), daemon=True)
            process.start()
            writer.close()
            running.append(_Running(process, reader, run, home, time.monotonic()))
        first_bound = min(r.started for r in running) + watchdog
        wait(
            [r.reader for r in running] + [r.process.sentinel for r in running],
            timeout=max(0.0, first_bound - time.monotonic()),
        )
        for r in list(running):
            result = _finished(r, watchdog)
            if result is None:
                continue
            r.process.join()
            r.reader.close()
            shutil.rmtree(r.home, ignore_errors=True)
            running.remove(r)
            results.append(result)
            if progress is not None:
                progress(results)
    return results


def _finished(r: _Running, watchdog: float) -> Checked | None:
    """The run's result if it is over (sent, died, or past its bound), else None."""
    elapsed = time.monotonic() - r.started
    if r.reader.poll():
        try:
            result: Checked = r.reader.recv()
            return result
        except EOFError:
            pass  # it died before sending: told below
    if not r.process.is_alive():
        r.process.join()
        return Checked(
            r.run, "error", elapsed, detail=f"the run's process died (exit {r.process.exitcode})"
        )
    if elapsed >= watchdog:
        r.process.kill()
        return Checked(r.run, "hang", elapsed, detail=f"ended by the watchdog at {watchdog:g} s")
    return None


# ---- one fuzz campaign, in its own process group ----


def fuzz_once(
    mutant: str, examples: int, seed: int, *, watchdog: float = FUZZ_WATCHDOG_S
) -> Campaign:
    """A short ``peftlife fuzz`` campaign against the mutant, in a fresh directory."""
    with tempfile.TemporaryDirectory(prefix="peftlife-soak-fuzz-") as tmp:
        command = [
            *(sys.executable, "-m", "peftlife.doors.cli", "fuzz", "--sut", f"mutant:{mutant}"),
            *("--workers", str(FUZZ_WORKERS), "--max-examples", str(examples)),
            *("--scenario", "all", "--report-dir", str(Path(tmp) / "reports")),
            *("--profile", "ci", "--seed", str(seed)),
        ]
        start = time.perf_counter()
        process = subprocess.Popen(
            command,
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its workers with it, should the watchdog end it
            env={**os.environ, "COLUMNS": "1000"},  # one line per line, for the parsing below
        )
        try:
            out, _ = process.communicate(timeout=watchdog)
            ended = True
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, _ = process.communicate()
            ended = False
        seconds = time.perf_counter() - start
    total = re.search(r"(\d+) examples in [\d.]+ s", out)
    return Campaign(
        mutant,
        seconds,
        ended,
        process.returncode if ended else None,
        int(total.group(1)) if total else None,
        sum(line.startswith("finding: ") for line in out.splitlines()),
    )


# ---- the soak ----


def seeds_from(base: int, count: int) -> list[int]:
    """``count`` seeds drawn from ``base``: the same base gives the same seeds.

    >>> seeds_from(7, 3) == seeds_from(7, 3) and len(set(seeds_from(7, 3))) == 3
    True
    """
    rng = random.Random(base)
    return rng.sample(range(1_000_000), count)


def soak(
    mutants: Sequence[str],
    seeds: Sequence[int],
    profiles: Sequence[str] = PROFILES,
    *,
    fuzz_examples: int | None = FUZZ_EXAMPLES,
    fuzz_seed: int = 0,
    parallel: int = PARALLEL,
    watchdog: float = WATCHDOG_S,
    fuzz_watchdog: float = FUZZ_WATCHDOG_S,
    progress: Callable[[list[Checked]], None] | None = None,
) -> Soak:
    """Check every mutant under every profile and seed, then fuzz each (unless
    ``fuzz_examples`` is None)."""
    start = time.perf_counter()
    runs = [Run(m, p, s) for s in seeds for p in profiles for m in mutants]
    checks = run_checks(runs, parallel=parallel, watchdog=watchdog, progress=progress)
    campaigns = (
        []
        if fuzz_examples is None
        else [fuzz_once(m, fuzz_examples, fuzz_seed, watchdog=fuzz_watchdog) for m in mutants]
    )
    return Soak(tuple(checks), tuple(campaigns), time.perf_counter() - start, tuple(mutants))


def rows(result: Soak) -> list[tuple[str, ...]]:
    """One row per mutant, in ``HEADER``'s columns."""
    table: list[tuple[str, ...]] = []
    campaigns = {c.mutant: c for c in result.campaigns}
    for mutant in result.mutants:
        checks = [c for c in result.checks if c.run.mutant == mutant]
        found = [c for c in checks if c.outcome == "found"]
        slowest = max(found, key=lambda c: c.shrink_seconds, default=None)
        bounded = [c.stopped for c in found if c.stopped is not None]
        campaign = campaigns.get(mutant)
        table.append(
            (
                mutant,
                str(len(checks)),
                str(sum(c.outcome == "hang" for c in checks)),
                str(sum(c.outcome == "error" for c in checks)),
                str(len(found)),
                "-"
                if slowest is None
                else f"{slowest.shrink_seconds:.2f} s, {words.count(slowest.replays, 'replay')} "
                f"({slowest.run.profile}, seed {slowest.run.seed})",
                str(len(bounded)) + (f" ({', '.join(sorted(set(bounded)))})" if bounded else ""),
                "-" if campaign is None else f"{campaign.seconds:.1f} s",
                "-" if campaign is None else _ended(campaign),
            )
        )
    return table


def _ended(campaign: Campaign) -> str:
    if not campaign.ended:
        return "NO: ended by the watchdog"
    return f"yes, exit {campaign.exit_code}"


def summary(result: Soak) -> str:
    """The line that says whether anything hung.

    >>> summary(Soak((), (), 1.0))
    '0 runs, 0 hangs, 0 errors; 0 findings, 0 shrinks stopped at a bound'
    """
    checks = result.checks
    bounded = sum(c.stopped is not None for c in checks)
    line = (
        f"{words.count(len(checks), 'run')}, {words.count(result.hangs, 'hang')}, "
        f"{words.count(result.errors, 'error')}; "
        f"{words.count(sum(c.outcome == 'found' for c in checks), 'finding')}, "
        f"{words.count(bounded, 'shrink')} stopped at a bound"
    )
    if result.campaigns:
        ended = sum(c.ended for c in result.campaigns)
        line += f"; {ended} of {len(result.campaigns)} fuzz campaigns ended"
    return line


def problems(result: Soak) -> list[str]:
    """A line for every run that hung or raised and every campaign that was ended."""
    lines = [
        f"{c.outcome}: {c.run.command} after {c.seconds:.0f} s: {c.detail.strip()}"
        for c in result.checks
        if c.outcome in ("hang", "error")
    ]
    lines += [
        f"fuzz ended by the watchdog: mutant:{c.mutant} after {c.seconds:.0f} s"
        for c in result.campaigns
        if not c.ended
    ]
    return lines


def section(result: Soak, note: str) -> str:
    lines = [f"{HEADING} (bench/soak.py)", "", note, ""]
    lines.append("| " + " | ".join(HEADER) + " |")
    lines.append("|" + "".join(f"{ALIGN[column]}|" for column in HEADER))
    lines += ["| " + " | ".join(row) + " |" for row in rows(result)]
    lines += ["", summary(result)]
    if trouble := problems(result):
        lines += ["", *(f"- {line}" for line in trouble)]
    if held := [c for c in result.checks if c.outcome == "held"]:
        lines += ["", "Runs that held (the mutant not found within the profile's budget):", ""]
        lines += [f"- `{c.run.command}` ({words.count(c.examples, 'example')})" for c in held]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_SEEDS} seeds, shorter campaigns"
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help=f"seeds per mutant (default {SEEDS})"
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="base seed the seeds are drawn from (default: clock)"
    )
    parser.add_argument(
        "--watchdog", type=float, default=WATCHDOG_S, help="wall seconds a check run may take"
    )
    parser.add_argument("--no-fuzz", action="store_true", help="skip the fuzz campaigns")
    parser.add_argument("--out", default=None, help="write the section into this Markdown file")
    args = parser.parse_args(argv)
    count = args.seeds or (QUICK_SEEDS if args.quick else SEEDS)
    base = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    seeds = seeds_from(base, count)
    fuzz_examples = None if args.no_fuzz else (QUICK_FUZZ_EXAMPLES if args.quick else FUZZ_EXAMPLES)
    mutants = [m.name for m in CATALOGUE]
    total = len(mutants) * len(PROFILES) * count
    print(
        f"soak: {len(mutants)} mutants x {count} seeds (base seed {base}) x profiles "
        f"{', '.join(PROFILES)}: {total} check runs, {PARALLEL} at a time",
        file=sys.stderr,
        flush=True,
    )
    started = time.monotonic()
    shown = [started]

    def progress(done: list[Checked]) -> None:
        now = time.monotonic()
        if now - shown[0] >= 15 or len(done) == total:
            shown[0] = now
            hangs = words.count(sum(c.outcome == "hang" for c in done), "hang")
            print(
                f"soak: {len(done)}/{total} runs, {hangs}, {now - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    result = soak(
        mutants,
        seeds,
        fuzz_examples=fuzz_examples,
        fuzz_seed=base,
        watchdog=args.watchdog,
        progress=progress,
    )
    fuzz = (
        "no fuzz campaigns (--no-fuzz)"
        if fuzz_examples is None
        else f"then per mutant `peftlife fuzz --sut mutant:NAME --workers {FUZZ_WORKERS} "
        f"--max-examples {fuzz_examples} --scenario all --profile ci --seed {base}` "
        f"(watchdog {FUZZ_WATCHDOG_S:g} s)"
    )
    note = (
        f"Measured on {time.strftime('%Y-%m-%d')} in {result.seconds:.0f} s wall"
        f"{' (--quick)' if args.quick else ''} on {os.cpu_count()} cores, Python "
        f"{sys.version.split()[0]}, Hypothesis {hypothesis.__version__}. "
        f"{len(mutants)} mutants x {count} seeds (drawn from base seed {base}) x profiles "
        f"{', '.join(PROFILES)}: `peftlife check --sut mutant:NAME --scenario all --profile P "
        f"--seed S` as run by `check` (the hunt, then the shrink with its "
        f"default time cap), each run a forked process in a fresh empty directory, "
        f"{PARALLEL} at a time, under a watchdog of {args.watchdog:g} s that counts a run "
        f"past it as a hang; {fuzz}. Shrink seconds are wall seconds."
    )
    text = section(result, note)
    print(text)
    if args.out:
        write_section(Path(args.out), HEADING, text)
        print(f"written to {args.out}", file=sys.stderr)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
