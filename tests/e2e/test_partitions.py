"""Partitions between hosts: every service (etcd, Redis, PostgreSQL, two schedulers, two
simulated nodes, two gateways sharing answers through Redis, two edges) runs in a network
namespace of its own (tests/netns.py), and a link between two of them is cut silently while
an answer streams. After each scenario tests/ledger.py checks the outcome: one stored answer
per accepted message, equal to what the user saw, event ids without gap or repeat, tokens
settled once.

Needs root to make namespaces; skipped with the reason otherwise (CI runs it as root)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

import aiohttp
import pytest

from clients.chat_client import AdminClient
from clients.chatctl.platform import Child, LocalPlatform, PlatformSettings
from tests.faults import serving_node, streaming_gateway
from tests.ledger import Ledger, Sent
from tests.netns import NetnsPlacement, Network, unavailable
from tests.servers import Etcd, run_etcd, run_postgres, run_redis
from tests.simtext import expected_answer

pytestmark = pytest.mark.slow

SYSTEM_PROMPT = "You are a careful assistant."
# About 40 tokens a second: an answer streams for 4-5 s.
ANSWER_TOKENS = (160, 200)
NODES = ("local-small-0", "local-small-1")
# Generous, and still well under the gateway's 10 s stall timeout: a silent node is noticed by
# keepalive, not by the timeout.
FAILOVER_PAUSE_S = 6.0
WHOLE_AGAIN_S = 60.0


@dataclass
class Cluster:
    network: Network
    platform: LocalPlatform
    etcd: Etcd


@contextlib.contextmanager
def network() -> Iterator[Network]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"partition tests need network namespaces: {reason}")
    made = Network()
    try:
        made.open()
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    with network() as net, contextlib.ExitStack() as servers:
        etcd = servers.enter_context(run_etcd(place=net.host("etcd").place()))
        redis = servers.enter_context(run_redis(net.host("redis").place()))
        postgres = servers.enter_context(run_postgres(net.host("postgres").place()))
        platform = LocalPlatform(
            PlatformSettings(
                state_dir=tmp_path_factory.mktemp("partitions"),
                edge_listen=f"{net.host('edge').address}:0",
                nodes=2,
                schedulers=2,
                gateways=2,
                edges=2,
                etcd_endpoint=etcd.endpoint,
                redis_url=redis.url,
                store_url=postgres.dsn,
                placement=NetnsPlacement(net),
                extra_env={
                    "CHAT_NODEAGENT_ENGINE": "sim",
                    "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ",".join(map(str, ANSWER_TOKENS)),
                    "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
                    "CHAT_GATEWAY_ROUTER": "false",
                    "CHAT_GATEWAY_COMPACTION": "false",
                    # Refill off, as good as: a bucket's level is its capacity less what was
                    # settled (a Free bucket gains 0.0025 tokens in 1,000 s). Not longer: the
                    # Redis script's key expiry must stay an integer of milliseconds.
                    "CHAT_GATEWAY_BUCKET_REFILL_S": "1e10",
                    # Text token by token, so a test can act after the first few deltas.
                    "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
                    "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
                    # An edge that reaches no gateway tells its client soon.
                    "CHAT_EDGE_REATTACH_TIMEOUT_S": "3",
                },
            )
        )
        try:
            await platform.start()
            yield Cluster(net, platform, etcd)
        finally:
            await platform.stop()


@pytest.fixture
async def ledger(cluster: Cluster) -> AsyncIterator[Ledger]:
    """A ledger for one scenario; after it, every link is healed and the platform whole."""
    async with aiohttp.ClientSession() as http:
        yield Ledger(http, cluster.platform)
        cluster.network.heal_all()
        await whole_again(cluster, http)


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> float:
    """Seconds until check() holds; fails after timeout_s."""
    start = time.monotonic()
    while not await check():
        assert time.monotonic() - start < timeout_s, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def ready_nodes(platform: LocalPlatform) -> list[set[str]]:
    """The ready nodes each scheduler lists (empty for a scheduler that cannot be asked)."""
    views = []
    for address in platform.scheduler_addresses():
        async with AdminClient(address, platform.admin_token, tls=platform.tls()) as admin:
            views.append({n.node_id for n in await admin.nodes() if n.state == "ready"})
    return views


async def leading(platform: LocalPlatform) -> list[bool]:
    flags = []
    for address in platform.scheduler_addresses():
        async with AdminClient(address, platform.admin_token, tls=platform.tls()) as admin:
            flags.append((await admin.ladder()).leading)
    return flags


async def whole_again(cluster: Cluster, http: aiohttp.ClientSession) -> None:
    platform = cluster.platform

    async def whole() -> bool:
        if await ready_nodes(platform) != [set(NODES)] * 2:
            return False
        if sorted(await leading(platform)) != [False, True]:
            return False
        for url in platform.edge_urls():
            async with http.get(f"{url}/readyz") as response:
                states = (await response.json()).get("gateways", {})
            if sorted(states.values()) != ["serving", "serving"]:
                return False
        return True

    await eventually(whole, WHOLE_AGAIN_S, "every link healed, every service back")


def expected(sent: Sent, cap: int | None = None) -> str:
    return expected_answer(sent.content, SYSTEM_PROMPT, ANSWER_TOKENS, cap)


def child_of(platform: LocalPlatform, name: str) -> Child:
    return next(c for c in platform.children if c.name == name)


# Scenarios ---------------------------------------------------------------------------------------


async def test_a_gateway_cut_off_from_its_node_fails_over_within_keepalive(
    cluster: Cluster, ledger: Ledger
) -> None:
    platform, net = cluster.platform, cluster.network
    cut: list[str] = []

    async def cut_gateway_from_node(sent: Sent) -> None:
        gateway = await streaming_gateway(ledger.http, platform)
        node = serving_node(platform, sent.replica)
        net.cut(gateway.name, node.name)
        cut.extend((gateway.name, node.name))

    account = await ledger.account("free")
    content = "Partition: tell me about tides."
    sent = await ledger.send(account, content, act=cut_gateway_from_node)
    assert sent.accepted, (sent.status, sent.body)
    assert sent.text == expected(sent)
    stored = await ledger.stored(sent)
    assert stored is not None and stored[1]["replicaId"] != sent.replica
    pause = sent.pause_s()
    print(f"gateway cut from node {cut}: pause {pause:.2f} s")
    assert pause < FAILOVER_PAUSE_S, f"the answer paused {pause:.1f} s"
    await ledger.check()
