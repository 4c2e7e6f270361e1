"""`chatctl simulate`: runs a named scenario of sizing 000 (docs/ARCHITECTURE.md, "Reference
sizing") on the fleet simulator (fleet/) and prints its figures against that sizing; with
--report, writes its tables and plots there. The regions' scenarios (fleet.region_scenarios:
five regions at ten times the users, and one of them lost) print their own figures: spill,
the prefill moved conversations paid again, and each region's outcomes."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from clients.chatctl.output import CtlError
from fleet import SCENARIOS, run_scenario, write_report
from fleet.region_scenarios import (
    REGION_SCENARIOS,
    run_regions_scenario,
    shortest_regions_duration_s,
)
from fleet.scenarios import shortest_duration_s


def add_simulate_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "simulate", help="simulate a region of replicas running a scenario of sizing 000"
    )
    parser.add_argument(
        "scenario", choices=sorted([*SCENARIOS, *REGION_SCENARIOS]), help="the scenario to run"
    )
    parser.add_argument(
        "--scale",
        type=_share,
        default=0.05,
        help="the share of the region (of each region) to build, fleet and traffic alike "
        "(default 0.05: 1/20)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="simulated seconds in all, warm-up included (default: the scenario's own)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        metavar="DIR",
        help="write summary.md, CSV tables and PNG plots here",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share of the region in (0, 1]")
    return value


def run_simulate(args: argparse.Namespace) -> int:
    if args.scenario in REGION_SCENARIOS:
        return _run_regions(args)
    shortest = shortest_duration_s(args.scenario)
    if args.duration is not None and args.duration <= shortest:
        raise CtlError(
            f"--duration must exceed {shortest:g} s: the scenario's warm-up of "
            f"{SCENARIOS[args.scenario].warmup_s:g} s, then the users' patience (the last "
            "messages need it to time out or not)"
        )
    result = run_scenario(args.scenario, scale=args.scale, seed=args.seed, duration_s=args.duration)
    figures = result.figures()
    if args.json:
        print(
            json.dumps(
                {
                    "scenario": args.scenario,
                    "scale": result.scale,
                    "seed": args.seed,
                    "figures": [
                        {
                            "name": f.name,
                            "spec": f.spec,
                            "measured": _finite(f.measured),
                            "within": f.ok,
                        }
                        for f in figures
                    ],
                }
            )
        )
    else:
        from fleet.report import summary_text

        print(summary_text(result), end="")
    if args.report is not None:
        for path in write_report(result, args.report):
            if not args.json:
                print(f"wrote {path}")
    return 0


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value


def _run_regions(args: argparse.Namespace) -> int:
    from fleet import region_report

    shortest = shortest_regions_duration_s(args.scenario)
    if args.duration is not None and args.duration <= shortest:
        raise CtlError(
            f"--duration must exceed {shortest:g} s: the scenario's warm-up (and its loss), "
            "then the users' patience (the last messages need it to time out or not)"
        )
    result = run_regions_scenario(
        args.scenario, scale=args.scale, seed=args.seed, duration_s=args.duration
    )
    if args.json:
        print(json.dumps(region_report.figures_json(result)))
    else:
        print(region_report.summary_text(result), end="")
    if args.report is not None:
        for path in region_report.write(result, args.report):
            if not args.json:
                print(f"wrote {path}")
    return 0
