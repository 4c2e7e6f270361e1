"""Two regions on one machine as `chatctl up --regions a,b --schedulers 2 --redis URL` composes
them (clients/chatctl/regions.py, `region_settings`), region a with two gateways and b with
one: both regions' schedulers share one etcd and both regions' gateways one Redis, each region
under prefixes of its own. Each region keeps its own nodes and ladder leader, answers after its
leading scheduler dies, and a user of a reached through b's edge is served and listed after one
of a's gateways dies."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import re
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aetcd
import aiohttp
import pytest

from clients.chatctl.platform import Child, LocalPlatform
from clients.chatctl.regions import region_etcd_prefix, region_redis_prefix, region_settings
from gateway.redis_buckets import bucket_key, connect
from infra.certs import Authority
from tests.clients.test_chatctl import chatctl
from tests.e2e.regions_support import conversations, create_user, listed, send
from tests.faults import child_of, kill, leading, restart_the_dead, scheduler_id
from tests.servers import Etcd
from tests.servers import Redis as RedisServer

pytestmark = pytest.mark.slow

SCHEDULERS = ("scheduler", "scheduler-1")
# A killed leader's key outlives it by its lease (5 s); generous on a loaded 2-core machine.
LEADER_MOVES_WITHIN_S = 20.0
ANSWERS = re.compile(r"^gateway_answers_total\{[^}]*\} (\S+)$", re.MULTILINE)


@dataclasses.dataclass
class Regions:
    root: Path
    platforms: dict[str, LocalPlatform]


@pytest.fixture(scope="module")
async def regions(
    tmp_path_factory: pytest.TempPathFactory, etcd_server: Etcd, redis_server: RedisServer
) -> AsyncIterator[Regions]:
    root = tmp_path_factory.mktemp("regions-scaled")
    authority = Authority.create()
    # The directory of this module's own: other modules' regions share the session's etcd.
    directory = f"/regions-scaled-{uuid.uuid4().hex[:8]}/"
    platforms = {}
    for index, (name, gateways) in enumerate((("a", 2), ("b", 1))):
        args = argparse.Namespace(state_dir=str(root), listen="127.0.0.1:0", nodes=1,
                                  pool="small", schedulers=2, gateways=gateways,
                                  redis=redis_server.url, insecure=False)  # fmt: skip
        settings = region_settings(args, name, index, etcd_server.endpoint, authority)
        extra_env = {
            "CHAT_NODEAGENT_ENGINE": "sim",
            "CHAT_NODEAGENT_SIM_SPEED": "4",
            "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": "20,60",
            "CHAT_GATEWAY_ROUTER": "false",
            "CHAT_GATEWAY_GLOBAL_PREFIX": directory,
            "CHAT_SCHEDULER_GLOBAL_PREFIX": directory,
        }
        platforms[name] = LocalPlatform(dataclasses.replace(settings, extra_env=extra_env))
    try:
        await asyncio.gather(*(p.start() for p in platforms.values()))
        yield Regions(root, platforms)
    finally:
        await asyncio.gather(*(p.stop() for p in platforms.values()))


async def _leader(platform: LocalPlatform, among: tuple[str, ...] = SCHEDULERS) -> str:
    """The one scheduler of the region that leads its ladder, once exactly one does."""
    deadline = time.monotonic() + LEADER_MOVES_WITHIN_S
    while (flags := await leading(platform, among)).count(True) != 1:
        assert time.monotonic() < deadline, f"{platform.settings.region}: leading {flags}"
        await asyncio.sleep(0.1)
    return among[flags.index(True)]


async def _etcd_records(etcd: Etcd, prefix: str) -> dict[str, bytes]:
    async with aetcd.Client(host=etcd.host, port=etcd.port) as client:
        found = await client.get_prefix(prefix.encode())
        return {kv.key.decode()[len(prefix) :]: kv.value for kv in found}


async def test_each_region_lists_its_own_nodes_and_elects_its_own_leader(
    regions: Regions, etcd_server: Etcd
) -> None:
    for name, platform in regions.platforms.items():
        shown = await chatctl("nodes", "--json", "--state-dir", str(regions.root),
                              "--region", name)  # fmt: skip
        assert shown.code == 0, shown.err
        assert [(n["node_id"], n["address"], n["state"]) for n in shown.json()] == [
            ("local-small-0", platform.node_addresses()[0], "ready")
        ]
        # etcd has the region's node (the same id in both regions) under the region's prefix.
        prefix = region_etcd_prefix(name)
        nodes = await _etcd_records(etcd_server, prefix + "nodes/")
        assert list(nodes) == ["local-small-0"]
        assert f'"address": "{platform.node_addresses()[0]}"' in nodes["local-small-0"].decode()
        # One leader in each region, one of its own schedulers.
        leader = child_of(platform, await _leader(platform))
        held = await _etcd_records(etcd_server, prefix + "ladder/leader")
        assert held == {"": scheduler_id(leader).encode()}


async def test_a_region_answers_after_its_leading_scheduler_is_killed(regions: Regions) -> None:
    a, b = regions.platforms["a"], regions.platforms["b"]
    a_leader, b_leader = await _leader(a), await _leader(b)
    survivor = next(name for name in SCHEDULERS if name != b_leader)
    token, question = b.tokens["plus"], "Still answering without your leader?"
    conversation = f"lead-{uuid.uuid4().hex[:8]}"
    async with aiohttp.ClientSession() as http:
        try:
            await kill(child_of(b, b_leader))
            meta, text, _ = await send(http, b, token, conversation, question)
            assert (meta["region"], meta["model"] != "busy") == ("b", True), meta
            status, messages = await listed(http, b, token, conversation)
            assert (status, [(m["role"], m["content"]) for m in messages]) == (
                200,
                [("user", question), ("assistant", text)],
            )
            # b's other scheduler takes the lead; a's leader never changed.
            assert await _leader(b, (survivor,)) == survivor
            assert await _leader(a) == a_leader
        finally:
            await restart_the_dead(b, http)


async def _answers_counted(http: aiohttp.ClientSession, gateway: Child) -> float:
    async with http.get(f"http://127.0.0.1:{gateway.ready['metrics']}/metrics") as response:
        return sum(float(value) for value in ANSWERS.findall(await response.text()))


async def test_a_user_of_a_reached_through_b_outlives_one_of_as_gateways(
    regions: Regions, redis_server: RedisServer
) -> None:
    a, b = regions.platforms["a"], regions.platforms["b"]
    user_id = f"u-{uuid.uuid4().hex[:8]}"
    token = await create_user(a, user_id=user_id)
    gateways = [c for c in a.children if c.name.startswith("gateway")]
    assert len(gateways) == 2
    async with aiohttp.ClientSession() as http:
        try:
            before = [await _answers_counted(http, g) for g in gateways]
            first, first_text, first_id = await send(http, b, token, "two", "Hello through b")
            assert first["region"] == "a"
            after = [await _answers_counted(http, g) for g in gateways]
            # The gateway of a that answered (the user's traffic reaches it) is the one killed.
            served = [g for g, was, now in zip(gateways, before, after, strict=True) if now > was]
            assert len(served) == 1, (before, after)
            # Charged in a's bucket, in a's part of the shared Redis, and nowhere else.
            redis = connect(redis_server.url)
            try:
                kept = [bucket_key(user_id, region_redis_prefix(r)) for r in ("a", "b")]
                assert [await redis.exists(key) for key in [*kept, bucket_key(user_id)]] == [
                    1,
                    0,
                    0,
                ]
            finally:
                await redis.aclose()
            await kill(served[0])
            status, listing = await conversations(http, b, token)
            assert (status, [c["conversationId"] for c in listing["conversations"]]) == (
                200,
                ["two"],
            )
            second, second_text, _ = await send(
                http, b, token, "two", "Are you still there?", parent=first_id + ".answer"
            )
            assert second["region"] == "a"
            status, messages = await listed(http, a, token, "two")
            assert (status, [(m["role"], m["content"]) for m in messages]) == (
                200,
                [
                    ("user", "Hello through b"),
                    ("assistant", first_text),
                    ("user", "Are you still there?"),
                    ("assistant", second_text),
                ],
            )
            assert await listed(http, b, token, "two") == (200, messages)
        finally:
            await restart_the_dead(a, http)
