"""The local platform (mutual TLS, a simulated node) with one conversation for each of its two
dev users, Free and Plus: what the gRPC fuzzer and the tests of its findings call into.

Free's answers are cut at 8 tokens, so an accepted send is quick; Plus's run 500 tokens, about
5 s at the simulated speed, so a Plus answer is still streaming while another user tries it.
Compaction is off: it writes a summary in the background after an answer, and a later call
would see the store change under it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from clients.chat_client import ChatClient, Done, Meta
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from infra.tls import Role

NODE_ID = "local-small-0"
POOL = "small"
Metadata = tuple[tuple[str, str], ...]


def bearer(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)


@dataclass(frozen=True)
class Ids:
    """A conversation and its first message, of one user."""

    user_id: str
    conversation_id: str
    message_id: str

    def all(self) -> list[str]:
        answer = self.message_id + ".answer"
        return [self.user_id, self.conversation_id, self.message_id, answer]


@dataclass
class Seeded:
    platform: LocalPlatform
    database: Path
    free: Ids
    plus: Ids


async def first_exchange(platform: LocalPlatform, tier: str, stop: bool) -> Ids:
    """A conversation with one answered message; `stop` ends the answer after its meta."""
    conversation_id, message_id = f"c_{tier}_{uuid.uuid4().hex[:8]}", f"m_{uuid.uuid4().hex[:8]}"
    tls = platform.tls(Role.CLIENT)
    async with ChatClient(platform.gateway_address, platform.tokens[tier], tls=tls) as chat:
        async for event in chat.send(conversation_id, "Hello there.", message_id=message_id):
            if isinstance(event, Meta) and stop:
                assert await chat.stop(message_id)
            if isinstance(event, Done):
                break
    return Ids(f"dev-{tier}", conversation_id, message_id)


@asynccontextmanager
async def seeded_platform(state: Path) -> AsyncIterator[Seeded]:
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=state,
            edge_listen="127.0.0.1:0",
            pool=POOL,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": "500,500",
                "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": "8",
                "CHAT_GATEWAY_FREE_BUCKET_CAPACITY": "1e9",
                "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "1e9",
                "CHAT_GATEWAY_COMPACTION": "false",
            },
        )
    )
    try:
        await platform.start()
        free = await first_exchange(platform, "free", stop=False)
        plus = await first_exchange(platform, "plus", stop=True)
        yield Seeded(platform, state / "chat.db", free, plus)
    finally:
        await platform.stop()
