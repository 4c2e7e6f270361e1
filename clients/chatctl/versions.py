"""`chatctl versions ACTION`: model versions and their rollout (admin calls to a scheduler).

list shows every version, the current one, the candidate's split per tier and the holdout;
create adds a version (model, system prompt, sampling); split gives the candidate a share of
one tier's users; promote makes it current (only with a passing eval gate, or --force, which
the history records); rollback takes the candidate back to 0 % everywhere; holdout moves the
1 % holdout to a version; history shows the changes, newest last; show prints each version's
online scores per tier over the scheduler's trailing window (answers, error, refusal,
slow-start and failover shares, cited passage ids and the share of them that failed, thumbs up
and down, TTFT and tokens/s percentiles)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clients.chatctl.addresses import admin_client, admin_token, operator_tls, service_address
from clients.chatctl.output import CtlError, emit, percent, shorten, table, table_or, when
from clients.rollout_client import RolloutClient
from domain.guardrails import Tally
from domain.rollout import RolloutState, Version, live_share
from domain.scores import Percentile, scores_of
from domain.types import Tier

HISTORY_SHOWN = 15


def rollout_client(args: argparse.Namespace) -> RolloutClient:
    return RolloutClient(
        service_address(args, "scheduler"), admin_token(args), tls=operator_tls(args)
    )


def add_versions_parser(commands: Any, admin_flags: argparse.ArgumentParser) -> None:
    command = commands.add_parser("versions", help="model versions and their rollout")
    actions = command.add_subparsers(dest="action", required=True, metavar="ACTION")
    flags = [admin_flags]
    actions.add_parser("list", parents=flags, help="versions, the split and the holdout")
    create = actions.add_parser("create", parents=flags, help="a new version")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--model", default="", help="the engine model ('' = the pool's)")
    prompt = create.add_mutually_exclusive_group()
    prompt.add_argument("--system-prompt", default="", help="its system prompt")
    prompt.add_argument("--system-prompt-file", type=Path, help="its system prompt, from a file")
    create.add_argument("--temperature", type=float, default=0.7)
    create.add_argument(
        "--force", action="store_true", help="with a --model no node serves (nodes to come)"
    )
    split = actions.add_parser("split", parents=flags, help="give a candidate a tier's share")
    split.add_argument("name", metavar="NAME")
    split.add_argument("--tier", choices=("free", "plus"), required=True)
    split.add_argument("--percent", type=float, required=True)
    promote = actions.add_parser("promote", parents=flags, help="make a candidate current")
    promote.add_argument("name", metavar="NAME")
    promote.add_argument("--force", action="store_true", help="without a passing gate (logged)")
    rollback = actions.add_parser("rollback", parents=flags, help="the candidate back to 0 %%")
    rollback.add_argument("--reason", default="rolled back by an operator")
    holdout = actions.add_parser("holdout", parents=flags, help="move the 1 %% holdout")
    holdout.add_argument("name", metavar="NAME")
    actions.add_parser("history", parents=flags, help="the rollout's changes, newest last")
    show = actions.add_parser("show", parents=flags, help="online scores per version and tier")
    show.add_argument("name", metavar="NAME", nargs="?", default="", help="one version's only")
    command.set_defaults(handler=versions)


async def _act(client: RolloutClient, args: argparse.Namespace) -> RolloutState:
    match args.action:
        case "create":
            prompt = args.system_prompt
            if args.system_prompt_file is not None:
                prompt = args.system_prompt_file.read_text()
            return await client.create(
                Version(args.name, args.model, prompt.strip(), args.temperature)
            )
        case "split":
            return await client.split(args.name, args.tier, args.percent)
        case "promote":
            return await client.promote(args.name, args.force)
        case "rollback":
            return await client.rollback(args.reason)
        case "holdout":
            return await client.move_holdout(args.name)
    return await client.rollout()


def describe(state: RolloutState) -> str:
    rows = []
    for v in state.versions:
        named = {"current": state.current, "candidate": state.candidate,
                 "holdout": state.holdout_version}  # fmt: skip
        roles = [role for role, name in named.items() if name == v.name]
        prompt = shorten(v.system_prompt.replace("\n", " "), 40) or "(configured)"
        rows.append([v.name, ",".join(roles) or "-", v.model or "(pool's)", f"{v.temperature:g}",
                     prompt])  # fmt: skip
    lines = [table(("VERSION", "ROLE", "MODEL", "TEMP", "SYSTEM PROMPT"), rows)]
    shares = live_share(state)
    split = ", ".join(f"{tier} {p:g} %" for tier, p in sorted(shares.items())) or "none"
    lines.append(f"\ncandidate   {state.candidate or 'none'}  (split: {split})")
    lines.append(f"holdout     {state.holdout_percent:g} % of users on {state.holdout_version}")
    for gate in state.gates:
        verdict = "passed" if gate.passed else "FAILED"
        lines.append(f"gate        {gate.candidate} vs {gate.baseline}: {verdict} over "
                     f"{gate.sizes}, {when(_at(gate.at))}")  # fmt: skip
    return "\n".join(lines)


def history(state: RolloutState) -> str:
    rows = [[when(_at(c.at)), c.action, c.version, c.detail]
            for c in state.history[-HISTORY_SHOWN:]]  # fmt: skip
    return table_or(("AT", "ACTION", "VERSION", "DETAIL"), rows, "no changes yet")


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


SCORE_HEADERS = ("VERSION", "TIER", "ANSWERS", "ERRORS", "REFUSALS", "SLOW", "FAILOVERS",
                 "CITED", "BAD CITES", "UP", "DOWN", "TTFT P50", "TTFT P95", "TTFT P99",
                 "TOK/S P50", "TOK/S P5")  # fmt: skip


def _figure(value: Percentile | None, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"


def score_rows(tallies: dict[tuple[str, Tier], Tally]) -> list[list[str]]:
    rows = []
    for (version, tier), tally in sorted(tallies.items()):
        s = scores_of(tally)
        rows.append([version, tier.value, str(s.answers), percent(s.error_share),
                     percent(s.refusal_share), percent(s.slow_share), percent(s.failover_share),
                     str(s.citations), percent(s.bad_citation_share) if s.citations else "-",
                     str(s.thumbs_up), str(s.thumbs_down), _figure(s.ttft_p50_s, "s"),
                     _figure(s.ttft_p95_s, "s"), _figure(s.ttft_p99_s, "s"),
                     _figure(s.rate_p50), _figure(s.rate_p5)])  # fmt: skip
    return rows


async def show(client: RolloutClient, args: argparse.Namespace) -> int:
    if args.name and not (await client.rollout()).has(args.name):
        raise CtlError(f"no version {args.name!r}")
    window_s, tallies = await client.scores(args.name)
    found = [{"version": v, "tier": t.value, **asdict(scores_of(tally))}
             for (v, t), tally in sorted(tallies.items())]  # fmt: skip
    heading = f"online scores over the last {window_s:g} s (the gateways polling this scheduler)"
    rows = table_or(SCORE_HEADERS, score_rows(tallies), "no answers or ratings in it")
    text = f"{heading}\n{rows}"
    emit(args.json, {"window_s": window_s, "scores": found}, text)
    return 0


async def check_model(args: argparse.Namespace) -> None:
    """A version's model must be one a node serves: a misspelt name would be split to users
    and every answer of it fail ("busy") until the canary rolled it back. --force creates it
    anyway, for nodes still to come."""
    if not args.model or args.force:
        return
    async with admin_client(args) as admin:
        served = sorted({node.model for node in await admin.nodes()})
    if args.model not in served:
        raise CtlError(
            f"no node serves the model {args.model!r} (the fleet serves: "
            f"{', '.join(served) or 'none'}); --force creates the version for nodes still to come"
        )


async def versions(args: argparse.Namespace) -> int:
    if args.action == "show":
        async with rollout_client(args) as client:
            return await show(client, args)
    if args.action == "create":
        if args.system_prompt_file is not None and not args.system_prompt_file.is_file():
            raise CtlError(f"no file {args.system_prompt_file}")
        await check_model(args)
    async with rollout_client(args) as client:
        state = await _act(client, args)
    text = history(state) if args.action == "history" else describe(state)
    emit(args.json, state, text)
    return 0
