"""The three-region platform's helpers for tests/e2e/test_regions.py: users, messages,
ratings and listings through each region's edge, and each gateway's view from its metrics."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from collections.abc import AsyncIterator

import aiohttp

from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from clients.chatctl.platform import LocalPlatform
from domain.types import Tier
from infra.bearer import token_hash
from infra.directory import Directory, DirectoryUser
from store.base import Store
from store.factory import open_store
from tests.servers import Etcd
from tests.sse import SseEvent, iter_events, read_events


def admin(platform: LocalPlatform) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {platform.admin_token}"),)


async def create_user(platform: LocalPlatform, pinned: bool = False, user_id: str = "") -> str:
    """A Plus user homed in the platform's region (user_id: a new one when ''); their token."""
    async with platform.channel(platform.scheduler_address) as channel:
        created = await pb_grpc.UserServiceStub(channel).CreateUser(
            pb.UserServiceCreateUserRequest(
                user_id=user_id or f"u-{uuid.uuid4().hex[:8]}",
                tier=common_pb2.TIER_PLUS,
                pinned=pinned,
            ),
            metadata=admin(platform),
        )
    return created.token


@contextlib.asynccontextmanager
async def region_store(platform: LocalPlatform) -> AsyncIterator[Store]:
    """The region's own store, opened beside its services."""
    store = await open_store(f"sqlite:///{platform.settings.state_dir / 'chat.db'}")
    try:
        yield store
    finally:
        await store.close()


async def pin(platform: LocalPlatform, rung: int | None) -> None:
    async with platform.channel(platform.scheduler_address) as channel:
        ask = pb.PinLadderRequest() if rung is None else pb.PinLadderRequest(rung=rung)
        await pb_grpc.SchedulerServiceStub(channel).PinLadder(ask, metadata=admin(platform))


async def metrics(http: aiohttp.ClientSession, platform: LocalPlatform) -> str:
    """The region's gateway's metrics, as scraped."""
    port = platform._child("gateway").ready["metrics"]
    async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
        return await response.text()


async def seen(http: aiohttp.ClientSession, platform: LocalPlatform) -> dict[str, float]:
    """The gateway's view of the regions, from its metrics: `up:<r>`, `rung:<r>` and
    `ready:<r>` (the small pool's)."""
    text = await metrics(http, platform)
    view = {}
    patterns = (
        ("up", r'^gateway_region_up\{region="(\w+)"\} (\S+)$'),
        ("rung", r'^gateway_region_rung\{pool="small",region="(\w+)"\} (\S+)$'),
        ("ready", r'^gateway_region_ready_replicas\{pool="small",region="(\w+)"\} (\S+)$'),
    )
    for kind, pattern in patterns:
        for region, value in re.findall(pattern, text, re.MULTILINE):
            view[f"{kind}:{region}"] = float(value)
    return view


async def until_seen(
    http: aiohttp.ClientSession, platform: LocalPlatform, want: dict[str, float], timeout_s: float
) -> float:
    """Waits for the gateway to see every key at its value; the seconds it took."""
    start = time.monotonic()
    while True:
        view = await seen(http, platform)
        if all(view.get(key) == value for key, value in want.items()):
            return time.monotonic() - start
        assert time.monotonic() - start < timeout_s, f"gateway sees {view}, not {want}"
        await asyncio.sleep(0.1)


async def send(
    http: aiohttp.ClientSession,
    platform: LocalPlatform,
    token: str,
    conversation: str,
    content: str,
    parent: str = "",
    started: asyncio.Event | None = None,
) -> tuple[dict, str, str]:
    """(meta, the whole answer's text, the message id); started is set at the first event."""
    events, message_id = await send_events(http, platform, token, conversation, content, parent,
                                           started)  # fmt: skip
    text = "".join(e.data["text"] for e in events if e.event == "delta")
    return events[0].data, text, message_id


