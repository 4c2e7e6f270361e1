"""Graceful shutdown: a service told to stop lets running answers finish, and they are saved."""

from __future__ import annotations

import asyncio
import signal
import uuid

import aiohttp
import pytest

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from store.sqlite import SqliteStore
from tests.sse import read_events

pytestmark = pytest.mark.slow


async def _stream_then_stop(tmp_path, service: str) -> None:
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path,
            edge_listen="127.0.0.1:0",
            slot_context_tokens=2048,
            extra_env={"CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": "150"},
        )
    )
    await platform.start()
    try:
        message = f"m_{uuid.uuid4().hex[:8]}"
        headers = {"Authorization": f"Bearer {platform.tokens['free']}", "Idempotency-Key": message}
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{platform.edge_url}/v1/conversations/c1/messages",
                json={"content": "Write a long story about a lighthouse keeper."},
                headers=headers,
            ) as response,
        ):
            assert response.status == 200
            for _ in range(2):  # meta, then the first delta
                await response.content.readuntil(b"\n\n")
            victim = next(c for c in platform.children if c.name == service)
            victim.process.send_signal(signal.SIGTERM)
            events = await read_events(response)
        assert events[-1].event == "done"
        assert events[-1].data["finish"] in ("stop", "length")
        assert await asyncio.wait_for(victim.process.wait(), 30) == 0
        store = SqliteStore(str(tmp_path / "chat.db"))
        await store.open()
        try:
            saved = await store.get_message("dev-free", message + ".answer")
        finally:
            await store.close()
        assert saved.finish == events[-1].data["finish"]
        assert saved.tokens == events[-1].data["usage"]["output"] > 0
    finally:
        await platform.stop()


async def test_a_stopping_gateway_finishes_and_saves_running_answers(tmp_path) -> None:
    await _stream_then_stop(tmp_path, "gateway")


async def test_a_stopping_node_drains_its_running_answers_first(tmp_path) -> None:
    await _stream_then_stop(tmp_path, "nodeagent-0")
