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

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from tests.faults import (
    child_of,
    etcd_revision,
    leader_history,
    leading,
    ready_nodes,
    scheduler_id,
    serving_node,
    streaming_gateway,
)
from tests.ledger import Ledger, Sent
from tests.netns import NetnsPlacement, Network, unavailable
from tests.servers import Etcd, run_etcd, run_postgres, run_redis
from tests.simtext import expected_answer

# Each scenario within 90 s: a hang is a failure, not a wait for the suite's timeout.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

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


SCHEDULERS = ("scheduler", "scheduler-1")


async def whole_again(cluster: Cluster, http: aiohttp.ClientSession) -> None:
    platform = cluster.platform

    async def whole() -> bool:
        if await ready_nodes(platform) != [set(NODES)] * 2:
            return False
        if sorted(await leading(platform, SCHEDULERS)) != [False, True]:
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


def assert_exact(sent: Sent) -> None:
    """The user read the uninterrupted answer to the message, character for character."""
    want, got = expected(sent), sent.text
    if got != want:
        seam = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                    min(len(got), len(want)))  # fmt: skip
        pytest.fail(
            f"{sent.message_id}: the text read differs from the answer at character {seam} "
            f"(read {len(got)}, answer {len(want)}): read ...{got[seam - 40 : seam + 80]!r}, "
            f"answer ...{want[seam - 40 : seam + 80]!r}; events {sent.names}, "
            f"the edge's errors {[e.data for e in sent.interruptions]}"
        )


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
    assert_exact(sent)
    stored = await ledger.stored(sent)
    assert stored is not None and stored[1]["replica"] != sent.replica
    pause = sent.pause_s()
    print(f"gateway cut from node {cut}: pause {pause:.2f} s")
    assert pause < FAILOVER_PAUSE_S, f"the answer paused {pause:.1f} s"
    await ledger.check()


async def test_a_node_cut_off_from_the_schedulers_finishes_its_answer_and_gets_no_new_ones(
    cluster: Cluster, ledger: Ledger
) -> None:
    platform, net = cluster.platform, cluster.network
    dropped: list[asyncio.Task[float]] = []

    async def cut_node_from_schedulers(sent: Sent) -> None:
        node = serving_node(platform, sent.replica)
        for scheduler in SCHEDULERS:
            net.cut(node.name, scheduler)

        async def gone() -> bool:
            return all(sent.replica not in view for view in await ready_nodes(platform))

        # Watched beside the answer, which the client keeps reading meanwhile.
        dropped.append(asyncio.create_task(eventually(gone, 10, "the cut node dropped")))

    account = await ledger.account("free")
    sent = await ledger.send(account, "Cut from the schedulers: tell me about owls.",
                             act=cut_node_from_schedulers)  # fmt: skip
    assert sent.accepted, (sent.status, sent.body)
    # The gateway still reaches the node: the answer goes on there, unchanged, without a pause.
    assert_exact(sent)
    stored = await ledger.stored(sent)
    assert stored is not None and stored[1]["replica"] == sent.replica
    assert sent.pause_s() < 2.0, f"the answer paused {sent.pause_s():.1f} s"
    # Its reports stopped reaching the schedulers: both stop picking it (report timeout, 2 s).
    dropped_s = await dropped[0]
    print(f"node cut from the schedulers: dropped from both after {dropped_s:.2f} s")
    for turn in range(3):
        new = await ledger.send(account, f"Meanwhile, question {turn}: what is a fjord?")
        assert new.accepted, (new.status, new.body)
        assert new.replica != sent.replica
        assert_exact(new)
    await ledger.check()


async def test_an_edge_cut_off_from_its_gateways_the_client_resumes_through_another_edge(
    cluster: Cluster, ledger: Ledger
) -> None:
    platform, net = cluster.platform, cluster.network
    first, second = (str(child_of(platform, name).ready["http"]) for name in ("edge", "edge-1"))

    async def cut_edge_from_gateways(sent: Sent) -> None:
        for gateway in ("gateway", "gateway-1"):
            net.cut("edge", gateway)

    account = await ledger.account("plus")
    content = "Edge cut: tell me about harbours."
    sent = await ledger.send(account, content, edge_url=first, act=cut_edge_from_gateways)
    assert sent.accepted, (sent.status, sent.body)
    # The edge found every gateway silent and said so; the client resumes through the other.
    assert [e.data["code"] for e in sent.interruptions] == [14], (
        sent.names[-3:],
        sent.interruptions,
    )
    await ledger.resume(sent, second)
    assert_exact(sent)
    pause = sent.pause_s()
    print(f"edge cut from its gateways: the client's pause {pause:.2f} s")
    # Keepalive (2 s) and the edge's reattach timeout (3 s here) before the resume.
    assert pause < 8.0, f"the answer paused {pause:.1f} s"
    ledger.read_through = second
    await ledger.check()


