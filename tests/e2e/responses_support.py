"""What the Responses API's end-to-end tests share: the OpenAI SDK pointed at a platform's edge,
a user of a test's own, the simulated replica's answer to a prompt, and a gateway counter."""

from __future__ import annotations

import uuid

import aiohttp
import openai

from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as spb
from chat.v1 import scheduler_service_pb2_grpc as spb_grpc
from clients.chatctl.platform import LocalPlatform
from domain.types import Role
from nodeagent.engine import PromptTurn
from nodeagent.sim import planned_answer, rendered


def sdk(platform: LocalPlatform, token: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{platform.edge_url}/v1", api_key=token, max_retries=0, timeout=60
    )


async def new_user(platform: LocalPlatform, tier: int = common_pb2.TIER_PLUS) -> str:
    """A user of its own (Plus unless told): a full bucket, and no other test's streams open."""
    async with platform.channel(platform.scheduler_address) as channel:
        created = await spb_grpc.UserServiceStub(channel).CreateUser(
            spb.UserServiceCreateUserRequest(user_id=f"u-{uuid.uuid4().hex[:10]}", tier=tier),
            metadata=(("authorization", f"Bearer {platform.admin_token}"),),
        )
    return created.token


def simulated_answer(lengths: tuple[int, int], *turns: tuple[Role, str]) -> str:
    """The simulated replica's whole answer to a prompt of these turns, its answers drawn
    between `lengths` tokens (CHAT_NODEAGENT_SIM_ANSWER_TOKENS)."""
    prompt = [PromptTurn(role, text) for role, text in turns]
    return "".join(rendered(planned_answer(prompt, lengths), 0))


async def gateway_counter(platform: LocalPlatform, metric: str, label: str, value: str) -> float:
    """One labelled counter of the platform's gateway, as scraped (0 before it is counted)."""
    port = platform._child("gateway").ready["metrics"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
    line = f'{metric}{{{label}="{value}"}} '
    values = [float(row[len(line) :]) for row in text.splitlines() if row.startswith(line)]
    return values[0] if values else 0.0
