"""``peftlife fuzz``: start a long campaign over many workers sharing one example database.

The campaign itself is ``peftlife.doors.fuzz``; this module reads its options.
Exit codes: 0 no finding; 1 a finding or a worker's crash; 2 bad input.
Like ``check`` it leaves its CI outputs (``outputs``): summary.json, the
step summary and ``--junit-xml``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from rich.console import Console

from peftlife.doors import fuzz as campaigns
from peftlife.doors import outputs
from peftlife.doors.cli.common import (
    ALL_SCENARIOS,
    EXIT_FOUND,
    EXIT_HELD,
    SCENARIO_HELP,
    SUT_HELP,
    BadInput,
    NewCommand,
    Repeated,
    common_options,
    note_sut_world,
    outputs_writable,
    positive,
    scenario_words,
    searched,
    shrink_timeout_option,
    single,
    targets,
    validate,
)
from peftlife.doors.outputs.records import CampaignSummary
from peftlife.doors.outputs.story import note_unchecked
from peftlife.search import database


def add_parser(command: NewCommand) -> None:
    fuzz = command("fuzz", "a long campaign over many workers sharing one example database")
    fuzz.add_argument(
        "--sut", action=Repeated, default=("reference",), help=f"{SUT_HELP} (default: reference)"
    )
    fuzz.add_argument(
        "--scenario",
        action=Repeated,
        default=(ALL_SCENARIOS,),
        help=f"{SCENARIO_HELP}; repeatable: every one named takes turns (default: all)",
    )
    fuzz.add_argument(
        "--workers",
        type=positive,
        default=os.cpu_count() or 1,
        help="worker processes on this machine",
    )
    fuzz.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds to run (default 60 without --max-examples)",
    )
    fuzz.add_argument("--max-examples", type=positive, default=None, help="examples in all")
    fuzz.add_argument(
        "--max-restarts",
        type=int,
        default=campaigns.MAX_RESTARTS,
        help="times a worker whose process died is started again",
    )
    shrink_timeout_option(fuzz)
    outputs.add_options(
        fuzz,
        junit_cases="a failed test case per defect and per crashed worker, else one that passed",
    )
    common_options(
        fuzz,
        "fuzz",
        quiet={"help": "no live table, heartbeat or finding lines: warnings and the summary"},
        report_dir={"help": "where the reports and summary.json go"},
        profile={"default": "nightly", "help": "settings profile: how deep each example goes"},
        seed={"help": "the base seed, printed in the summary (default: from the clock)"},
        database={"help": "a directory, or redis://host:port/db shared by machines"},
    )
    fuzz.set_defaults(run=run)


def run(args: argparse.Namespace, console: Console) -> int:
    single(args.sut, "--sut", "fuzz", "start one campaign per scheduler")
    spec = args.sut[0]
    names = searched(args.scenario)
    validate(spec)
    if args.duration is not None and args.duration <= 0:
        raise BadInput(f"--duration must be a positive number of seconds, not {args.duration}")
    if args.max_restarts < 0:
        raise BadInput(f"--max-restarts must be 0 or more, not {args.max_restarts}")
    report_dir = Path(args.report_dir)
    outputs_writable(args)
    if args.database is not None:
        try:  # reachable now, or exit 2: a campaign must not start on a database it cannot use
            database.open_database(args.database, local=report_dir / "database")
        except database.DatabaseError as err:
            raise BadInput(str(err)) from err
    plan = campaigns.Plan(
        sut=spec,
        scenarios=tuple(names),
        workers=args.workers,
        profile=args.profile,
        seed=args.seed if args.seed is not None else int(time.time()) % 1_000_000,
        report_dir=report_dir,
        database=args.database,
        duration=args.duration if args.duration or args.max_examples else 60.0,
        max_examples=args.max_examples,
        max_restarts=args.max_restarts,
        shrink_timeout=args.shrink_timeout,
    )
    if not args.quiet:
        note_sut_world(spec, names, console)
    campaign = campaigns.Campaign(plan, console, quiet=args.quiet)
    campaign.run()
    campaign.summary()
    note_unchecked(names, console)
    summary = CampaignSummary.of(campaign, rerun=_rerun_command(args, plan))
    outputs.write(outputs.for_campaign(summary), targets(args))
    if campaign.interrupted:  # what it found is written: now the one line and exit 130
        raise KeyboardInterrupt
    return EXIT_FOUND if campaign.found else EXIT_HELD


def _rerun_command(args: argparse.Namespace, plan: campaigns.Plan) -> str:
    """The command that starts the same campaign: its slices get the same seeds.

    >>> plan = campaigns.Plan("reference", ("default",), 2, "nightly", 7, Path("r"), duration=60.0)
    >>> print(_rerun_command(argparse.Namespace(scenario=["default"], max_examples=None), plan))
    peftlife fuzz --sut reference --scenario default --workers 2 --profile nightly --duration 60 \
--seed 7
    """
    words = [f"peftlife fuzz --sut {plan.sut} --scenario {scenario_words(args.scenario)}"]
    words.append(f"--workers {plan.workers} --profile {plan.profile}")
    if args.max_examples is not None:
        words.append(f"--max-examples {args.max_examples}")
    if plan.duration is not None:
        words.append(f"--duration {plan.duration:g}")
    return " ".join([*words, f"--seed {plan.seed}"])
