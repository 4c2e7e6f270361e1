"""The fallback chain on real processes: a message for a pool with no replica falls to the
small pool; with no pool left the user reads a composed "busy" answer, not a raw error, and
nothing is stored or charged."""

from __future__ import annotations

import asyncio
import signal

import pytest

from clients.admin_client import AdminClient
from clients.base import ClientError
from clients.chat_client import ChatClient, Delta, Done, Meta
from clients.chat_client import new_conversation_id as new_id
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from gateway.pipeline import BUSY_MODEL, BUSY_TEXT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
async def small_only(tmp_path_factory):
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("fallback"),
            edge_listen="127.0.0.1:0",
            nodes=1,
            pool="small",
            slot_context_tokens=2048,
            parallel=1,
            extra_env={"CHAT_GATEWAY_PLUS_MAX_ANSWER_TOKENS": "24"},
        )
    )
    await platform.start()
    yield platform
    await platform.stop()


async def test_large_falls_to_small_then_to_a_busy_answer(small_only) -> None:
    platform = small_only
    async with ChatClient(
        platform.gateway_address, platform.tokens["plus"], tls=platform.tls("client")
    ) as chat:
        # No large pool in this fleet: a Plus user's pick of large is served by small.
        events = [e async for e in chat.send(new_id(), "Name a colour.", model="large")]
        meta = events[0]
        assert isinstance(meta, Meta) and meta.model not in ("", BUSY_MODEL)
        assert isinstance(events[-1], Done) and events[-1].finish in ("stop", "length")

        node = next(c for c in platform.children if c.name.startswith("nodeagent"))
        node.process.send_signal(signal.SIGKILL)
        await node.process.wait()
        async with AdminClient(
            platform.scheduler_address, platform.admin_token, tls=platform.tls()
        ) as admin:
            for _ in range(100):
                if all(n.state == "dead" for n in await admin.nodes()):
                    break
                await asyncio.sleep(0.1)

        level_before = (await chat.limits()).level
        conversation = new_id()
        busy = [e async for e in chat.send(conversation, "Are you there?")]
        assert isinstance(busy[0], Meta) and busy[0].model == BUSY_MODEL
        assert [e.text for e in busy if isinstance(e, Delta)] == [BUSY_TEXT]
        assert isinstance(busy[-1], Done) and busy[-1].finish == "error"
        # Nothing stored, nothing charged.
        with pytest.raises(ClientError) as missing:
            await chat.conversation(conversation)
        assert missing.value.code == "NOT_FOUND"
        assert (await chat.limits()).level >= level_before


async def _routes(platform: LocalPlatform) -> dict[tuple[str, str], float]:
    import aiohttp
    from prometheus_client.parser import text_string_to_metric_families

    port = next(c.ready for c in platform.children if c.name == "gateway")["metrics"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
    return {
        (s.labels["reason"], s.labels["pool"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "gateway_routes"
        for s in family.samples
        if s.name == "gateway_routes_total"
    }


@pytest.fixture(scope="module")
async def routed(tmp_path_factory):
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("router"),
            edge_listen="127.0.0.1:0",
            nodes=1,
            pool="small",
            slot_context_tokens=2048,
            parallel=1,
            extra_env={"CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": "8"},
        )
    )
    await platform.start()
    yield platform
    await platform.stop()


async def test_the_router_starts_easy_small_and_escalates_once(routed) -> None:
    hard = (
        "Write a Python function that parses RFC 3339 timestamps with time zones, "
        "then prove its running time is linear and list the edge cases."
    )
    conversation = new_id()
    async with ChatClient(
        routed.gateway_address, routed.tokens["free"], tls=routed.tls("client")
    ) as chat:
        async for _ in chat.send(conversation, "hi, how are you?"):
            pass
        assert (await _routes(routed)).get(("classifier", "small")) == 1
        async for _ in chat.send(conversation, hard):  # escalates small -> large
            pass
        async for _ in chat.send(conversation, "thanks!"):  # and stays large
            pass
    routes = await _routes(routed)
    assert routes.get(("escalated", "large")) == 1
    assert routes.get(("sticky", "large")) == 1
