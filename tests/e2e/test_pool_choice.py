"""Who may pick a pool, said to the client: on real processes with a small and a large node
(simulated engine), a Free user's pick of large is answered by the pool the router chose, and
every API says which pool served and why it is not the one asked for (the meta event, and
the X-Pool and X-Pool-Reason headers); a Plus pick is honoured with no reason, until the
day's allowance is spent."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import aiohttp
import pytest
from multidict import CIMultiDictProxy

from clients.admin_client import AdminClient
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from tests.sse import read_events

pytestmark = pytest.mark.slow

# The router sends this small (the shipped classifier scores it easy), whatever a Free user picks.
EASY = "Say hi."
POOL_HEADERS = ("X-Pool", "X-Pool-Reason")


class TwoPools(LocalPlatform):
    """Node 0 serves the small pool, node 1 the large one."""

    def _pool(self, index: int) -> str:
        return "large" if index == 1 else "small"

    def _node_id(self, index: int) -> str:
        return f"local-{self._pool(index)}-{index}"

    def _node_env(self, index: int) -> dict[str, str]:
        return {**super()._node_env(index), "CHAT_NODEAGENT_POOL": self._pool(index)}


@pytest.fixture(scope="module")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    platform = TwoPools(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("pools"),
            edge_listen="127.0.0.1:0",
            nodes=2,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
                # The tests read pools, not prose.
                "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": "8",
                "CHAT_GATEWAY_PLUS_MAX_ANSWER_TOKENS": "8",
                # Any answer spends it (one output token alone weighs 4 x 0.27): each user's
                # first message is within the allowance, the next past it.
                "CHAT_GATEWAY_PLUS_DAILY_ALLOWANCE": "1",
            },
        )
    )
    await platform.start()
    yield platform
    await platform.stop()


async def new_user(platform: LocalPlatform, tier: str) -> str:
    """A user of its own per test: the allowance is spent per user."""
    async with AdminClient(
        platform.scheduler_address, platform.admin_token, tls=platform.tls()
    ) as admin:
        return (await admin.create_user(f"pools-{uuid.uuid4().hex[:8]}", tier)).token


def pool_headers(headers: CIMultiDictProxy[str]) -> dict[str, str]:
    return {name: headers[name] for name in POOL_HEADERS if name in headers}


async def send(platform: LocalPlatform, token: str, model: str) -> tuple[dict, dict, str]:
    """A message on the conversation API: its pool headers, its meta's pool fields, and how
    the answer ended."""
    url = f"{platform.edge_url}/v1/conversations/c_{uuid.uuid4().hex[:8]}/messages"
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": f"m_{uuid.uuid4().hex[:8]}"}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json={"content": EASY, "model": model}, headers=headers) as r:
            assert r.status == 200, await r.text()
            events = await read_events(r)
    meta, last = events[0], events[-1]
    assert (meta.event, last.event) == ("meta", "done"), events
    pool = {"pool": meta.data["pool"], "poolReason": meta.data["poolReason"]}
    return pool_headers(r.headers), pool, last.data["finish"]


async def test_a_free_pick_of_large_is_answered_small_and_says_why(platform) -> None:
    token = await new_user(platform, "free")
    headers, meta, finish = await send(platform, token, "large")
    assert headers == {"X-Pool": "small", "X-Pool-Reason": "tier"}
    assert meta == {"pool": "small", "poolReason": "tier"}
    assert finish in ("stop", "length")
    # Asking for nothing is the router's choice, said as such.
    headers, meta, _ = await send(platform, token, "auto")
    assert (headers, meta) == (
        {"X-Pool": "small", "X-Pool-Reason": "router"},
        {"pool": "small", "poolReason": "router"},
    )


async def test_a_plus_pick_of_large_is_honoured_until_the_allowance_is_spent(platform) -> None:
    token = await new_user(platform, "plus")
    headers, meta, finish = await send(platform, token, "large")
    assert (headers, meta) == ({"X-Pool": "large"}, {"pool": "large", "poolReason": ""})
    assert finish in ("stop", "length")
    headers, meta, finish = await send(platform, token, "large")
    assert (headers, meta) == (
        {"X-Pool": "small", "X-Pool-Reason": "allowance"},
        {"pool": "small", "poolReason": "allowance"},
    )
    assert finish in ("stop", "length")


async def test_the_openai_compatible_apis_say_it_in_headers(platform) -> None:
    token = await new_user(platform, "free")
    auth = {"Authorization": f"Bearer {token}"}
    messages = [{"role": "user", "content": EASY}]
    said = {"X-Pool": "small", "X-Pool-Reason": "tier"}
    async with aiohttp.ClientSession() as http:
        for stream in (False, True):
            body = {"model": "large", "messages": messages, "stream": stream}
            async with http.post(
                f"{platform.edge_url}/v1/chat/completions", json=body, headers=auth
            ) as r:
                raw = await r.text()
                assert (r.status, pool_headers(r.headers)) == (200, said), raw
            if not stream:
                assert json.loads(raw)["choices"][0]["finish_reason"] in ("stop", "length")
            else:
                assert raw.endswith("data: [DONE]\n\n"), raw
        for stream in (False, True):
            body = {"model": "large", "input": EASY, "stream": stream}
            async with http.post(f"{platform.edge_url}/v1/responses", json=body, headers=auth) as r:
                raw = await r.text()
                assert (r.status, pool_headers(r.headers)) == (200, said), raw
            # The answer runs to the 8-token cap, or ends before it.
            if not stream:
                assert json.loads(raw)["status"] in ("completed", "incomplete"), raw
            else:
                ended = ("event: response.completed", "event: response.incomplete")
                assert any(name in raw for name in ended), raw
