"""The vLLM release matrix: which releases load, and how the seeded sweep fares on each.

    python -m bench.vllm_releases [--releases 0.34.0,0.22.0] [--seeds 80] [--slots-only]
                                  [--out docs/engines.md]

For each release, newest first, it fetches the release's files once into
``$PEFTLIFE_CACHE`` (or ``~/.cache/peftlife``; with ``PEFTLIFE_OFFLINE=1`` a
release not cached is reported, not fetched), loads them (``Checkout``) and
runs the seeded sweep (``sweep.py``: ``--seeds`` workloads, without and with
prefix caching) through ``Driver``, checking every workload's steps with
``checker/vllm.py``. It prints a Markdown table: whether the release loads
(or its one-line refusal), the steps the sweep took, whether every check
held (or the first finding, with its seed), and the seconds it took (fetch
excluded). The ``slots`` column says whether the worker's LoRA slot managers
(``slots.py``) load and evict, pin and refuse as vLLM's LRU does, on every
release from 0.11.1, below the driver's oldest too; ``--slots-only`` checks
that alone. With ``--out`` the table also replaces the file's release-matrix
section.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import attrs

from bench import write_section
from peftlife.checker.vllm import Limits, findings
from peftlife.sut.adapters.vllm import Checkout, CheckoutError
from peftlife.sut.adapters.vllm.release import COMPLETE, cache_dir, release_files
from peftlife.sut.adapters.vllm.slots import Slots, SlotsRaised
from peftlife.sut.adapters.vllm.sweep import SEEDS, Undrained, run_workload

# Every vLLM release from 0.11.1 to the newest, newest first.
RELEASES = (
    "0.34.0",
    "0.33.0",
    "0.32.0",
    "0.31.0",
    "0.30.0",
    "0.29.0",
    "0.28.0",
    "0.27.1",
    "0.27.0",
    "0.26.0",
    "0.25.1",
    "0.25.0",
    "0.24.0",
    "0.23.0",
    "0.22.1",
    "0.22.0",
    "0.21.0",
    "0.20.2",
    "0.20.1",
    "0.20.0",
    "0.19.1",
    "0.19.0",
    "0.18.1",
    "0.18.0",
    "0.17.1",
    "0.17.0",
    "0.16.0",
    "0.15.1",
    "0.15.0",
    "0.14.1",
    "0.14.0",
    "0.13.0",
    "0.12.0",
    "0.11.2",
    "0.11.1",
)
HEADING = "### The release matrix"  # a section of docs/engines.md's spike


@attrs.frozen
class Row:
    release: str
    loads: str  # "yes", or why not in one line
    slots: str = ""  # "yes", or what the slot managers did not do
    steps: int | None = None
    checks: str = ""  # "held", or the first finding
    seconds: float | None = None

    def line(self) -> str:
        steps = "" if self.steps is None else str(self.steps)
        seconds = "" if self.seconds is None else f"{self.seconds:.1f}"
        loads = self.loads.replace("|", "\\|")
        slots = self.slots.replace("|", "\\|")
        return f"| {self.release} | {slots} | {loads} | {steps} | {self.checks} | {seconds} |"


def sweep(checkout: Checkout, seeds: range) -> tuple[int, str]:
    """The sweep's steps and its first finding ("held" if none); a sweep that raises or does
    not drain stops at that workload, which is its finding."""
    steps = 0
    for prefix_caching in (False, True):
        for seed in seeds:
            where = f"seed {seed}{', prefix caching' if prefix_caching else ''}"
            try:
                config, taken = run_workload(checkout, seed, prefix_caching)
            except Undrained as err:
                return steps, f"{where}: {err}"
            except Exception as err:  # vLLM's code raising is a finding, not a crash
                return steps, f"{where}: {type(err).__name__}: {err}"
            steps += len(taken)
            found = findings(taken, Limits(config.max_loras, config.block_size))
            if found:
                return steps, f"{where}: {found[0]}"
    return steps, "held"


def slots_work(files: Path) -> str:
    """ "yes" if the release's slot managers load and, with 2 GPU slots and 3 CPU
    places, evict the least recently used adapter, keep a pinned one, and refuse
    (in ``vllm/utils/cache.py``) when every slot is pinned; else what differed."""
    try:
        slots = Slots(files, max_loras=2, max_cpu_loras=3)
        for name, lora_id in (("a", 1), ("b", 2), ("a", 1), ("c", 3)):
            slots.apply_step([(slots.lora_request(name, lora_id), 1)])
        if slots.state().slots != (1, 3):
            return f"slots {slots.state().slots} after a, b, a, c, not (1, 3)"
        slots.pin(1)
        slots.apply_step([(slots.lora_request("d", 4), 1)])
        if slots.state().slots != (1, 4):
            return f"slots {slots.state().slots} after pinning a and d, not (1, 4)"
        slots.pin(4)
        slots.apply_step([(slots.lora_request("e", 5), 1)])
    except CheckoutError as err:
        return str(err)
    except SlotsRaised as raised:
        if raised.error.file == "vllm/utils/cache.py":
            return "yes"
        return str(raised.error)
    return "every slot pinned, yet a step took another adapter"


def row(release: str, seeds: range, slots_only: bool = False) -> Row:
    """One release's line of the matrix; a release that cannot be had or loaded says why."""
    cache = cache_dir()
    if os.environ.get("PEFTLIFE_OFFLINE") and not (cache / f"vllm-{release}" / COMPLETE).is_file():
        return Row(release, f"not in {cache} and PEFTLIFE_OFFLINE is set")
    try:
        files = release_files(release, cache)
    except CheckoutError as err:
        return Row(release, str(err).removeprefix(f"vLLM {release}: "))
    slots = slots_work(files)
    if slots_only:
        return Row(release, "", slots)
    try:
        start = time.perf_counter()
        checkout = Checkout(files)
    except CheckoutError as err:
        return Row(release, str(err).removeprefix(f"vLLM {release}: "), slots)
    steps, checks = sweep(checkout, seeds)
    return Row(release, "yes", slots, steps, checks, time.perf_counter() - start)


