"""`chatctl prompts show USER MESSAGE`: the exact prompt an answered turn's engine was sent
(its turns, the system prompt first, with the sampling, version, model and replica), as the
gateways captured it. An admin call; the scheduler logs every read."""

from __future__ import annotations

import argparse
from typing import Any

from clients.chatctl.addresses import admin_token, operator_tls, service_address
from clients.chatctl.output import emit
from clients.prompts_client import CapturedPrompt, PromptsClient


def add_prompts_parser(commands: Any, admin_flags: argparse.ArgumentParser) -> None:
    command = commands.add_parser("prompts", help="the captured prompts of answered turns")
    actions = command.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser("show", parents=[admin_flags], help="one turn's captured prompt")
    show.add_argument("user_id", metavar="USER")
    show.add_argument("message_id", metavar="MESSAGE_ID", help="the user's message (not ...answer)")
    command.set_defaults(handler=prompts)


def describe(prompt: CapturedPrompt) -> str:
    captured = prompt.captured_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [
        f"message {prompt.message_id} in conversation {prompt.conversation_id}",
        f"version {prompt.version or '-'}, model {prompt.model}, replica {prompt.node_id}",
        f"temperature {prompt.temperature:g}, at most {prompt.max_tokens} answer tokens",
        f"captured {captured}",
    ]
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