async def test_a_scheduler_cut_off_from_etcd_hands_the_ladder_over_and_two_never_lead(
    cluster: Cluster, ledger: Ledger
) -> None:
    platform, net = cluster.platform, cluster.network
    names = SCHEDULERS
    flags = await leading(platform, SCHEDULERS)
    assert sorted(flags) == [False, True], flags
    leader, other = (0, 1) if flags[0] else (1, 0)
    start = await etcd_revision(cluster.etcd)
    net.cut(names[leader], "etcd")

    async def handed_over() -> bool:
        flags = await leading(platform, SCHEDULERS)
        assert not all(flags), "two schedulers say they lead at once"
        return flags[other] and not flags[leader]

    took_s = await eventually(handed_over, 20, "the other scheduler leads")
    print(f"scheduler cut from etcd: the other leads after {took_s:.2f} s")
    # Picks go on at both schedulers meanwhile.
    account = await ledger.account("free")
    sent = await ledger.send(account, "While etcd is away from one: what is a delta?")
    assert_exact(sent)
    net.heal(names[leader], "etcd")
    await eventually(lambda: same_leading(platform, other), 20, "the old leader follows")
    # etcd's history of the leader key: taken only when free, the last by the other one.
    history = await leader_history(cluster.etcd, start)
    holder: bytes | None = None
    for kind, value in history:
        if kind == "put":
            assert holder is None, f"the leader key was taken while {holder!r} held it"
        holder = value if kind == "put" else None
    ids = [scheduler_id(child_of(platform, name)).encode() for name in names]
    assert holder == ids[other], (history, ids)
    await ledger.check()


# Shorter than the gateways' liveness window (2 s): the gateway waits for Redis and goes on (or,
# when its reconnect takes it past the window, is taken over). Longer: the other gateway takes
# the answer over from its log, and the edge follows it there. Either way, exactly once.
@pytest.mark.parametrize("away_s", [1.0, 5.0])
async def test_redis_unreachable_mid_answer_the_answer_ends_whole(
    cluster: Cluster, ledger: Ledger, away_s: float
) -> None:
    platform, net = cluster.platform, cluster.network
    cut: list[str] = []

    async def cut_gateway_from_redis(sent: Sent) -> None:
        gateway = await streaming_gateway(ledger.http, platform)
        net.cut(gateway.name, "redis")
        cut.append(gateway.name)
        asyncio.get_running_loop().call_later(away_s, net.heal, gateway.name, "redis")

    account = await ledger.account("plus")
    sent = await ledger.send(account, f"Redis away {away_s} s: tell me about glaciers.",
                             act=cut_gateway_from_redis)  # fmt: skip
    assert sent.accepted, (sent.status, sent.body)
    assert_exact(sent)
    pause = sent.pause_s()
    print(f"redis away from {cut} for {away_s} s: the answer paused {pause:.2f} s")
    assert pause < away_s + FAILOVER_PAUSE_S
    await ledger.check()


async def test_postgres_unreachable_the_user_is_told_and_nothing_is_stored(
    cluster: Cluster, ledger: Ledger
) -> None:
    net = cluster.network
    account = await ledger.account("free")
    for gateway in ("gateway", "gateway-1"):
        net.cut(gateway, "postgres")
    began = time.monotonic()
    sent = await ledger.send(account, "The store is away: what is a moraine?")
    took_s = time.monotonic() - began
    print(f"postgres away: {sent.status} after {took_s:.2f} s: {sent.body}")
    assert sent.status == 503, (sent.status, sent.body)
    assert took_s < 10.0
    net.heal_all()
    # Once it is back, nothing of the refused message is stored, and nothing was charged.
    await ledger.check()
    again = await ledger.send(account, "The store is back: what is a moraine?")
    assert_exact(again)
    await ledger.check()


async def same_leading(platform: LocalPlatform, leader: int) -> bool:
    return (await leading(platform, SCHEDULERS)) == [index == leader for index in range(2)]
