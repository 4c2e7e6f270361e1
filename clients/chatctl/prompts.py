"""`chatctl prompts show USER MESSAGE`: the exact prompt an answered turn's engine was sent
(its turns, the system prompt first, with the sampling, version, model and replica), as the
gateways captured it; the scheduler logs every read.

`chatctl replay USER MESSAGE [--version V]` and `chatctl replay --set FILE`: captured prompts
answered again at temperature 0 by a version (a gateway's ReplayService), beside the answers
the users were shown: a word diff for one, a table and a tally for a set."""

from __future__ import annotations

import argparse
import asyncio
import difflib
from pathlib import Path
from typing import Any

from clients.chatctl.addresses import admin_token, operator_tls, service_address
from clients.chatctl.output import CtlError, emit, table
from clients.prompts_client import CapturedPrompt, PromptsClient, Replay, ReplayClient

# Replays of a set in flight at once: enough to keep a few replicas busy, few enough not to
# crowd out the users' own answers.
SET_CONCURRENCY = 4


def add_prompts_parser(commands: Any, admin_flags: argparse.ArgumentParser) -> None:
    command = commands.add_parser("prompts", help="the captured prompts of answered turns")
    actions = command.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser("show", parents=[admin_flags], help="one turn's captured prompt")
    show.add_argument("user_id", metavar="USER")
    show.add_argument("message_id", metavar="MESSAGE_ID", help="the user's message (not ...answer)")
    command.set_defaults(handler=prompts)
    replay = commands.add_parser(
        "replay", parents=[admin_flags], help="captured prompts answered again, beside then"
    )
    replay.add_argument("--gateway", metavar="HOST:PORT", help="a gateway (CHAT_GATEWAY)")
    replay.add_argument("user_id", metavar="USER", nargs="?")
    replay.add_argument("message_id", metavar="MESSAGE_ID", nargs="?")
    replay.add_argument("--version", default="", help="the version to answer ('': the one then)")
    replay.add_argument(
        "--set", type=Path, metavar="FILE", help="replay each `USER MESSAGE_ID` line of FILE"
    )
    replay.set_defaults(handler=replay_prompts)


def describe(prompt: CapturedPrompt) -> str:
    captured = prompt.captured_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [
        f"message {prompt.message_id} in conversation {prompt.conversation_id}",
        f"version {prompt.version or '-'}, model {prompt.model}, replica {prompt.node_id}",
        f"temperature {prompt.temperature:g}, at most {prompt.max_tokens} answer tokens",
        f"captured {captured}",
    ]
    if prompt.tools:
        lines.append("tools offered: " + ", ".join(tool.name for tool in prompt.tools))
    for turn in prompt.turns:
        lines += ["", f"[{turn.role.value}] {turn.tokens} tokens"]
        lines += [f"  call {c.name}({c.arguments}) as {c.call_id}" for c in turn.tool_calls]
        if turn.tool_call_id:
            lines.append(f"  answers call {turn.tool_call_id}")
        if turn.text:
            lines.append(turn.text)
    return "\n".join(lines)


async def prompts(args: argparse.Namespace) -> int:
    address = service_address(args, "scheduler")
    async with PromptsClient(address, admin_token(args), tls=operator_tls(args)) as client:
        prompt = await client.captured(args.user_id, args.message_id)
    emit(args.json, prompt, describe(prompt))
    return 0


def word_diff(then: str, now: str) -> str:
    """The two answers as one text: [-words only then-] {+words only now+}."""
    old, new = then.split(), now.split()
    out: list[str] = []
    for op, a, b, c, d in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if op == "equal":
            out += old[a:b]
            continue
        if b > a:
            out.append("[-" + " ".join(old[a:b]) + "-]")
        if d > c:
            out.append("{+" + " ".join(new[c:d]) + "+}")
    return " ".join(out)


def describe_replay(replay: Replay) -> str:
    head = (f"{replay.message_id}: version {replay.version} ({replay.model} on {replay.node_id})"
            f", {replay.finish}, {replay.output_tokens} tokens")  # fmt: skip
    if replay.system_prompt_replaced:
        head += "; its system prompt replaced the captured one"
    if replay.identical:
        return f"{head}\nidentical to the answer then:\n{replay.replayed}"
    return (f"{head}\nthen:\n{replay.original}\n\nnow:\n{replay.replayed}\n\n"
            f"diff:\n{word_diff(replay.original, replay.replayed)}")  # fmt: skip


def read_set(path: Path) -> list[tuple[str, str]]:
    """`USER MESSAGE_ID` per line; blank lines and lines starting with # are skipped."""
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise CtlError(f"cannot read {path}: {error.strerror}") from error
    pairs = []
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 2:
            raise CtlError(f"{path}:{number}: expected `USER MESSAGE_ID`, got {line.strip()!r}")
        pairs.append((fields[0], fields[1]))
    if not pairs:
        raise CtlError(f"{path} names no turn to replay")
    return pairs


async def replay_set(
    client: ReplayClient, pairs: list[tuple[str, str]], version: str
) -> list[Replay]:
    room = asyncio.Semaphore(SET_CONCURRENCY)

    async def one(user_id: str, message_id: str) -> Replay:
        async with room:
            return await client.replay(user_id, message_id, version)

    return list(await asyncio.gather(*(one(u, m) for u, m in pairs)))


async def replay_prompts(args: argparse.Namespace) -> int:
    if args.set is None and not (args.user_id and args.message_id):
        raise CtlError("name USER and MESSAGE_ID, or --set FILE")
    if args.set is not None and args.user_id:
        raise CtlError("name either USER and MESSAGE_ID or --set FILE, not both")
    address = service_address(args, "gateway")
    async with ReplayClient(address, admin_token(args), tls=operator_tls(args)) as client:
        if args.set is None:
            replay = await client.replay(args.user_id, args.message_id, args.version)
            emit(args.json, replay, describe_replay(replay))
            return 0
        replays = await replay_set(client, read_set(args.set), args.version)
    rows = [[r.user_id, r.message_id, r.version, "identical" if r.identical else "differs",
             f"{difflib.SequenceMatcher(a=r.original, b=r.replayed).ratio():.2f}"]
            for r in replays]  # fmt: skip
    same = sum(r.identical for r in replays)
    text = table(("USER", "MESSAGE", "VERSION", "ANSWER", "SIMILARITY"), rows)
    emit(args.json, replays, f"{text}\n{same} of {len(replays)} identical")
    return 0
