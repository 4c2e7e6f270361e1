"""`chatctl eval run --candidate V` and `chatctl eval show`: the offline eval gate.

run answers the golden set (data/eval) with the current and the candidate version through
the platform, judges each pair twice with the order swapped, prints the gate's verdict (each
rule with its figure and threshold), records it at the scheduler (promote needs a passed one)
and keeps the report under <state dir>/eval/<candidate>.json; show prints a kept report."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clients.admin_client import AdminClient
from clients.chat_client import ChatClient
from clients.chatctl.addresses import admin_token, operator_tls, service_address, state_dir
from clients.chatctl.output import CtlError, emit, table
from clients.evaluation import (
    LENGTH_METHOD,
    EvalRefused,
    EvalReport,
    EvalRunner,
    EvalSettings,
    known_answers,
    read_report,
    save_report,
)
from clients.rollout_client import RolloutClient
from domain.evaluation.gate import MIN_SET_SIZE, GatePolicy, Verdict, verdict_table

SETS_DIR = Path(__file__).resolve().parents[2] / "data" / "eval"


def add_eval_parser(commands: Any, admin_flags: argparse.ArgumentParser) -> None:
    command = commands.add_parser("eval", help="the offline eval gate of a candidate version")
    actions = command.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = actions.add_parser("run", parents=[admin_flags], help="run the golden set and judge")
    run.add_argument("--candidate", required=True, metavar="VERSION")
    run.add_argument("--gateway", metavar="HOST:PORT", help="a gateway (CHAT_GATEWAY)")
    run.add_argument("--judge", choices=("reference", "model"), default="reference",
                     help="reference: deterministic, against the set's answers; model: the "
                     "large pool judges")  # fmt: skip
    run.add_argument("--sets", type=Path, default=SETS_DIR, help="the golden set's folder")
    for name, what in (
        ("per-category", "golden items per category"),
        ("harmful", "harmful prompts"),
        ("harmless", "harmless prompts"),
    ):
        run.add_argument(f"--{name}", type=count(0), default=0, metavar="N",
                         help=f"only the first N {what} (0: all)")  # fmt: skip
    run.add_argument("--concurrency", type=count(1), default=2, metavar="N")
    run.add_argument("--latency-slack", type=seconds, default=GatePolicy().latency_slack_s,
                     metavar="S", help="seconds the candidate's p99 time to first text may "
                     "exceed 1.5 x the current's")  # fmt: skip
    run.add_argument("--min-set-size", type=count(1), default=MIN_SET_SIZE, metavar="N",
                     help="the least golden pairs, harmful and harmless prompts a run is a gate "
                     f"on (default {MIN_SET_SIZE}); a run on fewer prints its rules but "
                     "neither passes nor fails, and promote does not see it. Lower it only "
                     "for a set whose thresholds you know it resolves")  # fmt: skip
    show = actions.add_parser("show", parents=[admin_flags], help="a kept report")
    show.add_argument("--candidate", metavar="VERSION", help="default: the newest report")
    command.set_defaults(handler=evaluate)


def count(least: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.isdigit() or int(text) < least:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {least} or more")
        return int(text)

    return parse


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more)")
    return value


def _sizes(v: Verdict) -> str:
    return (
        f"sets: {v.pairs} golden pairs, {v.harmful_prompts} harmful and "
        f"{v.harmless_prompts} harmless prompts (a gate needs {v.min_set_size} a set)"
    )


def _verdict_line(v: Verdict) -> str:
    if not v.is_gate:
        short = ", ".join(f"{name} {n}" for name, n in v.short_sets.items())
        return (f"verdict: NOT A GATE ({short} under {v.min_set_size}): the rules above decide "
                "nothing and no verdict was recorded for promote")  # fmt: skip
    return f"verdict: {'PASSED' if v.passed else 'FAILED'}"


def render(report: EvalReport) -> str:
    v = report.verdict
    lines = [
        f"eval of {report.candidate} against {report.baseline} (judge: {report.judge}, "
        f"{v.pairs} pairs, each judged twice with the order swapped)",
        table(("RULE", "FIGURE", "THRESHOLD", "RESULT"), verdict_table(v)),
    ]
    controlled = v.length_controlled_win_rate
    shown = "n/a" if controlled is None else f"{controlled * 100:.1f} %"
    lines.append(f"length-controlled win rate: {shown} over {v.similar_length_pairs} pairs "
                 f"({LENGTH_METHOD})")  # fmt: skip
    lines += [_sizes(v), _verdict_line(v)]
    return "\n".join(lines)


def _reports(args: argparse.Namespace) -> Path:
    return state_dir(args) / "eval"


async def _run(args: argparse.Namespace) -> EvalReport:
    scheduler, token, tls = (
        service_address(args, "scheduler"),
        admin_token(args),
        operator_tls(args),
    )
    gateway = service_address(args, "gateway")
    settings = EvalSettings(args.candidate, args.sets, args.per_category, args.harmful,
                            args.harmless, args.concurrency, args.judge,
                            known_answers(_reports(args)))  # fmt: skip
    async with (
        RolloutClient(scheduler, token, tls=tls) as rollout,
        AdminClient(scheduler, token, tls=tls) as admin,
    ):
        policy = GatePolicy(latency_slack_s=args.latency_slack, min_set_size=args.min_set_size)
        runner = EvalRunner(rollout, admin, lambda user: ChatClient(gateway, user, tls=tls),
                            policy)  # fmt: skip
        try:
            report = await runner.run(settings)
        except EvalRefused as refused:
            raise CtlError(str(refused)) from refused
    save_report(report, _reports(args))
    return report


def _show(args: argparse.Namespace) -> EvalReport:
    folder = _reports(args)
    if args.candidate:
        path = folder / f"{args.candidate}.json"
    else:
        kept = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
        if not kept:
            raise CtlError(f"no eval report in {folder}; run `chatctl eval run` first")
        path = kept[-1]
    if not path.is_file():
        raise CtlError(f"no eval report {path}")
    return read_report(path)


async def evaluate(args: argparse.Namespace) -> int:
    report = await _run(args) if args.action == "run" else _show(args)
    emit(args.json, report.to_json(), render(report))
    return 0 if report.verdict.passed or args.action == "show" else 3