async def send_events(
    http: aiohttp.ClientSession,
    platform: LocalPlatform,
    token: str,
    conversation: str,
    content: str,
    parent: str = "",
    started: asyncio.Event | None = None,
) -> tuple[list[SseEvent], str]:
    """The answer's events, whole, and the message id."""
    message_id = uuid.uuid4().hex[:12]
    body = {"content": content, **({"parentId": parent} if parent else {})}
    async with http.post(
        f"{platform.edge_url}/v1/conversations/{conversation}/messages",
        json=body,
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": message_id},
    ) as response:
        assert response.status == 200, await response.text()
        events = []
        async for event in iter_events(response):
            events.append(event)
            if started is not None:
                started.set()
    assert events[-1].event == "done", events[-1]
    assert events[-1].data["finish"] in ("stop", "length")
    return events, message_id


async def refused(
    http: aiohttp.ClientSession,
    platform: LocalPlatform,
    token: str,
    conversation: str,
    content: str,
) -> tuple[int, dict, str]:
    """A message the region's edge refuses: (HTTP status, the JSON body, Retry-After)."""
    async with http.post(
        f"{platform.edge_url}/v1/conversations/{conversation}/messages",
        json={"content": content},
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": uuid.uuid4().hex[:12]},
    ) as response:
        return response.status, await response.json(), response.headers.get("Retry-After", "")


async def resume(
    http: aiohttp.ClientSession, platform: LocalPlatform, token: str, message_id: str, after: int
) -> tuple[int, list[SseEvent] | str]:
    """The answer's events after event `after`, at the region's edge (or the error's reason)."""
    async with http.get(
        f"{platform.edge_url}/v1/messages/{message_id}/stream",
        headers={"Authorization": f"Bearer {token}", "Last-Event-ID": str(after)},
    ) as response:
        if response.status != 200:
            return response.status, (await response.json())["error"]["message"]
        return response.status, await read_events(response)


async def stop(
    http: aiohttp.ClientSession, platform: LocalPlatform, token: str, message_id: str
) -> tuple[int, bool | str]:
    """Stops the answer at the region's edge: whether it was running (or the error's reason)."""
    async with http.post(
        f"{platform.edge_url}/v1/messages/{message_id}/stop",
        headers={"Authorization": f"Bearer {token}"},
    ) as response:
        body = await response.json()
        if response.status != 200:
            return response.status, body["error"]["message"]
        return response.status, body["stopped"]


async def stopped_at_start(
    http: aiohttp.ClientSession, platform: LocalPlatform, token: str, conversation: str
) -> list[SseEvent]:
    """A new message's answer stopped at its first event, at the same edge: its events. A
    short answer may end before its stop arrives (the stop then says so): up to three tries."""
    for _ in range(3):
        message_id = uuid.uuid4().hex[:12]
        async with http.post(
            f"{platform.edge_url}/v1/conversations/{conversation}-{message_id}/messages",
            json={"content": f"Tell me a long story ({message_id})"},
            headers={"Authorization": f"Bearer {token}", "Idempotency-Key": message_id},
        ) as response:
            assert response.status == 200, await response.text()
            events = iter_events(response)
            seen = [await anext(events)]
            asked = await stop(http, platform, token, message_id)
            seen += [event async for event in events]
        assert (asked[0], seen[-1].event) == (200, "done")
        if asked[1] is True:
            return seen
        assert seen[-1].data["finish"] in ("stop", "length")  # it had ended by itself
    raise AssertionError("every answer ended before its stop in three tries")


async def level(http: aiohttp.ClientSession, platform: LocalPlatform, token: str) -> float:
    """The user's token bucket as the region's gateway keeps it."""
    async with http.get(
        f"{platform.edge_url}/v1/limits", headers={"Authorization": f"Bearer {token}"}
    ) as response:
        assert response.status == 200
        return float((await response.json())["level"])


async def listed(
    http: aiohttp.ClientSession, platform: LocalPlatform, token: str, conversation: str
) -> tuple[int, list[dict]]:
    async with http.get(
        f"{platform.edge_url}/v1/conversations/{conversation}/messages",
        headers={"Authorization": f"Bearer {token}"},
    ) as response:
        body = await response.json()
        return response.status, body.get("messages", [])