def table(rows: list[Row], command: str) -> str:
    head = [
        HEADING,
        "",
        f"`{command}` loads each release's files (`Checkout`) and runs the seeded sweep",
        "(`sweep.py`: its 80 seeds without and with prefix caching) through `Driver`,",
        "checking each workload's steps with `checker/vllm.py`; seconds are wall seconds of",
        "the load and the sweep (the fetch excluded), on a machine shared with other work.",
        "A release refused says why in one line. `slots`: the worker's LoRA slot managers",
        "(`slots.py`) load and evict, pin and refuse as vLLM's LRU does (`slots_work`), on",
        "every release, those the driver does not step included.",
        "",
        "| release | slots | loads | sweep steps | checks | seconds |",
        "|---|---|---|---|---|---|",
    ]
    return "\n".join(head + [r.line() for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", help="comma-separated, e.g. 0.34.0,0.22.0 (default: all)")
    parser.add_argument("--seeds", type=int, default=len(SEEDS))
    parser.add_argument("--slots-only", action="store_true", help="check the slot managers alone")
    parser.add_argument("--out", type=Path, help="a Markdown file to put the table in")
    args = parser.parse_args()
    releases = args.releases.split(",") if args.releases else list(RELEASES)
    rows = []
    for release in releases:
        rows.append(row(release.strip(), range(args.seeds), args.slots_only))
        print(rows[-1].line(), flush=True)
    command = "python -m bench.vllm_releases" + (
        f" --releases {args.releases}" if args.releases else ""
    )
    command += " --slots-only" if args.slots_only else ""
    text = table(rows, command)
    print(text)
    if args.out:
        write_section(args.out, HEADING, text)


if __name__ == "__main__":
    main()
