"""The vLLM release matrix: which releases load, and how the seeded sweep fares on each.

    python -m bench.vllm_releases [--releases 0.34.0,0.22.0] [--seeds 80] [--out docs/engines.md]

For each release, newest first, it fetches the release's files once into
``$PEFTLIFE_CACHE`` (or ``~/.cache/peftlife``; with ``PEFTLIFE_OFFLINE=1`` a
release not cached is reported, not fetched), loads them (``Checkout``) and
runs the seeded sweep (``sweep.py``: ``--seeds`` workloads, without and with
prefix caching) through ``Driver``, checking every workload's steps with
``checker/vllm.py``. It prints a Markdown table: whether the release loads
(or its one-line refusal), the steps the sweep took, whether every check
held (or the first finding, with its seed), and the seconds it took (fetch
excluded). With ``--out`` the table also replaces the file's release-matrix
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
from peftlife.sut.adapters.vllm.release import COMPLETE, release_files
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
    steps: int | None = None
    checks: str = ""  # "held", or the first finding
    seconds: float | None = None

    def line(self) -> str:
        steps = "" if self.steps is None else str(self.steps)
        seconds = "" if self.seconds is None else f"{self.seconds:.1f}"
        loads = self.loads.replace("|", "\\|")
        return f"| {self.release} | {loads} | {steps} | {self.checks} | {seconds} |"


def _cache() -> Path:
    return Path(os.environ.get("PEFTLIFE_CACHE", Path.home() / ".cache" / "peftlife"))


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


def row(release: str, seeds: range) -> Row:
    """One release's line of the matrix; a release that cannot be had or loaded says why."""
    cache = _cache()
    if os.environ.get("PEFTLIFE_OFFLINE") and not (cache / f"vllm-{release}" / COMPLETE).is_file():
        return Row(release, f"not in {cache} and PEFTLIFE_OFFLINE is set")
    try:
        files = release_files(release, cache)
        start = time.perf_counter()
        checkout = Checkout(files)
    except CheckoutError as err:
        return Row(release, str(err).removeprefix(f"vLLM {release}: "))
    steps, checks = sweep(checkout, seeds)
    return Row(release, "yes", steps, checks, time.perf_counter() - start)


def table(rows: list[Row], command: str) -> str:
    head = [
        HEADING,
        "",
        f"`{command}` loads each release's files (`Checkout`) and runs the seeded sweep",
        "(`sweep.py`: its 80 seeds without and with prefix caching) through `Driver`,",
        "checking each workload's steps with `checker/vllm.py`; seconds are wall seconds of",
        "the load and the sweep (the fetch excluded), on a machine shared with other work.",
        "A release refused says why in one line.",
        "",
        "| release | loads | sweep steps | checks | seconds |",
        "|---|---|---|---|---|",
    ]
    return "\n".join(head + [r.line() for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", help="comma-separated, e.g. 0.34.0,0.22.0 (default: all)")
    parser.add_argument("--seeds", type=int, default=len(SEEDS))
    parser.add_argument("--out", type=Path, help="a Markdown file to put the table in")
    args = parser.parse_args()
    releases = args.releases.split(",") if args.releases else list(RELEASES)
    rows = []
    for release in releases:
        rows.append(row(release.strip(), range(args.seeds)))
        print(rows[-1].line(), flush=True)
    command = "python -m bench.vllm_releases" + (
        f" --releases {args.releases}" if args.releases else ""
    )
    text = table(rows, command)
    print(text)
    if args.out:
        write_section(args.out, HEADING, text)


if __name__ == "__main__":
    main()