async def ratings_counted(
    http: aiohttp.ClientSession, platform: LocalPlatform
) -> dict[tuple[str, str, str], float]:
    """The region's gateway's count of ratings by (version, tier, rating)."""
    text = await metrics(http, platform)
    pattern = r'^gateway_feedback_total\{rating="(\w+)",tier="(\w+)",version="([^"]*)"\} (\S+)$'
    found = re.findall(pattern, text, re.MULTILINE)
    return {(version, tier, rating): float(count) for rating, tier, version, count in found}


async def rate(
    http: aiohttp.ClientSession, platform: LocalPlatform, token: str, message_id: str,
    rating: str, comment: str = "",
) -> tuple[int, dict]:  # fmt: skip
    """Rates an answer at the region's edge: (HTTP status, the JSON body)."""
    async with http.post(
        f"{platform.edge_url}/v1/messages/{message_id}/feedback",
        json={"rating": rating, "comment": comment},
        headers={"Authorization": f"Bearer {token}"},
    ) as response:
        return response.status, await response.json()


async def conversations(
    http: aiohttp.ClientSession, platform: LocalPlatform, token: str, query: str = ""
) -> tuple[int, dict]:
    """The user's list of conversations at the region's edge: (HTTP status, the JSON body)."""
    async with http.get(
        f"{platform.edge_url}/v1/conversations{query}",
        headers={"Authorization": f"Bearer {token}"},
    ) as response:
        return response.status, await response.json()


async def delete(
    http: aiohttp.ClientSession, platform: LocalPlatform, token: str, conversation: str
) -> tuple[int, dict]:
    """Deletes the conversation at the region's edge: (HTTP status, the JSON body)."""
    async with http.delete(
        f"{platform.edge_url}/v1/conversations/{conversation}",
        headers={"Authorization": f"Bearer {token}"},
    ) as response:
        return response.status, await response.json()


async def listed_error(
    http: aiohttp.ClientSession, platform: LocalPlatform, token: str, path: str
) -> tuple[int, str]:
    """A GET at the region's edge that fails: (HTTP status, the error's reason)."""
    async with http.get(
        f"{platform.edge_url}{path}", headers={"Authorization": f"Bearer {token}"}
    ) as response:
        return response.status, (await response.json())["error"]["message"]


async def resumed_and_stopped_at(
    http: aiohttp.ClientSession,
    edge: LocalPlatform,
    token: str,
    events: list[SseEvent],
    message_id: str,
    runs_in: str,
    new_runs_in: tuple[str, ...] = (),
) -> None:
    """An answer that ran in region runs_in, resumed and stopped at edge, as where it ran; then
    a new one, stopped at its start, that runs in one of new_runs_in (default: runs_in)."""
    # Ended, it is still replayed by the gateway it ran on, and not stopped.
    assert await resume(http, edge, token, message_id, 2) == (200, events[2:])
    assert await stop(http, edge, token, message_id) == (200, False)
    stopped = await stopped_at_start(http, edge, token, "stopped")
    region = stopped[0].data["region"]
    assert (region in (new_runs_in or (runs_in,)), stopped[-1].data["finish"]) == (
        True, "cancelled"), stopped[0].data  # fmt: skip


# A user whose home region (here z, see away_user) is out, reading what is kept there.
HOME_OUT = (
    "your home region 'z' is unavailable; your conversations are kept there: try again when "
    "it is back"
)


async def away_user(etcd_server: Etcd, platform: LocalPlatform) -> str:
    """The token of a user whose home region, z, has never run."""
    token = f"z-{uuid.uuid4().hex}"
    prefix = platform.settings.extra_env["CHAT_GATEWAY_GLOBAL_PREFIX"]
    directory = Directory(etcd_server.endpoint, prefix)
    try:
        user = DirectoryUser(f"u-{uuid.uuid4().hex[:8]}", Tier.PLUS, "z", False, token_hash(token))
        await directory.put_user(user)
    finally:
        await directory.close()
    return token


async def responses(
    http: aiohttp.ClientSession,
    platform: LocalPlatform,
    token: str,
    method: str,
    path: str = "",
    body: dict | None = None,
) -> tuple[int, dict]:
    """A Responses API call at the region's edge: (HTTP status, the JSON body)."""
    async with http.request(
        method,
        f"{platform.edge_url}/v1/responses{path}",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
    ) as response:
        return response.status, await response.json()
